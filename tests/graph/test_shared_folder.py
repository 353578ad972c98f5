"""An index folder others can write cannot be turned against its user: no file below it is read or
written through a link (a link is refused with one line naming it), data is written only where the
user asked, a lock timeout names the process that holds the lock, and disk-full and missing files
are one line (docs/guides/shared_index.md)."""
import errno
import json
import os
import subprocess
import sys
import time

import pytest

from hpengine.errors import UserError
from hpengine.graph import Index, IndexFormatError, IndexLockedError, IndexStore, add_passages
from hpengine.graph._corpus import Passage
from hpengine.graph._files import LinkRefusedError, read_bytes, write_atomic
from hpengine.graph._shards import ShardFolder
from hpengine.jobs import check_index_dir
from hpengine.testing._fakes import HashingEncoder, ListExtractor

from test_store import CFG, TABLE, build, tree

VICTIM_TEXT = b"the victim's own file\n"


@pytest.fixture
def victim(tmp_path):
    """A file outside every index that a hostile link points at."""
    path = tmp_path / "victim.txt"
    path.write_bytes(VICTIM_TEXT)
    return path


def _one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_planted_lock_link_is_refused_and_its_target_untouched(tmp_path, victim):
    idx = build("Alpha").save(tmp_path / "idx")
    (idx / ".hpengine.lock").unlink()
    (idx / ".hpengine.lock").symlink_to(victim)
    before = tree(idx / "gen-000001")
    with pytest.raises(LinkRefusedError, match=r"\.hpengine\.lock is a symbolic link") as exc:
        build("Kell").save(idx)
    assert str(idx) in _one_line(exc)
    assert victim.read_bytes() == VICTIM_TEXT and tree(idx / "gen-000001") == before


def test_a_lock_file_hard_linked_elsewhere_is_never_written(tmp_path, victim):
    """The lock file is only locked, never written: its holder record goes to a file of its own,
    renamed into place, so a lock file that is another name of someone's file loses nothing."""
    idx = build("Alpha").save(tmp_path / "idx")
    (idx / ".hpengine.lock").unlink()
    os.link(victim, idx / ".hpengine.lock")
    build("Kell").save(idx)
    assert victim.read_bytes() == VICTIM_TEXT
    assert json.loads((idx / ".hpengine.holder").read_text())["pid"] == os.getpid()


@pytest.mark.parametrize("what", ["index.json", "gen-000001", "gen-000001/texts.json"])
def test_a_reader_refuses_a_part_that_links_outside_the_index(tmp_path, what):
    """``ask`` / ``eval`` check the index (check_index_dir) before any model loads, and the load
    itself opens every file without following a link."""
    idx = build("Alpha").save(tmp_path / "idx")
    elsewhere = build("Kell", "Oro").save(tmp_path / "elsewhere")
    target = idx / what
    os.rename(target, tmp_path / "moved")
    target.symlink_to(elsewhere / what)
    with pytest.raises(LinkRefusedError, match=f"{what} is a symbolic link") as exc:
        Index.load(idx)
    _one_line(exc)
    with pytest.raises(UserError, match="is a symbolic link"):
        check_index_dir(str(idx), "INDEX")


def test_a_link_among_the_generations_files_is_refused_through_a_link_component(tmp_path):
    """A link that is a folder on the way (a segment folder) is refused, not followed."""
    idx = build("Alpha").save(tmp_path / "idx")
    index = Index.load(idx)
    more, _ = add_passages(index, [Passage("Kell", "text of Kell")], extractor=ListExtractor(TABLE),
                           encoder=HashingEncoder(), graph_cfg=CFG)
    more.save(idx, append=True)
    manifest = json.loads((idx / "index.json").read_text())
    gen = idx / f"gen-{manifest['generation']:06d}"
    seg = gen / "seg-001"
    os.rename(seg, tmp_path / "seg-away")
    seg.symlink_to(tmp_path / "seg-away")
    with pytest.raises(LinkRefusedError, match="seg-001 is a symbolic link"):
        Index.load(idx)


def test_a_segmented_generation_missing_its_synonyms_is_one_line(tmp_path):
    idx = build("Alpha").save(tmp_path / "idx")
    more, _ = add_passages(Index.load(idx), [Passage("Kell", "text of Kell")], extractor=ListExtractor(TABLE),
                           encoder=HashingEncoder(), graph_cfg=CFG)
    more.save(idx, append=True)
    manifest = json.loads((idx / "index.json").read_text())
    (idx / f"gen-{manifest['generation']:06d}" / "synonyms.safetensors").unlink()
    with pytest.raises(IndexFormatError, match=r"synonyms\.safetensors is missing; the index is incomplete") as exc:
        Index.load(idx)
    _one_line(exc)


