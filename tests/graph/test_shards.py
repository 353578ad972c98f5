"""The streaming build: shards of any size give the index of one build; a build stopped after some
shards resumes from the last finished one (the finished shards are neither extracted nor embedded
again); another corpus or setting starts afresh."""
import random

import pytest
import torch

from hpengine.graph import build_index
from hpengine.graph import build_index_sharded
from hpengine.graph._shards import (ShardFolder, build_fingerprint, gather_rows, settings_digest, shard_ranges,
                                    slice_digest)
from hpengine.testing._fakes import HashingEncoder

from test_edit import CFG, TextExtractor, _random_table, assert_same_index


class StopAfter(TextExtractor):
    """Extracts ``limit`` calls (shards), then fails as a killed process would stop."""

    def __init__(self, table, limit):
        super().__init__(table)
        self.limit = limit

    def extract(self, passages, progress=False):
        if self.limit == 0:
            raise KeyboardInterrupt("stopped")
        self.limit -= 1
        return super().extract(passages, progress)




def corpus(seed=0, n=23):
    return _random_table(random.Random(seed), n, 12)


def sharded(passages, table, folder, shard_size, extractor=None, encoder=None, **kw):
    return build_index_sharded(passages, extractor=extractor or TextExtractor(table), encoder=encoder or HashingEncoder(),
                               shard_folder=folder, shard_size=shard_size, graph_cfg=CFG, **kw)


