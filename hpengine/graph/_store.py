"""The index store: the one authority for an index folder's on-disk layout, its writer lock and
its generations.

Layout of an index folder ``DIR`` (format 2)::

    DIR/index.json          the manifest: format name and version, current generation, the store
                            token, sizes, encoder, build config and report. Replacing it (one
                            ``os.replace``) is the commit of a generation.
    DIR/gen-<N>/            the data files of generation N (texts.json, tensors.safetensors,
                            grag.*) and the owner marker ``.hpengine-owner``
    DIR/.hpengine-store     the store token: random hex written when the store is created
    DIR/.hpengine.lock      the writer lock (``fcntl.flock``); only locked, never written
    DIR/.hpengine.holder    who took the lock last (pid, host, command, time), written atomically
    DIR/.tmp-<hex>/         a generation being written (owner marker inside)
    DIR/.build/             the shards of a streaming build in progress (owner marker inside); kept
                            when a build is stopped (kill -9, Ctrl-C, SIGTERM), so the same command
                            resumes from its verified shards, and removed once the build commits

Every file below ``DIR`` is opened without following links and written as a new file renamed into
place (:mod:`hpengine.graph._files`; docs/guides/shared_index.md).

Format 1 (before generations) kept the data files beside ``index.json``; it still loads, and the
first write to it commits a format-2 generation and removes the format-1 data files.

Rules that keep a user's data safe:

- Reading never writes or deletes anything. A reader reads the manifest, then the files of the
  generation it names; if a writer removed that generation meanwhile (two commits during one
  read), the reader reads the new manifest and starts again: it always sees one complete
  generation, old or new.
- Every write (index, add, GRAG build, :meth:`Index.save`) holds the writer lock for the whole
  job, so a second writer waits (``lock_timeout`` seconds) and then stops with one line naming the
  holder: no write is lost.
- Cleanup removes only folders inside ``DIR`` whose owner marker holds this store's token: what
  hpengine wrote and can prove it wrote. Nothing outside ``DIR`` is ever removed, and a folder is
  treated as an index only when its manifest says so in full (:meth:`IndexStore.check`).
- A commit keeps the previous generation, so a reader that started before it finishes undisturbed.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import secrets
import shutil
import socket
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hpengine.errors import OutputExistsError, UserError
from hpengine.graph._files import LinkRefusedError, check_entry, make_dir, read_bytes, write_atomic

FORMAT_NAME = "hpengine-index"
FORMAT_VERSION = 2
#: a generation that extends the one before it (``Index.save(append=True)``): its files are hard
#: links of the previous generation's plus segments of the new rows (hpengine.graph._index)
SEGMENTED_VERSION = 3
#: format versions this code loads (1: data files beside index.json)
READABLE_VERSIONS = (1, 2, 3)
MANIFEST = "index.json"
TOKEN_FILE = ".hpengine-store"
BUILD_FOLDER = ".build"
LOCK_FILE = ".hpengine.lock"
#: who holds the writer lock (pid, host, command, since), written beside the lock, never into it
HOLDER_FILE = ".hpengine.holder"
OWNER_FILE = ".hpengine-owner"
#: the data files every generation holds; GRAG-MH's parts are optional
DATA_FILES = ("texts.json", "tensors.safetensors")
OPTIONAL_FILES = ("grag.json", "grag.safetensors")
#: default seconds a writer waits for another writer of the same index
DEFAULT_LOCK_TIMEOUT = 60.0
#: how often a reader starts again when writers keep committing under it
_READ_ATTEMPTS = 64
#: test hook: ``HPENGINE_TEST_KILL_AT=<point>`` makes a writer SIGKILL its own process there
#: (``before-commit``, ``after-commit``, ``after-shard``: a streaming build's first shard written),
#: so the kill -9 tests hit each window; ``<point>:SIGINT`` (or another signal name) sends that one
_KILL_ENV = "HPENGINE_TEST_KILL_AT"


class IndexFormatError(UserError):
    """A saved index is missing, corrupt, or of another format version or encoder (a user error:
    the message names the file found wrong)."""


class IndexLockedError(UserError):
    """Another process holds the index's writer lock beyond the configured wait."""


@dataclass(frozen=True)
class Generation:
    """One committed generation as a reader sees it: the manifest and the folder of its files."""

    manifest: dict
    folder: Path
    number: int


