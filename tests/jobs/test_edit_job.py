"""``hpengine delete`` / ``hpengine update`` through the front door (fake models): what they write
equals a fresh index of the edited corpus, they hold the writer lock, and a bad input is one line,
exit status 2, before any model loads, the index untouched. (Named apart from
tests/graph/test_edit.py: test modules need unique basenames.)"""
import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from hpengine.config import EditJobConfig, ExtractorConfig, GraphConfig
from hpengine.errors import UserError
from hpengine.graph import Index, IndexLockedError, IndexStore, Passage, build_index
from hpengine.jobs import run_delete, run_update
from hpengine.models import ExtractedFact
from hpengine.cli import main
from hpengine.testing._fakes import HashingEncoder

TABLE = {
    "Alpha": [("Alpha was directed by Bea Stone.", ["Alpha", "Bea Stone"]),
              ("Alpha premiered in 1999.", ["Alpha", "1999"])],
    "Bea Stone": [("Bea Stone was born in Kell.", ["Bea Stone", "Kell"])],
    "Kell": [("Kell lies on the river Oro.", ["kell", "Oro"]), ("Kell is a town.", ["KELL"])],
    "Oro": [("The Oro river flows into the sea.", ["Oro River", "sea"])],
    "new Kell": [("KELL is a city on the Oro.", ["KELL", "Oro", "Alpha River"])],
}
TITLES = ["Alpha", "Bea Stone", "Kell", "Oro"]
# not the GraphConfig defaults: the jobs must take the settings the index was built with
CFG = GraphConfig(synonym_threshold=0.55, synonym_max_per_entity=1)


class TextExtractor:
    def __init__(self, table: dict):
        self.table = table

    def extract(self, passages: list, progress: bool = False) -> list:
        return [[ExtractedFact(t, list(e)) for t, e in self.table.get(p.text, self.table.get(p.title, []))]
                for p in passages]


def passages(*titles):
    return [Passage(t, f"text of {t}") for t in titles]


def build(corpus):
    meta = {"build_config": {"graph": dataclasses.asdict(CFG), "extractor": dataclasses.asdict(ExtractorConfig())}}
    index, _ = build_index(corpus, extractor=TextExtractor(TABLE), encoder=HashingEncoder(), graph_cfg=CFG, meta=meta)
    return index


@pytest.fixture
def models(monkeypatch):
    """Fake models for the jobs; ``loaded`` records which were made."""
    loaded = []

    def extractor(cfg, store):
        loaded.append("extractor")
        return TextExtractor(TABLE)

    def encoder(meta, cfg, where):
        loaded.append("encoder")
        return HashingEncoder()

    monkeypatch.setattr("hpengine.jobs._edit.make_extractor", extractor)
    monkeypatch.setattr("hpengine.jobs._edit.encoder_for_index", encoder)
    monkeypatch.delenv("HPENGINE_DEBUG", raising=False)
    return loaded


@pytest.fixture
def idx(tmp_path):
    return str(build(passages(*TITLES)).save(tmp_path / "idx"))


def write(path: Path, records: list) -> str:
    path.write_text("".join(json.dumps({"title": p.title, "text": p.text}) + "\n" for p in records))
    return str(path)


