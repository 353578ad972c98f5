"""Index.load memory-maps the tensors file: it equals a copy load, the tensors are views of the
file (so loading reads no embedding bytes), a corrupt header is a one-line error naming the file,
the value checks run as ``verify`` says, and neither a new generation nor an in-place edit of a
mapped tensor changes what the other side sees."""
import hashlib
import json
import os
import struct

import psutil
import pytest
import torch
from safetensors.torch import load_file, save_file

from hpengine.config import GraphConfig
from hpengine.graph import Index, IndexFormatError, build_index
from hpengine.graph import _index as index_module
from hpengine.graph._corpus import Passage
from hpengine.graph._mmap import map_safetensors, read_safetensors
from hpengine.testing import with_devices
from hpengine.testing._fakes import HashingEncoder, ListExtractor

TABLE = {
    "Alpha": [("Alpha was directed by Bea Stone.", ["Alpha", "Bea Stone"]),
              ("Alpha premiered in 1999.", ["Alpha", "1999"])],
    "Bea Stone": [("Bea Stone was born in Kell.", ["Bea Stone", "Kell"])],
    "Kell": [("Kell lies on the river Oro.", ["Kell", "Oro"]), ("Kell is a town.", ["Kell"])],
    "Oro": [("The Oro river flows into the sea.", ["Oro River", "sea"])],
}
NAMES = ("fact_passage", "fact_entity_raw", "synonyms", "fact_emb", "entity_emb", "passage_emb")


def build(*titles):
    return build_index([Passage(t, f"text of {t}") for t in titles], extractor=ListExtractor(TABLE),
                       encoder=HashingEncoder(), graph_cfg=GraphConfig(synonym_threshold=0.55))[0]


@pytest.fixture
def saved(tmp_path):
    return build("Alpha", "Bea Stone", "Kell", "Oro").save(tmp_path / "idx")


def tensors_file(idx):
    return idx / "gen-000001" / "tensors.safetensors"


def mapping_of(t: torch.Tensor) -> str:
    """The file /proc/self/maps names for the memory under ``t`` ('' for anonymous memory)."""
    address = t.data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            low, high = (int(x, 16) for x in fields[0].split("-"))
            if low <= address < high:
                return fields[5].strip() if len(fields) > 5 else ""
    return ""


def rewrite_header(path, edit):
    """Rewrite the safetensors header of ``path`` as ``edit(header)`` returns it, data unchanged."""
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = edit(json.loads(data[8:8 + n]))
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


# ------------------------------------------------------------------ equal to a copy, and mapped
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mapped_load_equals_copy_load(tmp_path, dtype):
    index = build("Alpha", "Bea Stone", "Kell", "Oro")
    for name in ("fact_emb", "entity_emb", "passage_emb"):
        setattr(index, name, getattr(index, name).to(dtype))
    path = index.save(tmp_path / "idx")
    mapped, copied = Index.load(path), Index.load(path, mmap=False)
    assert (mapped.passages, mapped.facts, mapped.entities, mapped.meta) == \
        (copied.passages, copied.facts, copied.entities, copied.meta)
    for name in NAMES:
        a, b = getattr(mapped, name), getattr(copied, name)
        assert a.dtype == b.dtype == getattr(index, name).dtype and torch.equal(a, b), name
    reference = load_file(str(tensors_file(path)))  # safetensors' own reader
    assert sorted(reference) == sorted(n for n in NAMES)
    for name, t in reference.items():
        assert torch.equal(getattr(mapped, name), t) and torch.equal(getattr(copied, name), t), name
    assert torch.equal(mapped.graph.fact_entity, copied.graph.fact_entity)
    torch.testing.assert_close(mapped.graph.transition().to_dense(), copied.graph.transition().to_dense())


def test_tensors_are_views_of_the_file(saved):
    path = tensors_file(saved)
    mapped, copied = Index.load(saved), Index.load(saved, mmap=False)  # mmap: True on the CPU by default
    storages = {getattr(mapped, n).untyped_storage().data_ptr() for n in NAMES}
    assert len(storages) == 1  # one mapping of the whole file, every tensor a view of it
    assert mapped.fact_emb.untyped_storage().nbytes() == os.path.getsize(path)
    assert mapping_of(mapped.fact_emb) == str(path)
    assert mapping_of(copied.fact_emb) != str(path)


@with_devices
def test_mapped_load_onto_a_device_equals_copy_load(saved, device):
    mapped, copied = Index.load(saved, device=device, mmap=True), Index.load(saved, device=device, mmap=False)
    for name in NAMES:
        assert getattr(mapped, name).device == torch.device(device) and \
            torch.equal(getattr(mapped, name), getattr(copied, name)), name


def test_load_argument_errors(saved):
    with pytest.raises(ValueError, match="verify must be one of 'auto', True, False"):
        Index.load(saved, verify="yes")
    with pytest.raises(TypeError, match="mmap must be None, True or False"):
        Index.load(saved, mmap="yes")


