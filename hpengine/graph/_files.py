"""Files inside an index folder, opened so that no one else who can write the folder can turn
them against its user (docs/guides/shared_index.md).

Every path below the index folder ``root`` is opened one component at a time relative to the
folder before it (``openat``) with ``O_NOFOLLOW``: a symbolic link anywhere below ``root`` is
refused with one line naming it, so a read never leaves the index and a write never lands outside
it. The folder ``root`` itself is what the user named and is opened as named.

Every write creates a new file exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``, a random name in
the target's folder), writes and fsyncs it, and renames it over the target, so a planted file or
link at the target is replaced, never written through, and readers see the old file or the whole
new one.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from hpengine.errors import UserError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkRefusedError(UserError):
    """An entry inside an index folder is a symbolic link (or not the kind of entry expected)."""


def _refused(path: Path, what: str = "a symbolic link") -> LinkRefusedError:
    return LinkRefusedError(f"{path} is {what}; hpengine does not follow links or open special files inside "
                            f"an index folder: remove it (docs/guides/shared_index.md)")


def _parts(path: Path, root: Path | None) -> tuple[Path, tuple]:
    """``(root, components of path below it)``; ``root`` defaults to ``path``'s folder."""
    path = Path(os.path.abspath(path))
    root = path.parent if root is None else Path(os.path.abspath(root))
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise ValueError(f"{path} is not inside {root}") from None
    if not rel.parts or ".." in rel.parts:
        raise ValueError(f"{path} must name an entry inside {root}")
    return root, rel.parts


def _open_dir(root: Path, parts: tuple) -> int:
    """A descriptor of ``root / parts``: each component opened below the one before with
    ``O_NOFOLLOW``; a link or a non-folder among them is refused."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    where = root
    try:
        for part in parts:
            where = where / part
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refused(where, "a symbolic link" if os.path.islink(where) else "not a folder") from None
                if exc.errno == errno.ENOENT:
                    raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(where)) from None
                raise
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_read(path: str | os.PathLike, root: str | os.PathLike | None = None) -> int:
    """A read-only descriptor of the regular file ``path`` inside ``root`` (default: its own
    folder), no link followed below ``root``.

    Raises:
        LinkRefusedError: ``path`` or a folder on the way is a link, or ``path`` is not a regular file.
        FileNotFoundError: it is missing.
    """
    path = Path(os.path.abspath(path))
    base, parts = _parts(path, root)
    dfd = _open_dir(base, parts[:-1])
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refused(path) from None
            if exc.errno == errno.ENOENT:
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path)) from None
            raise
    finally:
        os.close(dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device would block or never end
        os.close(fd)
        raise _refused(path, "not a regular file")
    os.set_blocking(fd, True)
    return fd


def fd_path(fd: int, path: str | os.PathLike) -> str:
    """A path that opens the very file of ``fd`` (``/proc/self/fd/N`` on Linux), for readers that
    take a path (a memory mapping); ``path`` where no such alias exists."""
    alias = f"/proc/self/fd/{fd}"
    return alias if os.path.exists(alias) else str(path)


def read_bytes(path: str | os.PathLike, root: str | os.PathLike | None = None) -> bytes:
    """The bytes of the regular file ``path`` inside ``root`` (see :func:`open_read`)."""
    fd = open_read(path, root)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def check_entry(path: str | os.PathLike, *, folder: bool) -> None:
    """Refuse ``path`` when it is a link, or not a folder (``folder``) / regular file; a missing
    ``path`` passes (the caller creates it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refused(Path(path))
    if folder != stat.S_ISDIR(st.st_mode) or (not folder and not stat.S_ISREG(st.st_mode)):
        raise _refused(Path(path), "not a folder" if folder else "not a regular file")


def write_atomic(path: str | os.PathLike, data, root: str | os.PathLike | None = None, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` inside ``root``: a new file created exclusively beside it,
    written, fsynced and renamed over ``path`` (which may be missing, a file or a planted link:
    it is replaced, never written through).

    Args:
        data: ``bytes``, or a callable given the new file's binary file object to write into.
        durable: fsync the file and its folder (default True).

    Raises:
        LinkRefusedError: a folder on the way below ``root`` is a link.
        OSError: the write failed (disk full, permissions); the target is unchanged and the
            temporary file removed.
    """
    path = Path(os.path.abspath(path))
    base, parts = _parts(path, root)
    dfd = _open_dir(base, parts[:-1])
    tmp = f".{parts[-1][:100]}.tmp-{secrets.token_hex(6)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                if callable(data):
                    data(f)
                else:
                    f.write(data)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
            os.replace(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        if durable:
            try:
                os.fsync(dfd)
            except OSError:
                pass
    finally:
        os.close(dfd)


def make_dir(path: str | os.PathLike, root: str | os.PathLike | None = None, *, exist_ok: bool = False) -> None:
    """Create the folder ``path`` inside ``root`` (no link followed below ``root``); an existing
    entry must be a real folder when ``exist_ok``.

    Raises:
        LinkRefusedError: ``path`` exists as a link or a non-folder.
        FileExistsError: it exists and not ``exist_ok``.
    """
    path = Path(os.path.abspath(path))
    base, parts = _parts(path, root)
    dfd = _open_dir(base, parts[:-1])
    try:
        try:
            os.mkdir(parts[-1], 0o755, dir_fd=dfd)
        except FileExistsError:
            st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
                raise _refused(path, "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a folder") from None
            if not exist_ok:
                raise
    finally:
        os.close(dfd)