@pytest.mark.parametrize("shard_size", [1, 4, 7, 23, 100])
@pytest.mark.parametrize("seed", [0, 1])
def test_any_shard_size_gives_the_one_build_index(tmp_path, shard_size, seed):
    passages, table = corpus(seed)
    want, _ = build_index(passages, extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG)
    got, report = sharded(passages, table, tmp_path / "b", shard_size)
    assert_same_index(got, want)
    assert report["shards"] == -(-len(passages) // shard_size) and report["resumed_shards"] == 0


def test_without_passage_embeddings(tmp_path):
    passages, table = corpus()
    want, _ = build_index(passages, extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG,
                          embed_passages=False)
    got, _ = sharded(passages, table, tmp_path / "b", 5, embed_passages=False)
    assert got.passage_emb is None
    assert_same_index(got, want)


def test_a_stopped_build_resumes_from_its_last_finished_shard(tmp_path):
    passages, table = corpus(n=23)
    want, _ = build_index(passages, extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG)
    with pytest.raises(KeyboardInterrupt):
        sharded(passages, table, tmp_path / "b", 5, extractor=StopAfter(table, 2))
    assert _folder(tmp_path / "b", passages, 5).done() == [0, 1]
    extractor, encoder = TextExtractor(table), HashingEncoder()
    got, report = sharded(passages, table, tmp_path / "b", 5, extractor=extractor, encoder=encoder)
    assert_same_index(got, want)
    assert report["resumed_shards"] == 2
    assert extractor.seen == [p.title for p in passages[10:]]  # shards 2, 3, 4 only
    # embedded: the facts and passages of shards 2-4, then every entity name once
    facts_left = sum(len(table[p.text]) for p in passages[10:])
    assert encoder.texts_encoded == facts_left + len(passages[10:]) + len(got.entities)


def _folder(path, passages, shard_size):
    """The build's shard folder as the build opens it (same fingerprint, slices and settings)."""
    settings = {"encoder": HashingEncoder().name, "embed_passages": True}
    spans = shard_ranges(len(passages), shard_size)
    return ShardFolder(path, build_fingerprint(passages, settings), len(spans), settings_digest=settings_digest(settings),
                       slices=lambda k: slice_digest(passages[spans[k][0]:spans[k][1]]))


def test_another_corpus_or_setting_starts_afresh(tmp_path):
    passages, table = corpus(n=12)
    with pytest.raises(KeyboardInterrupt):
        sharded(passages, table, tmp_path / "b", 4, extractor=StopAfter(table, 2))
    # another corpus: every shard runs again
    other = passages[:-1]
    extractor = TextExtractor(table)
    got, report = sharded(other, table, tmp_path / "b", 4, extractor=extractor)
    assert report["resumed_shards"] == 0 and extractor.seen == [p.title for p in other]
    # another encoder over the same corpus: afresh too
    extractor = TextExtractor(table)
    _, report = sharded(other, table, tmp_path / "b", 4, extractor=extractor, encoder=HashingEncoder(dim=32))
    assert report["resumed_shards"] == 0 and extractor.seen == [p.title for p in other]
    # another shard size: afresh (the shards would not line up)
    _, report = sharded(other, table, tmp_path / "b", 3)
    assert report["resumed_shards"] == 0


def test_a_process_runs_its_share_and_the_merge_needs_every_shard(tmp_path):
    """Two processes (torchrun ranks) share the shards; the merge of either sees the whole build."""
    passages, table = corpus(n=14)
    want, _ = build_index(passages, extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG)
    with pytest.raises(RuntimeError, match=r"shards \[1, 3\] .* are not written"):
        sharded(passages, table, tmp_path / "b", 4, my_shards=lambda todo: [k for k in todo if k % 2 == 0])
    odd = TextExtractor(table)
    got, report = sharded(passages, table, tmp_path / "b", 4, extractor=odd,
                          my_shards=lambda todo: [k for k in todo if k % 2 == 1])
    assert odd.seen == [p.title for p in passages[4:8] + passages[12:]]
    assert_same_index(got, want)


def test_helpers():
    assert shard_ranges(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert shard_ranges(0, 4) == []
    with pytest.raises(ValueError, match="shard_size must be >= 1"):
        shard_ranges(3, 0)
    blocks = [torch.arange(6.0).view(3, 2), torch.zeros(0, 2), torch.ones(1, 2)]
    parts = [{"a": b, "b": 2 * b} for b in blocks]
    got = gather_rows(iter(parts), {"a": 4, "b": 4}, "cpu")
    assert torch.equal(got["a"], torch.cat(blocks)) and torch.equal(got["b"], 2 * torch.cat(blocks))
    assert gather_rows(iter([]), {"a": 0}, "cpu") == {"a": None}
    with pytest.raises(RuntimeError, match="rows of a, expected 5"):
        gather_rows(iter(parts), {"a": 5}, "cpu")


def test_entity_synonyms_are_the_builds():
    """What a build stores equals a search of all its names again (the approximate-synonym bench
    swaps it for another backend)."""
    import dataclasses

    from hpengine.graph import entity_synonyms

    passages, table = corpus(seed=2, n=40)
    index, _ = build_index(passages, extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG)
    cfg = dataclasses.replace(CFG, synonym_threshold=index.meta["synonym_threshold"])
    assert torch.equal(entity_synonyms(index.entity_emb, index.entities, cfg), index.synonyms)
    with pytest.raises(ValueError, match="synonym_threshold must be set"):
        entity_synonyms(index.entity_emb, index.entities, dataclasses.replace(CFG, synonym_threshold=None))


def _stopped_build(tmp_path, n=15, finished=2):
    passages, table = corpus(n=n)
    with pytest.raises(KeyboardInterrupt):
        sharded(passages, table, tmp_path / "b", 5, extractor=StopAfter(table, finished))
    return passages, table


def _edit_first_fact(path):
    import json

    record = json.loads(path.read_text())
    facts = next(f for f in record["facts"] if f)  # the first passage with a fact
    facts[0][0] = "INJECTED fact text"
    path.write_text(json.dumps(record))


def _count_one_fact_less(path):
    import json

    record = json.loads(path.read_text())
    record["facts"] = [facts[1:] if facts else facts for facts in record["facts"]]
    path.write_text(json.dumps(record))


def _damage_tensors(path):
    path.write_bytes(b"\x00" * 4)


def _link_elsewhere(path):
    target = path.parent.parent / "victim.json"
    target.write_text("victim's own data")
    path.unlink()
    path.symlink_to(target)


@pytest.mark.parametrize("damage,file,why", [
    (_edit_first_fact, "shard-000000.json", "facts do not match their checksum"),
    (_count_one_fact_less, "shard-000000.json", "facts do not match their checksum"),
    (_damage_tensors, "shard-000000.safetensors", "tensors file does not match its checksum"),
    (_link_elsewhere, "shard-000000.json", "is a symbolic link"),
])
def test_a_shard_that_does_not_verify_is_made_again_and_said_so(tmp_path, capsys, damage, file, why):
    """A resumed build checks every kept shard against its checksums and what it was made from;
    one that fails is made again (one line says so) and the index equals the one-piece build."""
    passages, table = _stopped_build(tmp_path)
    want, _ = build_index(passages, extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG)
    damage(tmp_path / "b" / file)
    extractor = TextExtractor(table)
    got, report = sharded(passages, table, tmp_path / "b", 5, extractor=extractor)
    assert_same_index(got, want)
    assert "INJECTED" not in "".join(got.facts)
    assert report["resumed_shards"] == 1 and [r["shard"] for r in report["redone_shards"]] == [0]
    assert extractor.seen == [p.title for p in passages[:5] + passages[10:]]  # shards 0 and 2: shard 1 verified
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hpengine: shard 0 of ") and why in err[0], err
    if damage is _link_elsewhere:  # the link's target was neither read into the index nor changed
        assert (tmp_path / "victim.json").read_text() == "victim's own data"


def test_a_shard_of_another_corpus_slice_is_not_used(tmp_path):
    """A record copied in from another build (same shard number) does not verify here."""
    import shutil

    passages, table = _stopped_build(tmp_path, finished=1)
    other, other_table = corpus(seed=5, n=10)
    with pytest.raises(KeyboardInterrupt):
        sharded(other, other_table, tmp_path / "o", 5, extractor=StopAfter(other_table, 1))
    for name in ("shard-000000.json", "shard-000000.safetensors"):
        shutil.copyfile(tmp_path / "o" / name, tmp_path / "b" / name)
    folder = _folder(tmp_path / "b", passages, 5)
    assert folder.done() == [] and "does not match this build" in folder.redone[0][1]