def tree(path) -> dict:
    """Every file of the index but the lock and the record of its last holder."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(Path(path).rglob("*"))
            if p.is_file() and p.name not in (".hpengine.lock", ".hpengine.holder")}


def assert_same_index(got, want):
    assert (got.passages, got.facts, got.entities) == (want.passages, want.facts, want.entities)
    for name in ("fact_passage", "fact_entity_raw", "synonyms", "fact_emb", "entity_emb", "passage_emb"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert torch.equal(got.graph.transition().to_dense(), want.graph.transition().to_dense())


@pytest.mark.parametrize("how", ["corpus", "titles", "ids", "one title"])
def test_delete_equals_a_fresh_index(idx, tmp_path, models, capsys, how):
    arg = {"corpus": f"corpus={write(tmp_path / 'gone.jsonl', passages('Bea Stone', 'Oro'))}",
           "titles": "titles=[Bea Stone,Oro]", "ids": "ids=[1,3]", "one title": "titles=Bea Stone"}[how]
    main(["delete", arg, f"out={idx}"])
    out = capsys.readouterr().out
    assert out.startswith(f"index written to {idx}") and "passages re-read" in out
    rest = ["Alpha", "Kell"] if how != "one title" else ["Alpha", "Kell", "Oro"]
    assert_same_index(Index.load(idx), build(passages(*rest)))
    assert models == ["extractor", "encoder"]  # "Kell" lost its first mention: its passage was read again
    assert Index.load(idx).meta["edit_reports"][-1]["command"] == "delete"


def test_delete_loads_no_model_when_no_first_mention_moves(idx, models, capsys):
    main(["delete", "ids=3", f"out={idx}"])
    assert models == []
    assert_same_index(Index.load(idx), build(passages("Alpha", "Bea Stone", "Kell")))


def test_update_equals_a_fresh_index(idx, tmp_path, models, capsys):
    main(["update", f"corpus={write(tmp_path / 'new.jsonl', [Passage('Kell', 'new Kell')])}", f"out={idx}"])
    assert "updated 1 passages" in capsys.readouterr().out
    want = build([*passages("Alpha", "Bea Stone"), Passage("Kell", "new Kell"), *passages("Oro")])
    assert_same_index(Index.load(idx), want)
    # a record equal to its passage changes nothing, and nothing is written
    generation = IndexStore(idx).generation().number
    main(["update", f"corpus={write(tmp_path / 'same.jsonl', passages('Oro'))}", f"out={idx}"])
    assert "nothing to update" in capsys.readouterr().out
    assert IndexStore(idx).generation().number == generation


def test_the_jobs_hold_the_writer_lock(idx, tmp_path, models, monkeypatch):
    from hpengine.jobs import _edit

    seen = []

    def while_locked(real):
        def call(index, *args, **kwargs):
            with pytest.raises(IndexLockedError):  # another writer waits, and gives up after lock_timeout
                with IndexStore(idx).writer(timeout=0):
                    pass
            seen.append(real.__name__)
            return real(index, *args, **kwargs)
        return call

    monkeypatch.setattr(_edit, "delete_passages", while_locked(_edit.delete_passages))
    monkeypatch.setattr(_edit, "update_passages", while_locked(_edit.update_passages))
    run_delete(EditJobConfig(out=idx, ids=[3]), progress=False)
    run_update(EditJobConfig(out=idx, corpus=write(tmp_path / "new.jsonl", [Passage("Kell", "new Kell")])),
               progress=False)
    assert seen == ["delete_passages", "update_passages"]
    with IndexStore(idx).writer(timeout=0):  # and a job waits for a writer that holds it
        with pytest.raises(IndexLockedError, match="is being written by"):
            run_delete(EditJobConfig(out=idx, ids=[2], lock_timeout=0.1), progress=False)


def test_bad_inputs_are_one_line_and_leave_the_index_untouched(idx, tmp_path, models, capsys):
    (tmp_path / "empty.jsonl").write_text("")
    new = write(tmp_path / "new.jsonl", [Passage("Kell", "new Kell")])
    before = tree(idx)
    at_the_command_line = [  # refused while the config is read, and inside the job
        (["delete", f"out={idx}"], "needs corpus=PATH, titles=[...] or ids=[...]"),
        (["delete", "ids=[true]", f"out={idx}"], "ids= must be an id or a list of ids"),
        (["delete", "ids=[0,1,2,3]", f"out={idx}"], "would leave the index empty"),
        (["update", f"corpus={new}", "titles=Kell", f"out={idx}"], "titles= is for delete"),
    ]
    for argv, needle in at_the_command_line:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.startswith("hpengine: error: ") and err.count("\n") == 1, (argv, err)
        assert needle in err, (argv, err)
    in_the_jobs = [
        (run_delete, dict(titles=["Nowhere"]), "name no passage"),
        (run_delete, dict(corpus=str(tmp_path / "empty.jsonl")), "has no passages to delete"),
        (run_delete, dict(ids=[1], out=str(tmp_path / "nowhere")), "no such index folder"),
        (run_delete, dict(ids=[1], graph=GraphConfig(synonym_max_per_entity=3)),
         "graph.synonym_max_per_entity differs"),
        (run_update, dict(), "update needs corpus=PATH"),
        (run_update, dict(corpus=new, ids=[1, 2]), "one per record"),
    ]
    for job, kwargs, needle in in_the_jobs:
        with pytest.raises(UserError, match=re.escape(needle)) as exc:
            job(EditJobConfig(**{"out": idx, **kwargs}), progress=False)
        assert "\n" not in str(exc.value)
    assert tree(idx) == before
    assert models == []  # every refusal came before any model loaded


def test_a_stale_grag_note_names_the_rebuild(idx, models, monkeypatch, capsys):
    index = Index.load(idx)
    index.meta["grag_stale"] = "earlier note; rebuild them with `hpengine grag-build INDEX`"  # as a delete left it
    index.save(idx)
    _, report = run_delete(EditJobConfig(out=idx, ids=[3]), progress=False)
    note = Index.load(idx).meta["grag_stale"]
    assert f"hpengine grag-build {idx}" in note and report["grag_stale"] == note
    from hpengine.config import GragConfig
    from hpengine.pipeline.retrievers._grag import GragRetriever

    steps = type("Steps", (), {"index": Index.load(idx), "config": GragConfig()})()
    with pytest.raises(UserError, match=r"retriever=grag: .*hpengine grag-build"):
        GragRetriever(steps)


def test_the_jobs_take_the_settings_the_index_was_built_with():
    from hpengine.config import EncoderConfig
    from hpengine.jobs._edit import _as_built, _encoder_config

    llm = dataclasses.asdict(ExtractorConfig(kind="llm", llm_model="m", cache_dir="/c", device="cuda"))
    built = _as_built("extractor", ExtractorConfig(device="cpu"), llm, runtime=("device",))
    assert (built.kind, built.llm_model, built.cache_dir, built.device) == ("llm", "m", "/c", "cpu")
    assert _as_built("graph", GraphConfig(), None) == GraphConfig()  # nothing recorded: as given
    with pytest.raises(UserError, match=r"extractor.min_fact_chars differs .*\(got extractor.min_fact_chars=3\)"):
        _as_built("extractor", ExtractorConfig(min_fact_chars=3), llm, runtime=("device",))
    meta = {"encoder_config": dataclasses.asdict(EncoderConfig(name_or_path="minilm", dtype="float32", device="cuda"))}
    cfg = EditJobConfig(out="x")
    assert _encoder_config(cfg, meta) == EncoderConfig(name_or_path="minilm", dtype="float32", device="cpu")
    cfg.encoder.dtype = "float16"  # named on the command line: as given
    assert _encoder_config(cfg, meta) is cfg.encoder


def test_a_rerun_of_a_finished_delete_by_ids_is_a_no_op(idx, models, capsys):
    """Positions shift after a delete: the same ``delete ids=`` again (as an interrupt message
    invites) removes nothing; ``expect_generation=`` of the generation read deletes its positions."""
    main(["delete", "ids=[1,3]", f"out={idx}"])
    assert "(generation 2)" in capsys.readouterr().out
    before = tree(idx)
    main(["delete", "ids=[1,3]", f"out={idx}"])
    out = capsys.readouterr().out
    assert out.startswith(f"nothing to delete in {idx}: generation 2 is already this delete's result") \
        and "'Bea Stone', 'Oro'" in out and "expect_generation=2" in out
    assert tree(idx) == before
    assert_same_index(Index.load(idx), build(passages("Alpha", "Kell")))
    main(["delete", "ids=1", f"out={idx}", "expect_generation=2"])  # Kell, asked for by this generation's id
    assert_same_index(Index.load(idx), build(passages("Alpha")))


def test_an_edit_of_another_generation_than_expected_is_refused(idx, tmp_path, models, capsys):
    main(["delete", "ids=3", f"out={idx}"])
    before = tree(idx)
    for args in (["delete", "ids=0"], ["update", f"corpus={write(tmp_path / 'new.jsonl', [Passage('Kell', 'new Kell')])}"]):
        with pytest.raises(SystemExit) as exc:
            main([*args, f"out={idx}", "expect_generation=1"])
        err = capsys.readouterr().err.strip()
        assert exc.value.code == 2 and len(err.splitlines()) == 1
        assert err.startswith("hpengine: error: ") and "is at generation 2, not expect_generation=1" in err
        assert tree(idx) == before and models == []