def test_writes_replace_a_planted_link_and_never_write_through_it(tmp_path, victim):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "build.json").symlink_to(victim)
    write_atomic(folder / "build.json", b"{}")
    assert victim.read_bytes() == VICTIM_TEXT
    assert not (folder / "build.json").is_symlink() and (folder / "build.json").read_bytes() == b"{}"
    assert sorted(os.listdir(folder)) == ["build.json"]  # no temporary file left
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(LinkRefusedError, match="link is a symbolic link"):
        read_bytes(tmp_path / "link", tmp_path)


def test_a_resumed_build_writes_its_plan_over_a_planted_link(tmp_path, victim):
    build_dir = tmp_path / "idx" / ".build"
    build_dir.mkdir(parents=True)
    (build_dir / "build.json").symlink_to(victim)
    ShardFolder(build_dir, "f" * 64, 3)
    assert victim.read_bytes() == VICTIM_TEXT
    assert json.loads((build_dir / "build.json").read_text())["fingerprint"] == "f" * 64


def test_a_planted_build_folder_link_is_refused(tmp_path, victim):
    idx = build("Alpha").save(tmp_path / "idx")
    (idx / ".build").symlink_to(tmp_path)
    with IndexStore(idx).writer() as writer:
        with pytest.raises(LinkRefusedError, match=r"\.build is a symbolic link"):
            writer.build_folder()


def test_disk_full_while_writing_a_shard_is_one_line_and_keeps_finished_shards(tmp_path, monkeypatch):
    from hpengine.graph import build_index_sharded

    passages = [Passage(t, f"text of {t}") for t in TABLE]
    calls = []

    def full_after_one(tensors, path):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        from hpengine.graph._index import _save_tensors as real

        monkeypatch.undo()
        real(tensors, path)
        monkeypatch.setattr("hpengine.graph._shards._save_tensors", full_after_one)

    monkeypatch.setattr("hpengine.graph._shards._save_tensors", full_after_one)
    with pytest.raises(UserError, match=r"cannot write shard 1 .*No space left on device.*finished shards are "
                                        r"kept") as exc:
        build_index_sharded(passages, extractor=ListExtractor(TABLE), encoder=HashingEncoder(),
                            shard_folder=tmp_path / "idx" / ".build", shard_size=3, graph_cfg=CFG)
    _one_line(exc)
    assert sorted(n for n in os.listdir(tmp_path / "idx" / ".build") if n.startswith("shard-")) == \
        ["shard-000000.json", "shard-000000.safetensors"]


def test_disk_full_while_saving_grag_parts_is_one_line(tmp_path, monkeypatch):
    """The GRAG parts are written by the store's own writer: a full disk is an OSError the save
    turns into one line, the index as it was."""
    from hpengine.graph import _grag

    idx = build("Alpha").save(tmp_path / "idx")
    before = tree(idx / "gen-000001")
    index = Index.load(idx)

    class Parts:
        def save(self, folder):
            from hpengine.graph._mmap import write_safetensors

            import torch
            write_safetensors({"x": torch.zeros(3)}, folder / _grag.GRAG_TENSORS)

    def full(path, data, root=None, durable=True):
        raise OSError(errno.ENOSPC, "No space left on device")

    index.grag = Parts()
    monkeypatch.setattr("hpengine.graph._mmap.write_atomic", full)
    with pytest.raises(UserError, match="No space left on device.*as it was") as exc:
        index.save(idx)
    _one_line(exc)
    assert tree(idx / "gen-000001") == before


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_a_lock_timeout_names_the_process_that_holds_the_lock(tmp_path):
    """The holder record may be stale (a writer that died); the message names the process the
    kernel says holds the lock."""
    idx = build("Alpha").save(tmp_path / "idx")
    (idx / ".hpengine.holder").write_text(json.dumps({"pid": 1, "host": "elsewhere", "command": "stale",
                                                      "since": "2000-01-01 00:00:00"}))
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(idx / ".hpengine.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        start = time.monotonic()
        with pytest.raises(IndexLockedError, match=rf"being written by pid {proc.pid} \(") as exc:
            build("Kell").save(idx, lock_timeout=0.2)
        assert "stale" not in _one_line(exc) and time.monotonic() - start < 10
    finally:
        proc.kill()
        proc.wait()


def test_an_add_where_hard_links_are_refused_copies_the_files(tmp_path, monkeypatch):
    """A file system without hard links: the kept files are copied (streamed) into the new generation."""
    import torch

    idx = build("Alpha").save(tmp_path / "idx")
    more, _ = add_passages(Index.load(idx), [Passage("Kell", "text of Kell")], extractor=ListExtractor(TABLE),
                           encoder=HashingEncoder(), graph_cfg=CFG)

    def no_links(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr("hpengine.graph._index.os.link", no_links)
    more.save(idx, append=True)
    loaded = Index.load(idx)
    assert [p.title for p in loaded.passages] == ["Alpha", "Kell"]
    assert torch.equal(loaded.fact_emb, more.fact_emb) and loaded.facts == more.facts