def _kill_point(name: str) -> None:
    point, _, sig = os.environ.get(_KILL_ENV, "").partition(":")
    if point == name:  # tests only: ``<point>`` is SIGKILL, ``<point>:SIGINT`` another signal
        import signal

        # raise_signal, not kill(getpid()): the signal goes to this (the main) thread, so Python's
        # handler runs here and now, not in whatever thread the kernel would pick
        signal.raise_signal(getattr(signal, sig or "SIGKILL"))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_durable(path: Path, obj, root: Path | None = None) -> None:
    """Write ``obj`` as JSON to ``path`` inside ``root`` (default: its folder): a new file created
    exclusively, fsynced and renamed into place (:func:`hpengine.graph._files.write_atomic`)."""
    def dump(f) -> None:  # streamed: a million passages' texts.json is never one string in memory
        text = io.TextIOWrapper(f, encoding="utf-8", newline="")
        json.dump(obj, text, ensure_ascii=False)
        text.flush()
        text.detach()

    write_atomic(path, dump, root)


def read_json(path: Path, root: Path | None = None):
    """JSON of ``path`` inside ``root`` (default: its folder; no link followed below it); every
    failure an :class:`IndexFormatError` naming it (a link: :class:`LinkRefusedError`)."""
    try:
        data = read_bytes(path, root)
        return json.loads(data.decode("utf-8"))
    except FileNotFoundError as exc:
        raise IndexFormatError(f"{path} is missing") from exc
    except json.JSONDecodeError as exc:
        raise IndexFormatError(f"{path}: invalid JSON at line {exc.lineno} ({exc.msg})") from exc
    except UnicodeDecodeError as exc:
        raise IndexFormatError(f"{path}: not valid UTF-8 (byte offset {exc.start})") from exc
    except UserError:
        raise
    except (ValueError, RecursionError, OSError) as exc:  # int too long, nesting too deep, unreadable
        raise IndexFormatError(f"{path}: cannot read ({type(exc).__name__}: {str(exc)[:120]})") from exc


def _read_owner(folder: Path) -> str | None:
    """The owner marker of ``folder`` (itself not a link); None when absent, unreadable or linked."""
    try:
        return read_bytes(folder / OWNER_FILE, folder.parent).decode("ascii").strip()
    except (OSError, UnicodeDecodeError, UserError):
        return None


def _is_file(path: Path) -> bool:
    """``path`` is a regular file (a link is refused with one line, not followed)."""
    check_entry(path, folder=False)
    return path.is_file()


def _lock_holder_pid(path: Path) -> int | None:
    """The pid the kernel lists as holding a ``flock`` on ``path`` (Linux ``/proc/locks``), or None."""
    try:
        st = os.lstat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()
        if "->" in fields:  # a waiter, not the holder
            continue
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == want:
            try:
                return int(fields[4])
            except ValueError:
                return None
    return None


def _command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        return " ".join(" ".join(a.decode("utf-8", "replace") for a in argv).split())[:120] or "unknown command"
    except OSError:
        return "unknown command"


def _holds_finished_shard(folder: Path) -> bool:
    """``folder`` (a build folder) holds at least one finished shard's record."""
    try:
        return any(e.name.startswith("shard-") and e.name.endswith(".json") for e in folder.iterdir())
    except OSError:
        return False


def _gen_name(number: int) -> str:
    return f"gen-{number:06d}"


