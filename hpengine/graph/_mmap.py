"""safetensors files read as views of one copy-on-write memory mapping, and written without a copy.

``safetensors`` is an 8-byte little-endian header length ``n``, ``n`` bytes of JSON
(``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``, offsets
relative to the end of the header) and the raw little-endian data. :func:`map_safetensors` maps
the whole file once with ``torch.UntypedStorage.from_file(path, shared=False)``: a private
(``MAP_PRIVATE``) mapping, so mapping costs no reading, a page is read from disk when a tensor
first touches it, and an in-place edit of a tensor copies that page instead of writing the file.

Mapping is safe because the index store never rewrites a generation's files in place: a writer
writes a new generation and unlinks old ones, and on Linux an unlinked file stays readable while
it is mapped. (Truncating a mapped file by hand would make a later access fail with SIGBUS.)

:func:`write_safetensors` writes the file safetensors' own ``save_file`` writes (byte for byte
without metadata; with it, its keys sorted, where safetensors' order varies by process) from the
tensors' memory: ``save_file`` first copies every tensor into one bytes object, which doubles the
memory of saving a large index.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from torch import Tensor

from hpengine.graph._files import fd_path, open_read, write_atomic
from hpengine.graph._store import IndexFormatError

#: safetensors dtype names -> torch dtypes (the ones this torch has)
_DTYPES = {name: getattr(torch, attr) for name, attr in (
    ("F64", "float64"), ("F32", "float32"), ("F16", "float16"), ("BF16", "bfloat16"),
    ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"), ("I64", "int64"), ("I32", "int32"),
    ("I16", "int16"), ("I8", "int8"), ("U64", "uint64"), ("U32", "uint32"), ("U16", "uint16"),
    ("U8", "uint8"), ("BOOL", "bool")) if hasattr(torch, attr)}
#: the order safetensors writes tensors in: by dtype, in reverse of this list, then by name
_WRITE_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64",
                "I64", "U64"]
#: largest header accepted (safetensors' own limit)
_MAX_HEADER = 100_000_000


def map_safetensors(path: str | os.PathLike, root: str | os.PathLike | None = None) -> dict[str, Tensor]:
    """Every tensor of the safetensors file ``path`` as a CPU view of one private mapping of it.

    The header is checked in full before any tensor is made (:func:`_read_header`). A tensor
    whose offset is not a multiple of its element size (never written by safetensors, which
    aligns them) is copied out of the mapping instead.

    Args:
        path: the ``.safetensors`` file.
        root: the folder it must lie in (an index folder): no link below it is followed
            (:func:`hpengine.graph._files.open_read`; default: ``path``'s own folder).

    Returns:
        name -> tensor (``__metadata__`` is skipped); all of them share one file-backed storage.

    Raises:
        FileNotFoundError: ``path`` is missing (it went while it was being mapped).
        IndexFormatError: the file is not valid safetensors; one line naming ``path``.
    """
    path = Path(path)
    fd = open_read(path, root)
    try:  # the size is checked against the file opened, so the header is read from the mapping itself
        size = _size(path, os.fstat(fd).st_size)
        storage = torch.UntypedStorage.from_file(fd_path(fd, path), shared=False, nbytes=size)
    except RuntimeError as exc:
        raise IndexFormatError(f"{path}: cannot memory-map the file ({str(exc).splitlines()[0][:200]})") from exc
    finally:
        os.close(fd)
    raw = torch.empty(0, dtype=torch.uint8).set_(storage)  # [size] uint8, the whole file
    start, entries = _read_header(path, lambda offset, n: raw[offset:offset + n].numpy().tobytes(), size)
    tensors = {}
    for begin, end, name, dtype, shape in entries:
        data = raw[start + begin:start + end]  # [end - begin] uint8 view of the mapping
        if (start + begin) % dtype.itemsize:
            data = data.clone()  # a view must be aligned to its element size
        tensors[name] = data.view(dtype).view(shape)
    return tensors


#: madvise advice: reclaim these pages now (Linux 5.4+); a file page is read again when touched
_MADV_PAGEOUT = 21


def _file_mapped(lo: int, hi: int) -> bool:
    """Whether the addresses ``[lo, hi)`` lie in one mapping of a file (``/proc/self/maps``)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if start <= lo and hi <= end:
                    return len(fields) == 6 and fields[5].startswith("/")
    except OSError:
        pass
    return False


def page_out(t: Tensor) -> bool:
    """Hand the resident pages of a memory-mapped tensor back to the kernel (``MADV_PAGEOUT``).

    A pass over every row of a mapped embedding matrix (building a FAISS index from it) leaves all
    its pages resident: at a million passages 7 GB of resident set that the queries after it do
    not read. Paging them out loses nothing: a page is read from the file again when touched (a
    page an edit copied stays). Does nothing for a tensor that is not a view of a file mapping
    (its pages would go to swap), off the CPU or Linux, or where the kernel refuses the advice.

    Returns:
        Whether the advice was given and taken.
    """
    import ctypes
    import mmap
    import sys

    if t.device.type != "cpu" or not sys.platform.startswith("linux") or not t.numel():
        return False
    start = t.data_ptr()
    page = mmap.PAGESIZE
    lo, hi = -(-start // page) * page, (start + t.numel() * t.element_size()) // page * page
    if hi <= lo or not _file_mapped(lo, hi):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc.madvise(lo, hi - lo, _MADV_PAGEOUT) == 0
    except (OSError, AttributeError):
        return False


def mapped_empty(path: str | os.PathLike, shape: tuple, dtype: torch.dtype) -> Tensor:
    """An uninitialised CPU tensor backed by a shared mapping of a new file ``path`` (replaced if
    it exists): what is written to it goes to the file, so its pages can be handed back to the
    kernel (:func:`page_out`) and read again when touched, where anonymous memory would have to
    stay resident. The mapping lives as long as the tensor, even after the file is removed.

    Example:
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as d:
        ...     t = mapped_empty(pathlib.Path(d) / "rows.bin", (2, 3), torch.float16)
        ...     t.fill_(1.0).sum().item()
        6.0
    """
    path = Path(path)
    path.unlink(missing_ok=True)
    numel = 1
    for n in shape:
        numel *= int(n)
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    # created exclusively, never through a link planted at the path
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        return torch.from_file(fd_path(fd, path), shared=True, size=numel, dtype=dtype).view(shape)
    finally:
        os.close(fd)


def read_safetensors(path: str | os.PathLike, root: str | os.PathLike | None = None) -> dict[str, Tensor]:
    """Every tensor of the safetensors file ``path`` read into its own CPU memory (no mapping).

    The header is checked as :func:`map_safetensors` checks it; each tensor is read straight into
    a fresh tensor, so memory holds one copy of the data (safetensors' own ``load_file`` maps the
    file on the CPU, and a copy of that would touch every page twice).

    Raises:
        FileNotFoundError: ``path`` is missing.
        IndexFormatError: the file is not valid safetensors; one line naming ``path``.
    """
    path = Path(path)
    with os.fdopen(open_read(path, root), "rb", buffering=0) as f:  # no link followed below root
        size = _size(path, os.fstat(f.fileno()).st_size)
        start, entries = _read_header(path, lambda offset, n: os.pread(f.fileno(), n, offset), size)
        tensors = {}
        for begin, end, name, dtype, shape in entries:
            out = torch.empty(shape, dtype=dtype)
            view = memoryview(out.view(-1).view(torch.uint8).numpy())  # [end - begin] bytes of out
            done = 0
            while done < end - begin:  # one read returns at most ~2 GiB
                got = os.preadv(f.fileno(), [view[done:]], start + begin + done)
                if got <= 0:
                    raise IndexFormatError(f"{path}: tensor {name} ends past the end of the file (truncated "
                                           f"while read)")
                done += got
            tensors[name] = out
    return tensors


def write_safetensors(tensors: dict[str, Tensor], path: str | os.PathLike, metadata: dict | None = None,
                      root: str | os.PathLike | None = None) -> None:
    """Write ``tensors`` (contiguous CPU tensors) to ``path`` as safetensors' ``save_file`` does,
    straight from their memory (no copy of the data), durably: a new file created exclusively,
    fsynced and renamed over ``path`` (:func:`hpengine.graph._files.write_atomic`; no link below
    ``root`` followed).

    Raises:
        ValueError: a tensor is not a contiguous CPU tensor, or its dtype has no safetensors name.
    """
    names = {dtype: name for name, dtype in _DTYPES.items()}
    entries = []
    for name, tensor in tensors.items():
        if tensor.device.type != "cpu" or not tensor.is_contiguous() or tensor.dtype not in names:
            raise ValueError(f"write_safetensors: tensor {name!r} must be a contiguous CPU tensor of a "
                             f"safetensors dtype (got {tensor.dtype} on {tensor.device})")
        entries.append((-_WRITE_ORDER.index(names[tensor.dtype]), name, tensor))
    entries.sort(key=lambda e: e[:2])
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))  # safetensors' own order varies by process
    for _, name, tensor in entries:
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": names[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    def write(f) -> None:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for _, _, tensor in entries:
            if tensor.numel():
                f.write(memoryview(tensor.view(-1).view(torch.uint8).numpy()))

    write_atomic(path, write, root)