# ---------------------------------------------------------------------------- at scale: no reading
@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """200k facts x 384 float32 (~300 MB of fact_emb): every row the same unit vector."""
    h, v, p, d = 200_000, 1_000, 1_000, 384
    facts = torch.arange(h)
    index = Index(passages=[Passage(f"p{i}", "") for i in range(p)], facts=[f"f{i}" for i in range(h)],
                  entities=[f"e{i}" for i in range(v)], fact_passage=facts % p,
                  fact_entity_raw=torch.stack([facts, facts % v]), synonyms=torch.zeros(2, 0, dtype=torch.int64),
                  fact_emb=torch.full((h, d), d ** -0.5), entity_emb=torch.full((v, d), d ** -0.5),
                  passage_emb=torch.full((p, d), d ** -0.5))
    path = index.save(tmp_path_factory.mktemp("large") / "idx")
    del index
    return path


def test_large_index_loads_without_reading_its_embeddings(large):
    process = psutil.Process()
    before = process.memory_info().rss
    mapped = Index.load(large, verify=False)
    grown = process.memory_info().rss - before
    assert mapped.fact_emb.shape == (200_000, 384) and mapping_of(mapped.fact_emb) == str(tensors_file(large))
    assert grown < 50 * 2**20, f"RSS grew by {grown / 2**20:.0f} MiB"
    assert float(mapped.fact_emb[123_456].norm()) == pytest.approx(1.0)  # one page read on demand
    before = process.memory_info().rss
    copied = Index.load(large, mmap=False, verify=False)  # the measure sees a copy: it reads the 300 MB
    assert process.memory_info().rss - before > 250 * 2**20
    assert torch.equal(copied.fact_emb[::997], mapped.fact_emb[::997])


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_index_page_out_hands_back_what_scattered_reads_mapped(large):
    """Scattered row reads (what exact re-scoring does) leave mapped pages resident;
    ``Index.page_out`` hands them back, keeps every value, and leaves a copied index alone."""
    mapped = Index.load(large, verify=False)
    rows = torch.randperm(200_000, generator=torch.Generator().manual_seed(0))[:20_000]
    want = mapped.fact_emb[rows].clone()  # ~20k scattered rows of 1.5 KiB: most pages of the 300 MB
    before = _rss_file_kib()
    paged = mapped.page_out()
    if not paged:
        pytest.skip("this kernel refuses MADV_PAGEOUT")
    assert paged == len(NAMES) - 1  # every tensor of the index but the empty synonym pairs
    assert before - _rss_file_kib() > 100 << 10
    assert torch.equal(mapped.fact_emb[rows], want)  # read again from the file
    assert Index.load(large, mmap=False, verify=False).page_out() == 0


def test_verify_auto_skips_value_checks_only_of_large_mapped_embeddings(saved, monkeypatch):
    path = tensors_file(saved)
    tensors = load_file(str(path))
    tensors["fact_emb"][2] = float("nan")
    save_file(tensors, str(path))
    for kwargs in ({}, dict(verify=True), dict(mmap=False), dict(mmap=False, verify=True)):
        with pytest.raises(IndexFormatError, match="fact_emb has non-finite values") as exc:
            Index.load(saved, **kwargs)
        assert str(path) in str(exc.value)
    monkeypatch.setattr(index_module, "VERIFY_AUTO_MAX_BYTES", 1024)  # the index is now "large"
    assert torch.isnan(Index.load(saved).fact_emb[2]).all()  # mapped: not checked
    with pytest.raises(IndexFormatError, match="non-finite"):
        Index.load(saved, verify=True)  # mapped, checked on request
    with pytest.raises(IndexFormatError, match="non-finite"):
        Index.load(saved, mmap=False)  # a copy read every byte anyway: checked
    assert torch.isnan(Index.load(saved, mmap=False, verify=False).fact_emb[2]).all()


