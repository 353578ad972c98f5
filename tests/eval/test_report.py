"""``hpengine report`` on small made-up run files: table values, plots, refusals, the browser data."""
import json
import re
from html.parser import HTMLParser

import pytest

from hpengine.errors import UserError
from hpengine.eval import EVAL_FORMAT_NAME, EVAL_FORMAT_VERSION, recall_at_k
from hpengine.eval._report import build_report, collect, default_report_path, write_report
from hpengine.eval._report_summary import make_runs, question_type, recall_ceiling, recall_from_ranks
from hpengine.jobs import report_main
from hpengine.cli import main

GOLD = {"q1": [("Film A", "Film A is by Ann."), ("Ann", "Ann was born in Oslo.")],
        "q2": [("Film B", "Film B is by Bo."), ("Bo", "Bo was born in Rome.")],
        "q3": [("C", "C is a river."), ("D", "D is a river.")],
        "q4": [("E", "E is a city.")]}
TYPES = {"q1": "compositional", "q2": "compositional", "q3": "comparison", "q4": "comparison"}


def _questions(path):
    records = [{"id": qid, "question": f"question {qid}?", "answer": [f"ans {qid}"], "type": TYPES[qid],
                "gold_passages": [{"title": t, "text": x} for t, x in gold]} for qid, gold in GOLD.items()]
    path.write_text(json.dumps(records))
    return path


def eval_output(**fields) -> dict:
    """``fields`` as an ``hpengine eval`` output of the format version the report reads."""
    return {"format": EVAL_FORMAT_NAME, "format_version": EVAL_FORMAT_VERSION, **fields}


def _run(retriever, ranked, em, questions_path, diagnostics=False, not_in_index=None, **config):
    """An eval output as ``evaluate()`` + ``run_eval()`` write it, for ranked titles per question;
    ``not_in_index``: ``{question id: gold passages the index lacks}`` (never ranked)."""
    not_in_index = not_in_index or {}
    records = []
    for qid, titles in ranked.items():
        gold = GOLD[qid]
        pairs = [(t, dict(gold).get(t, f"{t} text")) for t in titles]
        rec = {"id": qid, "gold": [f"ans {qid}"], "question": f"question {qid}?",
               "prediction": f"ans {qid}" if em[qid] else "wrong", "retrieved": titles,
               "chain": [{"subquery": f"question {qid}?", "answer": "x",
                          "facts": [{"text": "a fact", "title": titles[0], "passage": 0, "score": 0.5,
                                     "distance": -1}], "linked": titles[1:2]}],
               "em": float(em[qid]), "f1": float(em[qid])}
        rec["gold_ranks"] = [pairs.index(g) if g in pairs else None for g in gold]
        rec["gold_in_index"] = len(gold) - not_in_index.get(qid, 0)
        for k in (2, 5):
            rec[f"recall@{k}"] = recall_at_k(pairs, gold, k)
        records.append(rec)
    n = len(records)
    result = {"format": EVAL_FORMAT_NAME, "format_version": EVAL_FORMAT_VERSION,
              "num_questions": n, "retriever": retriever, "llm": False,
              "em": round(sum(r["em"] for r in records) / n, 4), "f1": round(sum(r["f1"] for r in records) / n, 4),
              "recall@2": round(sum(r["recall@2"] for r in records) / n, 4),
              "recall@5": round(sum(r["recall@5"] for r in records) / n, 4),
              "seconds": {"encode": 1.25, "retrieve": 0.5}, "wall_seconds": 2.0, "questions_per_second": 2.0,
              "llm_tokens_in": 0, "llm_tokens_out": 0, "decomposition_fallbacks": 0, "peak_rss_mb": 512.5,
              "config": {"index": "idx", "questions": str(questions_path),
                         "retrieval": {"top_k": config.get("top_k", 3)},
                         "engine": {"retriever": retriever, "diagnostics": diagnostics}, "model": {"llm": ""}},
              "records": records}
    if diagnostics:
        result["hop_diagnostics"] = [{"seeds": 0.5, "subgraph": 0.9, "selected": 0.4, "linked": 0.1, "chain": 0.5},
                                     {"seeds": 0.6, "subgraph": 0.95, "selected": 0.3, "linked": 0.0, "chain": 0.7}]
    return result


DENSE = {"q1": ["Film A", "X", "Y", "Z", "W", "V", "Ann"], "q2": ["X", "Film B", "Y"],
         "q3": ["C", "D"], "q4": ["X", "Y"]}