class IndexStore:
    """The on-disk index folder ``path``: what it holds, how it is read, who may write it.

    Args:
        path: the index folder (it need not exist yet).
    """

    def __init__(self, path: str | os.PathLike):
        if not str(path).strip():
            raise UserError("an index folder must be named (got '')")
        self.path = Path(os.path.abspath(path))
        self.shown = str(path)

    # ------------------------------------------------------------ siblings
    def sibling(self, suffix: str) -> Path:
        """``DIR<suffix>`` beside the index folder (caches, the demo's report page)."""
        return self.path.with_name(self.path.name + suffix)

    @property
    def extract_cache(self) -> Path:
        """Default cache of the LLM extractor (kept across rebuilds, outside the generations)."""
        return self.sibling(".extract_cache")

    @property
    def grag_cache(self) -> Path:
        """Default cache of GRAG-MH's LLM triple extraction."""
        return self.sibling(".grag_cache")

    # ---------------------------------------------------------- inspection
    def read_manifest(self) -> dict:
        """``index.json`` as a dict, its format checked.

        Raises:
            IndexFormatError: no manifest, not JSON, not an object, or not an hpengine manifest of
                a readable version.
        """
        path = self.path / MANIFEST
        if not self.path.exists():
            raise IndexFormatError(f"{self.shown}: no such index folder")
        if not self.path.is_dir():
            raise IndexFormatError(f"{self.shown} is a file, not an index folder")
        if not _is_file(path):
            raise IndexFormatError(f"{self.shown} is not an hpengine index (no {MANIFEST})")
        manifest = read_json(path, self.path)
        if not isinstance(manifest, dict):
            raise IndexFormatError(f"{path}: expected a JSON object (got {type(manifest).__name__})")
        version = manifest.get("format_version")
        if version not in READABLE_VERSIONS:
            raise IndexFormatError(f"{self.shown}: index format version {version!r} is not supported "
                                   f"(expected one of {list(READABLE_VERSIONS)}); rebuild the index with this hpengine")
        if version >= 2 and manifest.get("format") != FORMAT_NAME:
            raise IndexFormatError(f"{path}: format is {manifest.get('format')!r}, not {FORMAT_NAME!r}")
        return manifest

    def generation(self) -> Generation:
        """The committed generation a reader should read now (checked to be complete).

        Raises:
            IndexFormatError: not an index, or its generation's files are missing.
        """
        manifest = self.read_manifest()
        if manifest["format_version"] == 1:
            folder, number = self.path, 0
        else:
            number = manifest.get("generation")
            if not isinstance(number, int) or isinstance(number, bool) or number < 1:
                raise IndexFormatError(f"{self.path / MANIFEST}: generation must be a positive int (got {number!r})")
            folder = self.path / _gen_name(number)
            check_entry(folder, folder=True)
        missing = [name for name in DATA_FILES if not _is_file(folder / name)]
        if missing:
            raise IndexFormatError(f"{self.shown}: generation {number} lacks {', '.join(missing)} "
                                   f"(in {folder}); the index is incomplete")
        return Generation(manifest, folder, number)

    def check(self) -> None:
        """Raise :class:`IndexFormatError` unless ``path`` holds a complete index."""
        self.generation()

    def is_index(self) -> bool:
        """Whether ``path`` holds a complete hpengine index (its full format says so)."""
        try:
            self.check()
        except UserError:
            return False
        return True

    def token(self) -> str | None:
        try:
            token = read_bytes(self.path / TOKEN_FILE, self.path).decode("ascii").strip()
        except (OSError, UnicodeDecodeError, UserError):
            return None
        return token if len(token) == 32 and all(c in "0123456789abcdef" for c in token) else None

    def own_entries(self) -> list[Path]:
        """Entries of ``DIR`` that hpengine wrote and can prove it: the token and lock files, and
        folders whose owner marker holds this store's token."""
        if not self.path.is_dir():
            return []
        found = [self.path / name for name in (TOKEN_FILE, LOCK_FILE, HOLDER_FILE)
                 if (self.path / name).is_file() and not (self.path / name).is_symlink()]
        token = self.token()
        if token is None:
            return found
        for entry in self.path.iterdir():
            if entry.is_dir() and not entry.is_symlink() and _read_owner(entry) == token:
                found.append(entry)
        return found

    def holds_only_leftovers(self) -> bool:
        """``DIR`` is a folder whose every entry is hpengine's own (what a killed first build
        leaves): it may receive a new index."""
        if not self.path.is_dir():
            return False
        own = set(self.own_entries())
        return all(entry in own for entry in self.path.iterdir())

    # ------------------------------------------------------------- writing
    @contextlib.contextmanager
    def writer(self, *, timeout: float = DEFAULT_LOCK_TIMEOUT, command: str = ""):
        """Hold the index's writer lock for the block; yields a :class:`StoreWriter`.

        Creates ``DIR`` when missing (removed again when nothing was committed in it).

        Raises:
            IndexLockedError: another process held the lock for ``timeout`` seconds.
        """
        created = False
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                self.path.mkdir()
                created = True
        self._refuse_foreign()
        fd = self._lock(timeout, command or " ".join(Path(sys.argv[0]).name.split()[:1] + sys.argv[1:2]))
        try:
            self._refuse_foreign()  # again, now that no writer can change it
            writer = StoreWriter(self, fd)
        except BaseException:
            os.close(fd)
            raise
        try:
            yield writer
        finally:
            try:
                writer.discard_leftovers()
                if created and not writer.committed and not (self.path / MANIFEST).exists():
                    self._remove_empty_store()
            finally:
                os.close(fd)  # releases the lock

    def _refuse_foreign(self) -> None:
        """Raise unless ``DIR`` is a folder that is an index, empty, or only hpengine's own (a link
        among its entries is named)."""
        if not self.path.is_dir():
            raise OutputExistsError(f"{self.shown} is a file, not an index folder; refusing to replace it")
        try:
            self.check()
            return
        except LinkRefusedError:
            raise
        except UserError:
            pass
        if not self.holds_only_leftovers():
            raise OutputExistsError(f"{self.shown} exists and is not an hpengine index; refusing to write into it")

    def _lock(self, timeout: float, command: str) -> int:
        """Take the exclusive lock on ``DIR/.hpengine.lock`` (waiting up to ``timeout`` s) and
        record the holder beside it (:data:`HOLDER_FILE`); returns the open descriptor.

        The lock file is opened without following a link and never written: a link or file planted
        there by another user cannot receive anything."""
        path = self.path / LOCK_FILE
        deadline = time.monotonic() + max(0.0, timeout)
        delay = 0.01
        while True:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
            except FileNotFoundError:  # the folder went (a first build that committed nothing)
                self.path.mkdir(parents=True, exist_ok=True)
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise LinkRefusedError(f"{path} is a symbolic link; hpengine does not follow links inside an "
                                           f"index folder: remove it") from None
                raise UserError(f"{self.shown}: cannot open the index lock {path} ({exc.strerror})") from exc
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise LinkRefusedError(f"{path} is not a regular file; remove it")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise UserError(f"{self.shown}: cannot lock the index ({exc.strerror})") from exc
                if time.monotonic() >= deadline:
                    raise IndexLockedError(f"index {self.shown} is being written by {self._holder()}; waited "
                                           f"{timeout:g} s (lock_timeout); rerun when it is done") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            try:  # the lock file we hold must still be the one at the path (not unlinked meanwhile)
                same = os.fstat(fd).st_ino == os.lstat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                      "since": time.strftime("%Y-%m-%d %H:%M:%S")}
            with contextlib.suppress(OSError, UserError):
                write_atomic(self.path / HOLDER_FILE, json.dumps(holder).encode(), self.path, durable=False)
            return fd

    def _holder(self) -> str:
        """Who holds the lock: the process the kernel names as holding it (``/proc/locks``), with
        the command it recorded when the record is its own."""
        pid = _lock_holder_pid(self.path / LOCK_FILE)
        try:
            holder = json.loads(read_bytes(self.path / HOLDER_FILE, self.path).decode("utf-8"))
            recorded = (f"pid {int(holder['pid'])} on {holder['host']} ({holder['command'] or 'hpengine'}, "
                        f"since {holder['since']})")
            recorded_pid = int(holder["pid"])
        except (OSError, ValueError, KeyError, TypeError, UserError):
            recorded, recorded_pid = None, None
        if pid is None:
            return recorded or "another process"
        if recorded is not None and recorded_pid == pid and holder.get("host") == socket.gethostname():
            return recorded
        return f"pid {pid} ({_command_of(pid)})"

    def _remove_empty_store(self) -> None:
        """Undo the folder a first build created when it committed nothing: only hpengine's own
        entries are there, and only those go."""
        own = self.own_entries()
        # an interrupted build's finished shards stay (with the token that proves they are ours):
        # the same command resumes from them
        keep = {LOCK_FILE, HOLDER_FILE}
        if any(e.name == BUILD_FOLDER and _holds_finished_shard(e) for e in own):
            keep |= {BUILD_FOLDER, TOKEN_FILE}
        for entry in own:
            if entry.name in keep:
                continue
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        remaining = [e for e in self.path.iterdir() if e.name not in (LOCK_FILE, HOLDER_FILE)]
        if not remaining:
            (self.path / HOLDER_FILE).unlink(missing_ok=True)
            (self.path / LOCK_FILE).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.path.rmdir()