def test_zero_rows_are_counted_across_check_blocks(saved, monkeypatch):
    path = tensors_file(saved)
    tensors = load_file(str(path))
    tensors["fact_emb"][[1, 4]] = 0
    save_file(tensors, str(path))
    message = "fact_emb has 2 all-zero rows \\(first: row 1\\)"
    for rows in (1 << 16, 2):  # one block; blocks of two rows (the zero rows in blocks 0 and 2)
        monkeypatch.setattr(index_module, "_CHECK_ROWS", rows)
        with pytest.raises(IndexFormatError, match=message):
            Index.load(saved)
    assert int((Index.load(saved, verify=False).fact_emb == 0).all(1).sum()) == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_value_checks_flag_exactly_non_finite_values_and_zero_rows(dtype):
    index = build("Alpha", "Kell")
    info = torch.finfo(dtype)

    def check_with(row_values):
        emb = index.fact_emb.to(dtype)
        emb[1] = 0
        emb[1, : len(row_values)] = torch.tensor(row_values, dtype=torch.float64).to(dtype)
        checked = Index(**{**index.__dict__, "fact_emb": emb, "_graph": None, "_lookups": None})
        checked.check()

    check_with([info.max] * index.fact_emb.shape[1])  # its L1 norm overflows, yet every value is finite
    check_with([info.smallest_normal])  # a tiny value: not an all-zero row
    check_with([-info.max, info.max])
    for bad in ([float("inf")], [1.0, float("nan")], [-float("inf"), info.max]):
        with pytest.raises(IndexFormatError, match="fact_emb has non-finite values"):
            check_with(bad)
    with pytest.raises(IndexFormatError, match="fact_emb has 1 all-zero rows \\(first: row 1\\)"):
        check_with([0.0, -0.0])


# ------------------------------------------------------------------------- corrupt headers
def truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def shorter_than_a_header(path):
    path.write_bytes(b"\x10\x00")


def header_longer_than_file(path):
    data = path.read_bytes()
    path.write_bytes(struct.pack("<Q", len(data)) + data[8:])


def header_not_json(path):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    path.write_bytes(data[:8] + b"{" + b"x" * (n - 1) + data[8 + n:])


def offsets_beyond_end(path):
    def edit(h):
        begin, end = h["fact_emb"]["data_offsets"]
        h["fact_emb"]["data_offsets"] = [begin + 10**6, end + 10**6]
        return h
    rewrite_header(path, edit)


def offsets_not_matching_shape(path):
    rewrite_header(path, lambda h: {**h, "fact_emb": {**h["fact_emb"], "shape": [h["fact_emb"]["shape"][0], 7]}})


def overlapping_tensors(path):
    rewrite_header(path, lambda h: {**h, "synonyms": {**h["synonyms"], "dtype": "I64", "shape": [2, 1],
                                                      "data_offsets": [h["fact_passage"]["data_offsets"][0],
                                                                       h["fact_passage"]["data_offsets"][0] + 16]}})


def unknown_dtype(path):
    rewrite_header(path, lambda h: {**h, "fact_emb": {**h["fact_emb"], "dtype": "Q7"}})


def float_ids(path):  # fact_passage's header says F32: the bytes fit, the dtype is wrong for ids
    def edit(h):
        begin, _ = h["fact_passage"]["data_offsets"]
        n = h["fact_passage"]["shape"][0]
        h["fact_passage"].update(dtype="F32", shape=[n], data_offsets=[begin, begin + 4 * n])
        return h
    rewrite_header(path, edit)


def integer_embeddings(path):
    def edit(h):
        h["entity_emb"]["dtype"] = "I32"
        return h
    rewrite_header(path, edit)


HEADER_CORRUPTIONS = {
    truncated: "outside the .* data bytes", shorter_than_a_header: "shorter than its 8-byte header length",
    header_longer_than_file: "does not fit in the file", header_not_json: "header is not JSON",
    offsets_beyond_end: "fact_emb has data_offsets .* outside", offsets_not_matching_shape: "fact_emb .* needs",
    overlapping_tensors: "overlap", unknown_dtype: "fact_emb has an unknown dtype .*'Q7'",
    float_ids: "fact_passage must be int64", integer_embeddings: "entity_emb must be floating point",
}