HYPER = {"q1": ["Film A", "Ann"], "q2": ["Film B", "Y", "Bo"], "q3": ["D", "X", "Y", "Z", "W", "C"],
         "q4": ["E"]}


@pytest.fixture
def runs(tmp_path):
    qpath = _questions(tmp_path / "dev.json")
    dense = _run("dense", DENSE, {"q1": 0, "q2": 1, "q3": 1, "q4": 0}, qpath)
    hyper = _run("hyperprove", HYPER, {"q1": 1, "q2": 0, "q3": 1, "q4": 1}, qpath, diagnostics=True, top_k=5)
    paths = []
    for name, result in (("dense", dense), ("hyper", hyper)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(result))
        paths.append(path)
    return paths, [dense, hyper]


class _Cells(HTMLParser):
    """``{(row, data-key): text}`` of the per-run tables (the summary and the cost table): the text of
    each element with a ``data-key``, less that of keyed elements inside it (the file path under the
    run name is ``path``)."""

    def __init__(self):
        super().__init__()
        self.cells, self._row, self._keys, self._in_table = {}, None, [], False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id") in ("summary", "cost"):
            self._in_table = True
        elif self._in_table and tag == "tr":
            self._row = int(attrs["data-run"]) if "data-run" in attrs else None
        elif self._in_table and self._row is not None:
            self._keys.append(attrs.get("data-key"))
            if attrs.get("data-key"):
                self.cells[self._row, attrs["data-key"]] = ""

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_table = False
        elif self._in_table and self._row is not None and tag not in ("tr", "table") and self._keys:
            self._keys.pop()

    def handle_data(self, data):
        key = next((k for k in reversed(self._keys) if k), None)
        if self._in_table and key is not None:
            self.cells[self._row, key] += data


def _cells(page):
    parser = _Cells()
    parser.feed(page)
    return parser.cells


def _data(page):
    """The browser's data as the page's ``JSON.parse`` reads it (``<`` and the like are ``\\u`` escapes)."""
    blob = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S).group(1)
    return json.loads(blob)


def _mean(values):
    return sum(values) / len(values)


def test_table_values_equal_the_run_files(runs, tmp_path):
    paths, results = runs
    out = write_report(paths, tmp_path / "report.html")
    page = open(out, encoding="utf-8").read()
    cells = _cells(page)
    for j, result in enumerate(results):
        assert cells[j, "method"] == result["retriever"]
        assert cells[j, "questions"] == str(result["num_questions"])
        for key in ("em", "f1", "recall@2", "recall@5", "questions_per_second"):
            assert cells[j, key] == f"{result[key]:.3f}", key
        assert cells[j, "peak_rss_mb"] == f"{result['peak_rss_mb']:.0f}"
        assert cells[j, "seconds"] == "encode 1.25, retrieve 0.50"
        assert cells[j, "llm_tokens"] == "0 / 0"
        assert cells[j, "reasoning_paths"] == "–"
        # cut-offs the run file lacks: the mean over questions of Recall@k from the ranked list
        for k in (1, 10):
            expected = _mean([r[f"recall@{k}"] if f"recall@{k}" in r else recall_from_ranks(r["gold_ranks"], k)
                              for r in result["records"]])
            assert cells[j, f"recall@{k}"] == f"{expected:.3f}"
    # only the setting that differs is listed (the retriever is the method column)
    assert cells[0, "settings"] == "retrieval.top_k=3\nengine.diagnostics=false"
    assert cells[1, "settings"] == "retrieval.top_k=5\nengine.diagnostics=true"


def test_every_plot_is_present_and_the_page_is_self_contained(runs, tmp_path):
    paths, _ = runs
    page = build_report([json.loads(p.read_text()) for p in paths], paths=[str(p) for p in paths])
    for plot in ("recall", "facet-type", "funnel"):
        match = re.search(rf'<div class="plot" data-plot="{plot}"><svg.*?</svg>\s*</div>', page, re.S)
        assert match, plot
        assert "<path" in match.group(0)
    assert page.count("<svg") == 3
    for remote in ('src="http', "src='http", 'href="http', "<link", "@import", "url(http", "<iframe"):
        assert remote not in page, remote
    # plot labels are text in the SVG: the runs' names and the question types are there
    recall = re.search(r'data-plot="recall">(.*?)</svg>', page, re.S).group(1)
    assert "dense" in recall and "hyperprove" in recall
    assert "compositional" in page and "comparison" in page