def _size(path: Path, size: int | None = None) -> int:
    size = os.stat(path).st_size if size is None else size
    if size < 8:
        raise IndexFormatError(f"{path}: not a safetensors file, shorter than its 8-byte header length "
                               f"(got {size} bytes)")
    return size


def _read_header(path: Path, read, size: int) -> tuple[int, list]:
    """The header of a safetensors file of ``size`` bytes, checked in full: known dtypes, shapes of
    non-negative ints, ``data_offsets`` inside the file and matching dtype and shape, no two
    tensors overlapping. ``read(offset, n)`` gives bytes of the file.

    Returns:
        the offset where the data starts, and ``(begin, end, name, dtype, shape)`` per tensor
        in file order.
    """
    header_len = int.from_bytes(read(0, 8), "little")
    if header_len > min(size - 8, _MAX_HEADER):
        raise IndexFormatError(f"{path}: safetensors header of {header_len} bytes does not fit in the file "
                               f"(got a file of {size} bytes; truncated or not safetensors)")
    try:
        header = json.loads(read(8, header_len).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise IndexFormatError(f"{path}: safetensors header is not JSON ({str(exc)[:120]})") from exc
    if not isinstance(header, dict):
        raise IndexFormatError(f"{path}: safetensors header must be a JSON object (got {type(header).__name__})")
    data_size = size - 8 - header_len
    entries = []  # (begin, end, name, dtype, shape)
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict):
                raise IndexFormatError(f"{path}: safetensors __metadata__ must be an object (got {info!r:.80})")
            continue
        entries.append(_entry(path, name, info, data_size))
    entries.sort(key=lambda e: (e[0], e[1]))
    for before, after in zip(entries, entries[1:]):
        if after[0] < before[1]:
            raise IndexFormatError(f"{path}: tensors {before[2]} and {after[2]} overlap (bytes "
                                   f"{before[0]}..{before[1]} and {after[0]}..{after[1]})")
    return 8 + header_len, entries


