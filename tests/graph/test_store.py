"""The index store keeps a user's data: a read changes nothing, cleanup touches only what hpengine
can prove it wrote, a folder is an index only when its full format says so, writers take turns
under one lock, and a reader always sees one complete generation."""
import json
import multiprocessing as mp
import os
import shutil
import time

import pytest
import torch

from hpengine.config import GraphConfig
from hpengine.graph import Index, IndexFormatError, IndexLockedError, IndexStore, add_passages, build_index
from hpengine.graph._corpus import Passage
from hpengine.jobs import check_output_dir
from hpengine.testing._fakes import HashingEncoder, ListExtractor

TABLE = {
    "Alpha": [("Alpha was directed by Bea Stone.", ["Alpha", "Bea Stone"])],
    "Bea Stone": [("Bea Stone was born in Kell.", ["Bea Stone", "Kell"])],
    "Kell": [("Kell lies on the river Oro.", ["Kell", "Oro"])],
    "Oro": [("The Oro river flows into the sea.", ["Oro River", "sea"])],
    "Sea": [("The sea is wide.", ["sea"])],
    "Wind": [("Wind blows over Kell.", ["Wind", "Kell"])],
}
CFG = GraphConfig(synonym_threshold=0.55)


def build(*titles):
    return build_index([Passage(t, f"text of {t}") for t in titles], extractor=ListExtractor(TABLE),
                       encoder=HashingEncoder(), graph_cfg=CFG)[0]