def test_recall_curve_from_the_ranked_lists(runs):
    paths, results = runs
    data = collect(make_runs(results, [str(p) for p in paths]))
    assert not data.notes
    for result, curve in zip(results, data.curves):
        for k, value in zip(range(1, 11), curve):
            assert value == pytest.approx(_mean([recall_from_ranks(r["gold_ranks"], k) for r in result["records"]]))
        assert curve == sorted(curve)  # recall grows with k
    # the curve at k = 2, 5 is the run file's own Recall@k
    assert data.curves[0][1] == pytest.approx(results[0]["recall@2"], abs=1e-4)
    assert data.curves[1][4] == pytest.approx(results[1]["recall@5"], abs=1e-4)
    by_type = data.facets["type"]
    assert by_type["comparison"][1] == {"n": 2, "recall@5": 0.75, "em": 1.0}
    assert data.funnels[0] is None and data.funnels[1] == results[1]["hop_diagnostics"]


def test_browser_data_marks_gold_passages(runs):
    paths, results = runs
    page = build_report(results, paths=[str(p) for p in paths])
    data = _data(page)
    assert [r["name"] for r in data["runs"]] == ["dense", "hyperprove"]
    q1 = data["questions"][0]
    assert q1["id"] == "q1" and q1["facets"] == {"type": "compositional"} and q1["gold"] == ["ans q1"]
    assert q1["passages"] == [list(p) for p in GOLD["q1"]]
    assert [gold for _, gold in q1["runs"][0]["ranked"]] == [True, False, False, False, False, False, True]
    assert q1["runs"][1]["em"] == 1.0 and q1["runs"][1]["chain"][0]["facts"][0]["score"] == 0.5
    assert [q["id"] for q in data["questions"]] == ["q1", "q2", "q3", "q4"]


def with_llm(result: dict, model: str = "/models/qwen2.5-1.5b-instruct") -> dict:
    """A copy of ``result`` as a run whose answers an LLM wrote (the run file's ``"llm": true``)."""
    llm = json.loads(json.dumps(result))
    llm.update(llm=True, llm_tokens_in=12345, llm_tokens_out=678)
    llm["config"]["model"]["llm"] = model
    return llm


def _filter_default(page):
    """The value of the "solved" filter's measure as the page opens (its ``selected`` option)."""
    select = re.search(r'<select id="f-metric"[^>]*>(.*?)</select>', page, re.S).group(1)
    chosen = re.findall(r'<option value="(\w+)" selected>', select)
    assert len(chosen) == 1, select
    return chosen[0]


def test_no_llm_runs_are_judged_by_recall_at_5(runs):
    _, results = runs
    assert not any(r["llm"] for r in results)
    page = build_report(results)
    assert [r["measure"] for r in _data(page)["runs"]] == ["r5", "r5"]
    assert _filter_default(page) == "r5"


def test_llm_runs_are_judged_by_exact_match(runs):
    _, (dense, hyper) = runs
    page = build_report([with_llm(dense), with_llm(hyper)])
    assert [r["measure"] for r in _data(page)["runs"]] == ["em", "em"]
    assert _filter_default(page) == "em"
    # beside a no-LLM run each keeps its own badge; the filter takes R@5, the measure both runs have
    page = build_report([dense, with_llm(hyper)])
    assert [r["measure"] for r in _data(page)["runs"]] == ["r5", "em"]
    assert _filter_default(page) == "r5"


def test_question_facets():
    assert question_type("2hop__1_2", None) == {"hops": "2-hop"}
    assert question_type("4hop3__1_2_3_4", {}) == {"hops": "4-hop"}
    assert question_type("5a8b", {"type": "bridge", "level": "hard"}) == {"type": "bridge", "level": "hard"}
    assert question_type("5a8b", {}) == {}