class StoreWriter:
    """What the holder of an index's writer lock may do: write a generation and commit it.

    Made by :meth:`IndexStore.writer` only.
    """

    def __init__(self, store: IndexStore, fd: int):
        self.store = store
        self._fd = fd
        self.committed = False
        self._token = store.token()
        self._previous: Generation | None = None
        try:
            self._previous = store.generation()
        except UserError:
            self._previous = None

    @property
    def token(self) -> str:
        """This store's token; written on first use (a new store, or a format-1 index)."""
        if self._token is None:
            self._token = secrets.token_hex(16)
            write_atomic(self.store.path / TOKEN_FILE, self._token.encode("ascii"), self.store.path)
        return self._token

    @property
    def previous(self) -> Generation | None:
        """The generation committed when the lock was taken (None for a new index)."""
        return self._previous

    def build_folder(self) -> Path:
        """``DIR/.build``, owner-marked: the shards of a streaming build (created when missing)."""
        folder = self.store.path / BUILD_FOLDER
        check_entry(folder, folder=True)
        if folder.exists() and _read_owner(folder) != self.token:
            raise UserError(f"{folder} is not this index's build folder; move it away and build again")
        make_dir(folder, self.store.path, exist_ok=True)
        if _read_owner(folder) != self.token:
            write_atomic(folder / OWNER_FILE, self.token.encode("ascii"), self.store.path)
        return folder

    def discard_build(self) -> None:
        """Remove the build folder (after the build it holds committed)."""
        folder = self.store.path / BUILD_FOLDER
        if folder.is_dir() and not folder.is_symlink() and _read_owner(folder) == self.token:
            shutil.rmtree(folder, ignore_errors=True)

    def new_folder(self) -> Path:
        """A fresh, owner-marked folder inside ``DIR`` to write a generation's files into."""
        folder = self.store.path / f".tmp-{secrets.token_hex(8)}"
        make_dir(folder, self.store.path)
        write_atomic(folder / OWNER_FILE, self.token.encode("ascii"), self.store.path)
        return folder

    def commit(self, folder: Path, meta: dict, version: int = FORMAT_VERSION) -> Generation:
        """Make ``folder`` (from :meth:`new_folder`, its files written and fsynced) the current
        generation, with ``meta`` in the manifest; then remove generations older than the
        previous one and the format-1 data files.

        The commit point is one ``os.replace`` of ``index.json``: a kill before it leaves the
        previous generation current, a kill after it the new one.
        """
        path = self.store.path
        number = (self._previous.number if self._previous is not None else 0) + 1
        final = path / _gen_name(number)
        while os.path.lexists(final):  # a killed writer renamed it but never committed: not referenced
            if final.is_dir() and not final.is_symlink() and _read_owner(final) == self.token:
                shutil.rmtree(final)
            else:
                number += 1
                final = path / _gen_name(number)
        for name in DATA_FILES:
            if not (folder / name).is_file():
                raise RuntimeError(f"generation folder {folder} lacks {name}")
        os.rename(folder, final)
        manifest = {**meta, "format": FORMAT_NAME, "format_version": version, "generation": number,
                    "store_token": self.token}
        _fsync_dir(path)
        _kill_point("before-commit")
        write_json_durable(path / MANIFEST, manifest, path)  # the commit: one rename over index.json
        _kill_point("after-commit")
        previous, self._previous = self._previous, Generation(manifest, final, number)
        self.committed = True
        self._collect(keep={final.name, None if previous is None else previous.folder.name},
                      legacy=previous is not None and previous.number == 0)
        return self._previous

    def _collect(self, keep: set, legacy: bool) -> None:
        """Remove owner-marked generations not in ``keep`` (and format-1 data files once a
        format-2 generation replaced them)."""
        for entry in self.store.path.iterdir():
            if entry.name.startswith("gen-") and entry.name not in keep and entry.is_dir() \
                    and not entry.is_symlink() and _read_owner(entry) == self.token:
                shutil.rmtree(entry, ignore_errors=True)
        if legacy:
            for name in DATA_FILES + OPTIONAL_FILES:
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    (self.store.path / name).unlink()

    def discard_leftovers(self) -> None:
        """Remove owner-marked temporary folders (this writer's, and a killed writer's: the lock
        proves none is live)."""
        if self._token is None:
            return
        for entry in self.store.path.iterdir():
            if entry.name.startswith(".tmp-") and entry.is_dir() and not entry.is_symlink() \
                    and _read_owner(entry) == self._token:
                shutil.rmtree(entry, ignore_errors=True)


def read_generation(path: str | os.PathLike, read):
    """``read(generation)`` on the current generation of the index at ``path``; when a writer
    removed that generation meanwhile, again on the new one (a reader sees one complete
    generation, never a mix and never a failure caused by a commit).

    A generation's files are removed only after two newer commits, so a failure while the
    manifest still names the generation the read started from is the index's own, and raised.

    Args:
        read: ``Generation -> T``; raises :class:`IndexFormatError` or ``OSError`` on missing files.
    """
    store = IndexStore(path)
    for _ in range(_READ_ATTEMPTS):
        before = store.read_manifest().get("generation")
        try:
            return read(store.generation())
        except (IndexFormatError, OSError):
            try:
                after = store.read_manifest().get("generation")
            except UserError:
                after = before
            if after == before:
                raise
    raise IndexFormatError(f"{store.shown}: writers committed {_READ_ATTEMPTS} times while this read was under way; "
                           f"try again")
