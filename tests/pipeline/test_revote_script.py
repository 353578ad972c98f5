"""benchmarks/analysis/revote_grag.py recounts the self-consistency vote of a recorded GRAG-MH run over any
subset of its paths, with unanimous votes and the oracle F1, from the records alone."""
import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "analysis" / "revote_grag.py"


def _record(gold, answers, scores, prediction):
    from hpengine.eval import exact_match, f1_score

    paths = [{"steps": 1, "answer": a, "score": s} for a, s in zip(answers, scores)]
    chain = [{"subquery": f"step of path {i}", "answer": a, "facts": [], "linked": []} for i, a in enumerate(answers)]
    return {"gold": gold, "prediction": prediction, "em": exact_match(prediction, gold),
            "f1": f1_score(prediction, gold), "paths": paths, "chain": chain}


def _table(out: str) -> list:
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and not ln.startswith("| run")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in rows]


def test_revote_counts_subsets_unanimous_votes_and_the_oracle(tmp_path, monkeypatch, capsys):
    records = [
        # paths 0-2 say Oslo (wrong), paths 3-4 say Bergen (right): the five-path vote stays Oslo
        _record(["Bergen"], ["Oslo", "Oslo", "Oslo", "Bergen", "Bergen"], [0.9, 0.8, 0.7, 0.6, 0.5], "Oslo"),
        # every path right
        _record(["Paris"], ["Paris", "paris", "Paris.", "Paris", "the Paris"], [0.1] * 5, "Paris"),
        # path 0 abstains, the others split 2-2: the tie goes to the best score (path 4)
        _record(["Rome"], ["unknown", "Milan", "Milan", "Rome", "Rome"], [0.9, 0.2, 0.3, 0.4, 0.8], "Rome"),
    ]
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"results": {"grag": {"records": records}}}))

    def revote(*extra):  # the script's main, in this process (its imports are the test's)
        monkeypatch.setattr(sys, "argv", [str(SCRIPT), str(run), *extra])
        runpy.run_path(str(SCRIPT), run_name="__main__")
        return _table(capsys.readouterr().out)

    [row] = revote()
    assert row[1:] == ["3", "0.667", "0.667", "0.667", "0.667", "0", "1", "1.000"]
    [row] = revote("--paths", "0,3,4")  # Oslo, Bergen, Bergen / Paris x3 / unknown, Rome, Rome
    assert row[1:] == ["3", "0.667", "0.667", "1.000", "1.000", "1", "1", "1.000"]
    [row] = revote("--paths", "0,1")  # Oslo x2 / Paris x2 / unknown, Milan
    assert row[1:] == ["3", "0.667", "0.667", "0.333", "0.333", "1", "2", "0.333"]
    with pytest.raises(SystemExit, match="names path 7"):
        revote("--paths", "0,7")