@pytest.mark.parametrize("corrupt", list(HEADER_CORRUPTIONS), ids=lambda f: f.__name__)
def test_corrupt_header_is_a_one_line_error_naming_the_file(saved, corrupt):
    path = tensors_file(saved)
    corrupt(path)
    with pytest.raises(IndexFormatError, match=HEADER_CORRUPTIONS[corrupt]) as exc:
        Index.load(saved, mmap=True)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(IndexFormatError, match=HEADER_CORRUPTIONS[corrupt]) as exc:  # and the copy load
        Index.load(saved, mmap=False)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_unaligned_tensor_is_copied_out_of_the_mapping(tmp_path):
    path = tmp_path / "odd.safetensors"
    values = torch.arange(6, dtype=torch.float32).view(2, 3)
    header = json.dumps({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                         "b": {"dtype": "F32", "shape": [2, 3], "data_offsets": [1, 25]}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x07" + values.numpy().tobytes())
    for read in (map_safetensors, read_safetensors):
        tensors = read(path)
        assert tensors["a"].tolist() == [7] and torch.equal(tensors["b"], values)


# ------------------------------------------------------------- writers and edits, mapped readers
def test_new_generations_leave_a_mapped_index_intact(saved):
    mapped = Index.load(saved)
    expected = {name: getattr(mapped, name).clone() for name in NAMES}
    build("Alpha", "Kell").save(saved)
    build("Alpha", "Oro").save(saved)  # the mapped generation's files are removed now
    assert not (saved / "gen-000001").exists()
    for name in NAMES:
        assert torch.equal(getattr(mapped, name), expected[name]), name
    assert mapped.summary()["facts"] == 6 and Index.load(saved).num_facts == 3


def test_in_place_edits_of_a_mapped_tensor_never_reach_the_file(saved):
    path = tensors_file(saved)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    first, second = Index.load(saved), Index.load(saved)
    original = second.fact_emb.clone()
    first.fact_emb.zero_()
    first.fact_passage.add_(7)
    assert (first.fact_emb == 0).all() and torch.equal(second.fact_emb, original)  # private pages
    del first
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert torch.equal(Index.load(saved).fact_emb, original)


@pytest.mark.parametrize("metadata", [None, {"format": "pt", "k": "v"}])
def test_write_safetensors_writes_save_files_bytes(tmp_path, metadata):
    """The index's writer (no copy of the data) against safetensors' own save_file: the same
    bytes, for every dtype the index stores, empty and scalar tensors, names in any order."""
    from hpengine.graph._mmap import write_safetensors

    gen = torch.Generator().manual_seed(0)
    tensors = {"z_emb": torch.randn(7, 5, generator=gen).half(), "b16": torch.randn(3, generator=gen).bfloat16(),
               "ids": torch.arange(11), "a": torch.randn(2, 3, generator=gen), "f64": torch.randn(4).double(),
               "i32": torch.arange(6, dtype=torch.int32).view(2, 3), "mask": torch.tensor([True, False, True]),
               "u8": torch.arange(9, dtype=torch.uint8), "empty": torch.zeros(0, 4), "scalar": torch.tensor(2.5),
               "i16": torch.arange(3, dtype=torch.int16), "i8": torch.arange(5, dtype=torch.int8)}
    save_file(tensors, str(tmp_path / "ref.safetensors"), metadata=metadata)
    write_safetensors(tensors, tmp_path / "ours.safetensors", metadata=metadata)
    ours, ref = (tmp_path / "ours.safetensors").read_bytes(), (tmp_path / "ref.safetensors").read_bytes()
    if metadata is None:
        assert ours == ref
    else:  # safetensors writes metadata keys in hash-map order (it varies by process): same header, same data
        n = int.from_bytes(ref[:8], "little")
        assert len(ours) == len(ref) and ours[:8] == ref[:8] and ours[8 + n:] == ref[8 + n:]
        assert json.loads(ours[8:8 + n]) == json.loads(ref[8:8 + n])
    back = load_file(str(tmp_path / "ours.safetensors"))
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], tensors[k]) for k in tensors)
    with pytest.raises(ValueError, match="tensor 'a' must be a contiguous CPU tensor"):
        write_safetensors({"a": torch.randn(3, 4).T}, tmp_path / "bad.safetensors")


def _rss_file_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_page_out_hands_mapped_pages_back_and_keeps_the_values(tmp_path):
    from hpengine.graph import page_out

    t = torch.arange(16 << 20, dtype=torch.int32).view(torch.float32)  # 64 MiB, every value distinct
    save_file({"x": t}, str(tmp_path / "a.safetensors"))
    mapped = map_safetensors(tmp_path / "a.safetensors")["x"]
    assert torch.equal(mapped.view(torch.int32), t.view(torch.int32))  # every page read
    before = _rss_file_kib()
    if not page_out(mapped):
        pytest.skip("this kernel refuses MADV_PAGEOUT")
    assert before - _rss_file_kib() > 32 << 10  # most of the 64 MiB left the resident set
    assert torch.equal(mapped.view(torch.int32), t.view(torch.int32))  # read again from the file
    assert not page_out(torch.zeros(1 << 20))  # anonymous memory: left alone (it would go to swap)
    assert not page_out(mapped[:0])


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_mapped_empty_writes_through_and_pages_out(tmp_path):
    """The build's merged rows: written through a shared file mapping, handed back to the kernel,
    read again intact, also after the file is removed (the build folder goes at commit)."""
    from hpengine.graph import page_out
    from hpengine.graph._mmap import mapped_empty

    path = tmp_path / "merged-fact_emb.bin"
    path.write_bytes(b"stale")  # a killed merge's file is replaced
    t = mapped_empty(path, (1 << 14, 1 << 10), torch.int32)  # 64 MiB
    want = torch.arange(1 << 24, dtype=torch.int32).view(1 << 14, 1 << 10)
    t.copy_(want)
    before = _rss_file_kib()
    if not page_out(t):
        pytest.skip("this kernel refuses MADV_PAGEOUT")
    assert before - _rss_file_kib() > 32 << 10
    path.unlink()
    assert torch.equal(t, want)
    assert mapped_empty(tmp_path / "none.bin", (0, 4), torch.float16).shape == (0, 4)