def tree(folder) -> dict:
    """Every file under ``folder`` with its bytes (what a user would lose)."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            p = os.path.join(root, name)
            out[os.path.relpath(p, folder)] = open(p, "rb").read()
    return out


# ------------------------------------------------------------- reads delete nothing
def test_a_users_backup_copy_survives_reads_and_writes(tmp_path):
    idx = build("Alpha", "Kell").save(tmp_path / "idx")
    shutil.copytree(idx, tmp_path / "idx.bak")  # what people do before overwrite=true
    (tmp_path / ".idx.tmp-4242-deadbeef").mkdir()  # names the old format used for its own folders
    (tmp_path / ".idx.tmp-4242-deadbeef" / "mine.txt").write_text("the user's")
    before = {name: tree(tmp_path / name) for name in ("idx.bak", ".idx.tmp-4242-deadbeef")}
    for _ in range(2):
        Index.load(idx)
    build("Alpha", "Kell", "Oro").save(idx)
    Index.load(idx)
    assert {name: tree(tmp_path / name) for name in before} == before
    assert Index.load(tmp_path / "idx.bak").num_passages == 2  # the copy is an index of its own


def test_a_read_writes_and_deletes_nothing_even_with_leftovers(tmp_path):
    idx = build("Alpha").save(tmp_path / "idx")
    store = IndexStore(idx)
    token = store.token()
    left = idx / ".tmp-0123456789abcdef"  # what a killed writer leaves: owner-marked
    left.mkdir()
    (left / ".hpengine-owner").write_text(token)
    before = tree(idx)
    Index.load(idx)
    assert tree(idx) == before


def test_cleanup_removes_only_owner_marked_folders(tmp_path):
    idx = build("Alpha").save(tmp_path / "idx")
    token = IndexStore(idx).token()
    ours = idx / ".tmp-00000000000000aa"
    ours.mkdir()
    (ours / ".hpengine-owner").write_text(token)
    foreign = {idx / ".tmp-00000000000000bb": None, idx / "gen-000099": "0" * 32, idx / "notes": None}
    for folder, marker in foreign.items():
        folder.mkdir()
        (folder / "data.txt").write_text("the user's")
        if marker is not None:  # a marker of another store is no proof either
            (folder / ".hpengine-owner").write_text(marker)
    build("Alpha", "Kell").save(idx)
    build("Alpha", "Kell", "Oro").save(idx)
    assert not ours.exists()
    assert all((folder / "data.txt").read_text() == "the user's" for folder in foreign)
    assert sorted(n for n in os.listdir(idx) if n.startswith("gen-")) == ["gen-000002", "gen-000003", "gen-000099"]


# ------------------------------------------------- an index only by its full format
@pytest.mark.parametrize("manifest", [{}, {"format_version": 2}, {"format_version": 1}, [1, 2], "not json {"])
def test_a_folder_with_an_index_json_is_not_an_index(tmp_path, manifest):
    user = tmp_path / "data"
    (user / "sub").mkdir(parents=True)
    (user / "sub" / "results.csv").write_text("a,b\n")
    (user / "index.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    before = tree(user)
    assert not IndexStore(user).is_index()
    with pytest.raises(FileExistsError, match="not an hpengine index"):
        check_output_dir(str(user), overwrite=True)
    with pytest.raises(FileExistsError, match="not an hpengine index"):
        build("Alpha").save(user)
    assert tree(user) == before and sorted(os.listdir(user)) == ["index.json", "sub"]


def test_overwrite_keeps_the_users_other_files(tmp_path):
    idx = build("Alpha").save(tmp_path / "idx")
    (idx / "README.txt").write_text("my notes on this index")
    check_output_dir(str(idx), overwrite=True)
    build("Kell", "Oro").save(idx)
    assert (idx / "README.txt").read_text() == "my notes on this index"
    assert Index.load(idx).num_passages == 2


def test_a_first_build_that_commits_nothing_leaves_no_folder(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with IndexStore(tmp_path / "new").writer():
            raise RuntimeError("boom")
    assert not (tmp_path / "new").exists()


def test_killed_first_build_leftovers_may_receive_an_index(tmp_path):
    new = tmp_path / "new"
    with IndexStore(new).writer() as writer:
        writer.new_folder()  # written, never committed; then "killed": left as it is
        writer.discard_leftovers = lambda: None
        writer.committed = True  # keep the folder as a kill would
    assert IndexStore(new).holds_only_leftovers() and not IndexStore(new).is_index()
    check_output_dir(str(new), overwrite=False)
    build("Alpha").save(new)
    assert not [n for n in os.listdir(new) if n.startswith(".tmp-")]


# -------------------------------------------------------------- one writer at a time
def test_a_second_writer_waits_then_names_the_holder(tmp_path):
    idx = build("Alpha").save(tmp_path / "idx")
    before = tree(idx / "gen-000001")
    with IndexStore(idx).writer(command="hpengine add"):
        start = time.monotonic()
        with pytest.raises(IndexLockedError, match=rf"being written by pid {os.getpid()} .*hpengine add"):
            build("Kell").save(idx, lock_timeout=0.3)
        assert 0.3 <= time.monotonic() - start < 5
    assert tree(idx / "gen-000001") == before
    build("Kell").save(idx, lock_timeout=0.3)  # free again
    assert Index.load(idx).passages[0].title == "Kell"


def _forked():
    torch.set_num_threads(1)  # a forked child must not enter the parent's OpenMP pool (it hangs)


def _add_under_lock(path, titles, go):
    _forked()
    go.wait()
    with IndexStore(path).writer(timeout=60) as writer:
        index = Index.load(path)
        time.sleep(0.3)  # both writers have read the index before either saves, without the lock
        grown, _ = add_passages(index, [Passage(t, f"text of {t}") for t in titles], extractor=ListExtractor(TABLE),
                                encoder=HashingEncoder(), graph_cfg=CFG)
        grown.save(path, writer=writer)


def test_two_concurrent_adds_keep_both(tmp_path):
    idx = build("Alpha").save(tmp_path / "idx")
    ctx = mp.get_context("fork")
    go = ctx.Event()
    procs = [ctx.Process(target=_add_under_lock, args=(idx, titles, go)) for titles in (["Kell", "Oro"], ["Sea"])]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert sorted(p.title for p in Index.load(idx).passages) == ["Alpha", "Kell", "Oro", "Sea"]


def _save_loop(path, stop):
    _forked()
    small, large = build("Alpha", "Kell"), build("Alpha", "Bea Stone", "Kell", "Oro", "Sea")
    i = 0
    while not stop.is_set():
        (small if i % 2 else large).save(path)
        i += 1


def test_readers_see_one_complete_generation_during_saves(tmp_path):
    idx = build("Alpha", "Kell").save(tmp_path / "idx")
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    writer = ctx.Process(target=_save_loop, args=(idx, stop))
    writer.start()
    seen, failures = set(), []
    try:
        for _ in range(200):
            try:
                index = Index.load(idx)
            except Exception as exc:  # noqa: BLE001 - every failure counts
                failures.append(repr(exc))
                continue
            seen.add((index.num_passages, index.num_facts, len(index.entities)))
    finally:
        stop.set()
        writer.join(60)
    generation = IndexStore(idx).generation().number
    assert failures == []
    whole = {(i.num_passages, i.num_facts, len(i.entities))
             for i in (build("Alpha", "Kell"), build("Alpha", "Bea Stone", "Kell", "Oro", "Sea"))}
    assert seen <= whole, seen  # whole generations only, never a mix
    assert generation > 3, "the writer did not commit during the reads"


def test_a_writer_of_one_index_does_not_block_another(tmp_path):
    a, b = build("Alpha").save(tmp_path / "a"), tmp_path / "b"
    with IndexStore(a).writer():
        build("Kell").save(b, lock_timeout=0)
    assert Index.load(b).passages[0].title == "Kell"


def test_disk_full_keeps_the_index_and_says_so(tmp_path, monkeypatch):
    idx = build("Alpha").save(tmp_path / "idx")
    before = tree(idx)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("hpengine.graph._index.write_json_durable", full)
    with pytest.raises(IndexFormatError.__mro__[1], match="No space left on device.*as it was"):
        build("Kell").save(idx)
    monkeypatch.undo()
    after = tree(idx)
    for name in (".hpengine.lock", ".hpengine.holder"):
        after.pop(name, None), before.pop(name, None)
    assert after == before
    assert Index.load(idx).passages[0].title == "Alpha"
