"""The command line end to end on the built-in corpus (real spaCy NER and MiniLM, offline)."""
import json

import pytest

from hpengine.graph import builtin_corpus_path
from hpengine.graph._index import Index
from hpengine.cli import main


def test_help_and_unknown_command(capsys):
    from hpengine.config import method_configs

    main(["--help"])
    out = capsys.readouterr().out
    for command in ("index", "add", "ask", "eval", "demo", "report", "grag-build"):
        assert f"hpengine {command}" in out, command
    methods = out.split("\nmethods", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert [line.split()[0] for line in methods] == list(method_configs())  # tests/test_front_door.py: the registry
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("hpengine: error: unknown command") and err.count("\n") == 1


def test_index_builtin_with_grag_parts_eval_grag_then_add_and_rebuild(tmp_path, capsys):
    """One built-in index through the front door: index (with GRAG parts), eval grag, add (which
    drops the GRAG parts), grag-build."""
    from hpengine.graph import builtin_questions_path

    out = tmp_path / "idx"
    main(["index", f"corpus={builtin_corpus_path()}", f"out={out}", "encoder.dtype=float32", "grag.build=true"])
    printed = capsys.readouterr().out
    assert "index written to" in printed and "facts" in printed and "peak RSS" in printed and "grag: " in printed
    index = Index.load(out)
    assert index.num_passages == 40 and index.num_facts > 40
    assert index.meta["build_report"]["seconds"].keys() >= {"extract", "embed", "synonyms", "structure"}
    assert index.grag is not None and index.grag.num_triples > 50 and index.grag.num_summaries >= 2
    report = index.meta["build_report"]["grag"]
    assert report["triples"] == index.grag.num_triples and "communities" in report["seconds"]
    run = tmp_path / "run.json"
    main(["eval", f"index={out}", f"questions={builtin_questions_path()}", "retriever=grag", f"output={run}",
          "encoder.dtype=float32"])
    records = json.loads(run.read_text())["records"]
    assert len(records) == 12 and all(r["retrieved"] and r["notes"] for r in records)
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"title": "Zzyzx Station", "text": "Zzyzx Station is a train stop in Orland."}) + "\n")
    capsys.readouterr()
    main(["add", f"corpus={extra}", f"out={out}", "encoder.dtype=float32"])
    printed = capsys.readouterr().out
    assert "added 1 passages" in printed and "skipped 0 already present" in printed
    assert "`hpengine add` added 1 passages after the GRAG parts were built, so they were dropped" in printed
    grown = Index.load(out)
    assert grown.num_passages == 41
    assert grown.facts[: index.num_facts] == index.facts
    assert grown.grag is None
    generation = json.loads((out / "index.json").read_text())["generation"]
    main(["add", f"corpus={extra}", f"out={out}", "encoder.dtype=float32"])  # the same passage again
    assert capsys.readouterr().out.startswith(f"nothing to add to {out}: all 1 passages are already in the index")
    assert json.loads((out / "index.json").read_text())["generation"] == generation
    with pytest.MonkeyPatch.context() as mp:  # retriever=grag now: refused before any model loads, naming the add
        mp.setattr("hpengine.models.encoder_for_index", lambda *a, **k: pytest.fail("a model loaded"))
        with pytest.raises(SystemExit) as exc:
            main(["eval", str(out), f"questions={builtin_questions_path()}", "retriever=grag"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "`hpengine add` added 1 passages after the GRAG" in err
    main(["grag-build", str(out)])  # the GRAG build through the front door
    assert "communities" in capsys.readouterr().out and Index.load(out).grag is not None


def test_misspelled_key_names_the_closest_before_compose(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["index", f"out={tmp_path / 'x'}", "graph.synonym_treshold=0.5"])
    err = capsys.readouterr().err
    assert "unknown key 'graph.synonym_treshold'" in err and "did you mean graph.synonym_threshold?" in err
    assert err.count("\n") == 1 and not (tmp_path / "x").exists()


def test_bad_corpus_names_file_and_record(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"title": "A", "text": "ok"}, {"title": "B"}]))
    with pytest.raises(SystemExit):
        main(["index", f"corpus={bad}", f"out={tmp_path / 'x'}"])
    err = capsys.readouterr().err
    assert "bad.json" in err and "record 1" in err and "text" in err, err
    assert not (tmp_path / "x").exists()


def test_ask_usage_names_its_question_forms(capsys):
    main(["ask", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert out.startswith('usage: hpengine ask IDX ["question" | - | questions=FILE]')
    assert "one question per line of stdin" in out and "not an answer" in out
    assert "from the terminal one at a time" in out
