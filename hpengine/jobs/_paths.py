"""The paths a job reads and writes, checked before any work: index folders (the store decides
what is an index, :class:`~hpengine.graph.IndexStore`), output folders and files, and that no
output lands on an input."""
from __future__ import annotations

import os
from pathlib import Path

from hpengine.errors import InputNotFoundError, OutputExistsError, UserError
from hpengine.graph import IndexStore


def check_index_dir(path: str, key: str = "index") -> None:
    """``path`` holds a complete saved index (its manifest says so in full); a
    :class:`~hpengine.errors.UserError` naming ``key=`` otherwise. Cheap: run it before any
    model loads. Reads only."""
    if not str(path).strip():
        raise UserError(f"{key}= must name an index folder (got {path!r})")
    p = Path(path)
    if not p.exists():
        raise InputNotFoundError(f"{key}={path!r}: no such index folder")
    if not p.is_dir():
        raise UserError(f"{key}={path!r} is a file, not an index folder")
    try:
        IndexStore(path).check()
    except UserError as exc:
        raise UserError(f"{key}={path!r}: {exc}") from None


def peek_index_meta(path) -> dict | None:
    """The manifest (``index.json``) of the index at ``path``, read without loading the index;
    None when there is none (``Index.load`` says why). Reads only."""
    try:
        return IndexStore(path).read_manifest()
    except UserError:
        return None


def check_writable(path: str | os.PathLike, key: str) -> None:
    """``path`` itself when it is a folder (an index to edit: on a read-only file system even root
    may not write it), else the nearest existing ancestor of ``path``, is a writable folder."""
    here = Path(os.path.abspath(path))
    try:
        parent = here if here.is_dir() else here.parent
        while not parent.exists():
            parent = parent.parent
    except OSError as exc:  # a folder on the way this user may not search
        raise UserError(f"{key}={str(path)!r}: {exc.strerror or exc} ({exc.filename or here})") from None
    if not parent.is_dir():
        raise UserError(f"{key}={str(path)!r}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{key}={str(path)!r}: folder {parent} is not writable")


def check_output_dir(out: str, *, overwrite: bool, key: str = "out") -> None:
    """``out`` may receive a new index: a new or empty folder (or one holding only what a killed
    first build of hpengine left), or an existing index when ``overwrite`` (the old generation
    stays current until the new one is committed, and nothing else in the folder is touched).

    Raises:
        UserError: ``out`` empty, the current folder or a parent of it, a file, a folder with other
            content (an ``index.json`` alone does not make an index), an index without
            ``overwrite``, or not writable (``OutputExistsError`` for the taken cases).
    """
    if not str(out).strip():
        raise UserError(f"{key}= must name the index folder to write (got {out!r})")
    p = Path(out)
    here = Path.cwd().resolve()
    if p.resolve() == here or p.resolve() in here.parents:
        raise OutputExistsError(f"{key}={out!r} is the current folder or holds it; name a new folder for the "
                                f"index, such as {key}=indexes/mine")
    if p.exists() and not p.is_dir():
        raise OutputExistsError(f"{key}={out!r} is a file, not an index folder; refusing to replace it")
    store = IndexStore(out)
    is_index = store.is_index()
    if p.is_dir() and not is_index and any(p.iterdir()) and not store.holds_only_leftovers():
        why = ""
        if (p / "index.json").exists():
            try:
                store.check()
            except UserError as exc:
                why = f" ({exc})"
        raise OutputExistsError(f"{key}={out!r} is a folder that is not an hpengine index{why}; refusing to "
                                f"replace it or anything in it")
    if is_index and not overwrite:
        raise OutputExistsError(f"{key}={out!r} already holds an index; pass overwrite=true to replace it "
                                f"(it is kept until the new one is complete), or use `hpengine add` to grow it")
    check_writable(p, key)


def check_output_file(path: str, key: str = "output", example: str = "eval.json") -> None:
    """``path`` can receive a result file: not a folder, not inside an index folder (whose files
    only the index writes), in a writable folder (created on write). ``example``: the file name
    the message suggests."""
    if os.path.isdir(path):
        if IndexStore(path).is_index():
            raise OutputExistsError(f"{key}={path!r} is an index folder; name a file outside it, such as {example!r}")
        raise OutputExistsError(f"{key}={path!r} is a folder; name a file such as {os.path.join(path, example)!r}")
    holder = _index_holding(path)
    if holder is not None:
        raise OutputExistsError(f"{key}={path!r} is inside the index folder {str(holder)!r}; writing there would "
                                f"damage the index (name a file outside it)")
    check_writable(path, key)


def _index_holding(path: str) -> Path | None:
    """The nearest existing folder above ``path`` (links resolved: a link into an index is inside
    it) that is an hpengine index, if any; a folder this user cannot read is not one."""
    here = Path(os.path.realpath(path)).parent
    for folder in (here, *here.parents):
        try:
            if folder.is_dir() and IndexStore(folder).is_index():
                return folder
        except OSError:
            continue
    return None


def same_file(a: str, b: str) -> bool:
    """``a`` and ``b`` name one file (through links, relative paths, ``..``), existing or not."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _inside(path: str, folder: str) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def check_outputs_apart(outputs: dict, inputs: dict, index_dir: str = "") -> None:
    """No output of a job lands on one of its inputs, on another output, or inside the index.

    Args:
        outputs: ``{key: path}`` the job writes (empty paths are skipped).
        inputs: ``{key: path}`` the job reads.
        index_dir: the index folder read (every file in it is an input).

    Raises:
        UserError: naming both keys, before any work.
    """
    outputs = {k: v for k, v in outputs.items() if v}
    for key, path in outputs.items():
        for other, src in inputs.items():
            if src and same_file(path, src):
                raise UserError(f"{key}={path!r} is the {other} file {src!r}; writing it would destroy that input "
                                f"(name another file)")
        if index_dir and _inside(path, index_dir):
            raise UserError(f"{key}={path!r} is inside the index folder {index_dir!r}; writing there would damage "
                            f"the index (name a file outside it)")
    names = list(outputs)
    for i, key in enumerate(names):
        for other in names[i + 1:]:
            if same_file(outputs[key], outputs[other]):
                raise UserError(f"{key}= and {other}= name the same file {outputs[key]!r}; they must differ")