def _entry(path: Path, name: str, info, data_size: int) -> tuple:
    """One header entry checked: ``(begin, end, name, dtype, shape)``."""
    if not isinstance(info, dict):
        raise IndexFormatError(f"{path}: safetensors entry {name!r} must be an object (got {info!r:.80})")
    dtype = _DTYPES.get(info.get("dtype")) if isinstance(info.get("dtype"), str) else None
    if dtype is None:
        raise IndexFormatError(f"{path}: tensor {name} has an unknown dtype (expected one of {sorted(_DTYPES)}, "
                               f"got {info.get('dtype')!r:.40})")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not (isinstance(shape, list) and all(type(s) is int and s >= 0 for s in shape)):
        raise IndexFormatError(f"{path}: tensor {name} must have a shape of non-negative ints (got {shape!r:.80})")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
        raise IndexFormatError(f"{path}: tensor {name} must have data_offsets [begin, end] (got {offsets!r:.80})")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise IndexFormatError(f"{path}: tensor {name} has data_offsets {offsets} outside the {data_size} data "
                               f"bytes of the file (truncated or corrupt)")
    nbytes = math.prod(shape) * dtype.itemsize
    if end - begin != nbytes:
        raise IndexFormatError(f"{path}: tensor {name} of dtype {info['dtype']} and shape {shape} needs {nbytes} "
                               f"bytes (got data_offsets {offsets}: {end - begin} bytes)")
    return begin, end, name, dtype, shape