def test_different_question_sets_are_refused(runs, tmp_path, capsys):
    paths, results = runs
    fewer = dict(results[1], records=results[1]["records"][:3], num_questions=3)
    other = tmp_path / "other.json"
    other.write_text(json.dumps(fewer))
    with pytest.raises(SystemExit) as exc:
        report_main([str(paths[0]), str(other), f"out={tmp_path / 'r.html'}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hpengine: error: ") and "different question sets" in err
    assert "dense.json" in err and "other.json" in err and "'q4'" in err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("content, expected", [
    ("{not json", "invalid JSON at line 1"),
    (json.dumps({"em": 1.0}), "rerun `hpengine eval ... output=FILE` with hpengine"),
    (json.dumps(eval_output(em=1.0)), "not an `hpengine eval` output: missing key(s) num_questions, records"),
    (json.dumps([1, 2]), "expected the JSON object written by `hpengine eval output=...` (got list)"),
    (json.dumps(eval_output(num_questions=1, records=[{"x": 1}])),
     "records[0] must be an object with an 'id' (got keys x)"),
    (json.dumps(eval_output(num_questions=1, records="q1")),
     "records must be a list of objects with an 'id' (got str)"),
])
def test_bad_run_files_give_one_line(tmp_path, capsys, content, expected):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(SystemExit) as exc:
        report_main([str(bad)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hpengine: error: ") and "bad.json" in err and expected in err, err


@pytest.mark.parametrize("argv, expected", [
    ([], "usage: hpengine report"),
    (["missing.json"], "run file missing.json does not exist"),
    (["out=x.html"], "no run files given"),
    (["a.json", "colour=red"], "unknown key 'colour' for hpengine report"),
    (["a.json", "titel=x"], "unknown key 'titel' for hpengine report (did you mean title?)"),
    (["a.json", "debug=maybe"], "debug= must be true or false (got 'maybe')"),
])
def test_bad_command_lines(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if not argv:
        main(["report"])
        assert expected in capsys.readouterr().out
        return
    with pytest.raises(SystemExit) as exc:
        main(["report", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hpengine: error: ") and expected in err, err


def test_command_line_writes_beside_the_first_run(runs, capsys):
    paths, _ = runs
    main(["report", str(paths[0]), str(paths[1]), "names=Dense,HyperProve", "title=Two runs"])
    out = default_report_path(paths[0])
    assert out == str(paths[0].with_suffix(".html"))
    assert f"report written to {out}" in capsys.readouterr().out
    page = open(out, encoding="utf-8").read()
    assert "<title>Two runs</title>" in page and [r["name"] for r in _data(page)["runs"]] == ["Dense", "HyperProve"]


def test_a_missing_question_file_is_a_note_not_an_error(runs, tmp_path):
    _, results = runs
    result = dict(results[0], config=dict(results[0]["config"], questions=str(tmp_path / "gone.json")))
    page = build_report([result])
    assert "not found" in page and _data(page)["questions"][0]["passages"] == []
    # the ranks recorded in the run still give the curve and the table
    assert _cells(page)[0, "recall@1"] == _cells(build_report([results[0]]))[0, "recall@1"]


def test_demo_writes_its_report(tmp_path, capsys):
    main(["demo", f"out={tmp_path / 'idx'}", "encoder.dtype=float32"])
    printed = capsys.readouterr().out
    out = tmp_path / "idx.report.html"
    assert f"report page written to {out}" in printed
    page = out.read_text(encoding="utf-8")
    assert len(_data(page)["questions"]) == 12 and 'data-plot="recall"' in page


def test_method_specific_settings_warnings_and_record_notes(runs):
    from hpengine.eval._report_summary import differing_settings

    _, (dense, hyper) = runs
    ppr = json.loads(json.dumps(dense))
    ppr["retriever"] = "ppr"
    ppr["config"]["engine"].update(retriever="ppr", damping=0.85)  # a key only the PPR run has
    ppr["warnings"] = ["2 gold passages are not in the index"]
    ppr["records"][0]["notes"] = ["ppr: no entity linked, dense passage ranking"]
    assert differing_settings(make_runs([dense, ppr])) == {}
    assert differing_settings(make_runs([hyper, ppr])) == {"retrieval.top_k": [5, 3],
                                                           "engine.diagnostics": [True, False]}
    page = build_report([dense, ppr])
    assert "ppr: 2 gold passages are not in the index" in page
    assert _data(page)["questions"][0]["runs"][1]["notes"] == ["ppr: no entity linked, dense passage ranking"]


def test_llm_runs_show_their_model_and_tokens(runs):
    _, (dense, hyper) = runs
    llm = with_llm(hyper)
    cells = _cells(build_report([hyper, llm]))
    assert cells[1, "method"] == "hyperprove + LLM (qwen2.5-1.5b-instruct)"
    assert cells[1, "llm_tokens"] == "12,345 / 678"
    assert "model.llm=/models/qwen2.5-1.5b-instruct" in cells[1, "settings"]
    llm["reasoning_paths"] = {"questions": 100, "paths_per_question": 3.0, "distinct_paths_per_question": 1.82,
                              "steps_per_path": 2.13, "unanimous_votes": 68}
    cells = _cells(build_report([hyper, llm]))
    assert cells[1, "reasoning_paths"] == "3 per question (1.82 distinct), 2.13 steps each, 68 of 100 unanimous"


def test_questions_without_gold_are_left_out_of_recall(runs):
    _, (dense, _) = runs
    run = json.loads(json.dumps(dense))
    for rec in run["records"][:2]:  # as evaluate() writes a question without gold passages
        rec.update({"gold_ranks": [], "gold_in_index": 0, "recall@2": None, "recall@5": None})
        del rec["recall@5"]
    page = build_report([run], questions=[])
    data = _data(page)  # strict JSON: no NaN
    assert data["questions"][0]["runs"][0]["recall5"] is None
    assert "NaN" not in page


# --- the run-file format -------------------------------------------------------------------------


@pytest.mark.parametrize("marker, got", [
    ({}, "no format marker"),
    ({"format_version": EVAL_FORMAT_VERSION + 1}, f"version {EVAL_FORMAT_VERSION + 1}"),
    ({"format_version": 0}, "version 0"),
    ({"format": "hpengine-index"}, "format 'hpengine-index'"),
    ({"format_version": str(EVAL_FORMAT_VERSION)}, f"version '{EVAL_FORMAT_VERSION}'"),
])
def test_a_run_file_of_another_format_version_is_refused(runs, tmp_path, capsys, marker, got):
    paths, (dense, _) = runs
    old = {k: v for k, v in dense.items() if k not in ("format", "format_version")}
    old = {**old, **{k: v for k, v in eval_output().items() if k not in marker}, **marker} if marker else old
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    with pytest.raises(SystemExit) as exc:
        report_main([str(paths[0]), str(path), f"out={tmp_path / 'r.html'}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"hpengine: error: {path}: "), err
    assert "rerun `hpengine eval ... output=FILE` with hpengine" in err and got in err, err
    assert not (tmp_path / "r.html").exists()
    with pytest.raises(UserError, match="rerun `hpengine eval"):  # an in-memory result the same
        build_report([old])


def test_records_need_gold_ranks_and_gold_in_index(runs):
    _, (dense, _) = runs
    for key, value, expected in (("gold_ranks", None, "records[0].gold_ranks must be a list of ranks"),
                                 ("gold_in_index", None, "records[0].gold_in_index must be an integer (got null)"),
                                 ("gold_in_index", 3, "records[0].gold_in_index must be the number of its 2 gold")):
        run = json.loads(json.dumps(dense))
        run["records"][0][key] = value
        with pytest.raises(UserError, match=re.escape(expected)):
            build_report([run])


# --- gold passages that are not in the index -----------------------------------------------------


def test_questions_with_gold_not_in_the_index_are_marked_with_the_ceiling(tmp_path):
    qpath = _questions(tmp_path / "dev.json")
    # q1 lacks one of its 2 gold passages (Ann, never ranked), q4 its only one (E)
    ranked = {**DENSE, "q1": ["Film A", "X"]}
    lacking = _run("dense", ranked, dict.fromkeys(GOLD, 0), qpath, not_in_index={"q1": 1, "q4": 1})
    complete = _run("hyperprove", HYPER, dict.fromkeys(GOLD, 0), qpath)
    assert recall_ceiling(lacking["records"]) == (pytest.approx((0.5 + 1 + 1 + 0) / 4), 2)
    assert recall_ceiling(complete["records"]) == (1.0, 0)
    page = build_report([lacking, complete])
    cells = _cells(page)
    assert (cells[0, "recall_ceiling"], cells[0, "gold_not_in_index"]) == ("0.625", "2")
    assert (cells[1, "recall_ceiling"], cells[1, "gold_not_in_index"]) == ("1.000", "0")
    # no Recall@k exceeds the ceiling
    data = collect(make_runs([lacking, complete]))
    assert max(v for v in data.curves[0] if v is not None) <= 0.625
    questions = _data(page)["questions"]
    assert [q["gold_not_in_index"] for q in questions] == [True, False, False, True]
    assert [q["runs"][0]["gold_missing"] for q in questions] == [1, 0, 0, 1]
    assert [q["runs"][1]["gold_missing"] for q in questions] == [0, 0, 0, 0]
    assert 'id="f-gold"' in page and "gold not in index" in page


def test_recall_ceiling_without_gold_is_undefined():
    assert recall_ceiling([{"gold_ranks": [], "gold_in_index": 0}]) == (None, 0)


def test_each_warning_is_shown_once_naming_its_runs(runs):
    _, (dense, hyper) = runs
    shared = "2 of 4 questions have gold passages that are not in the index (2 passages): they count as not retrieved"
    results = []
    for j, base in enumerate((dense, hyper, dense)):
        run = json.loads(json.dumps(base))
        run["warnings"] = [shared] + (["1 non-finite numbers (NaN/inf) written as null"] if j < 2 else [])
        results.append(run)
    page = build_report(results, names=["a", "b", "c"])
    assert page.count(shared) == 1 and f"all runs: {shared}" in page
    assert page.count("written as null") == 1 and "a, b: 1 non-finite numbers" in page
    data = collect(make_runs(results, names=["a", "b", "c"]))
    assert data.notes == [f"all runs: {shared}", "a, b: 1 non-finite numbers (NaN/inf) written as null"]


# --- the per-hop funnel --------------------------------------------------------------------------


def test_runs_without_hop_diagnostics_say_how_to_get_the_funnel(runs):
    _, (dense, hyper) = runs
    default = json.loads(json.dumps(hyper))
    del default["hop_diagnostics"]
    page = build_report([dense, default])  # default runs: no funnel plot, the way to get one instead
    assert 'data-plot="funnel"' not in page and page.count("<svg") == 2
    hint = re.search(r'<div class="note" id="funnel-hint">(.*?)</div>', page, re.S).group(1)
    assert "No run here records hop diagnostics" in hint and "engine.diagnostics=true" in hint
    page = build_report([dense, hyper])  # one run has them: its plot, and which run is not in it
    hint = re.search(r'<div class="note" id="funnel-hint">(.*?)</div>', page, re.S).group(1)
    assert 'data-plot="funnel"' in page and "Not in the funnel (no hop diagnostics recorded): dense." in hint
    assert 'id="funnel-hint"' not in build_report([hyper])


# --- evaluate() writes what the report reads -----------------------------------------------------


class _FakeEngine:
    """What ``evaluate()`` uses of an engine: its index's passages, ``answer``, timer, LLM parts."""

    method, decomposer, reader = "fake", None, None

    def __init__(self, passages, ranked):
        from types import SimpleNamespace

        self.index = SimpleNamespace(passages=[SimpleNamespace(title=t, text=x) for t, x in passages],
                                     num_passages=len(passages), page_out=lambda: 0)
        self.timer = SimpleNamespace(seconds={"retrieve": 0.5})
        self.ranked = ranked

    def llm_components(self):
        return []

    def answer(self, questions):
        from hpengine.pipeline import Prediction

        return [Prediction(q, "ans", [], list(self.ranked[q])) for q in questions]


def test_evaluate_output_carries_the_format_and_gold_in_index(tmp_path):
    from hpengine.config import EvalConfig
    from hpengine.eval import Question
    from hpengine.jobs import evaluate
    from hpengine.jobs import write_result

    # the index lacks Ann (q1's second gold passage) and E (q4's only one)
    passages = [g for qid in ("q1", "q2", "q3") for g in GOLD[qid] if g[0] != "Ann"]
    questions = [Question(qid, f"question {qid}?", [f"ans {qid}"], list(gold), [t for t, _ in gold])
                 for qid, gold in GOLD.items()]
    ranked = {"question q1?": [0, 1], "question q2?": [2, 1], "question q3?": [3, 4], "question q4?": [0]}
    result = evaluate(_FakeEngine(passages, ranked), questions, EvalConfig(), progress=False)
    assert (result["format"], result["format_version"]) == (EVAL_FORMAT_NAME, EVAL_FORMAT_VERSION)
    assert [r["gold_in_index"] for r in result["records"]] == [1, 2, 2, 0]
    assert [r["gold_ranks"] for r in result["records"]] == [[0, None], [1, 0], [0, 1], [None]]
    assert result["questions_with_gold_not_in_index"] == 2
    path = tmp_path / "run.json"
    write_result(result, str(path))
    assert list(json.loads(path.read_text()))[:2] == ["format", "format_version"]
    page = open(write_report([path], tmp_path / "run.html"), encoding="utf-8").read()
    assert _cells(page)[0, "recall_ceiling"] == "0.625"
    assert [q["gold_not_in_index"] for q in _data(page)["questions"]] == [True, False, False, True]
    assert build_report([result]) == build_report([json.loads(path.read_text())])
