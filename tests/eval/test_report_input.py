"""``hpengine report`` on hostile and broken input: text that could end or alter the page's script
block, non-finite metrics, run files with wrong types, and page paths that cannot take the page.
Every command line runs in-process (``main([...])``)."""
import json
import os
import re
from html.parser import HTMLParser

import pytest

from hpengine.eval import EVAL_FORMAT_NAME, EVAL_FORMAT_VERSION
from hpengine.eval._report import build_report, collect, write_report
from hpengine.eval._report_summary import make_runs
from hpengine.cli import main

#: strings that end or alter a script element, an HTML comment, a CDATA section or a JS string,
#: an entity that must stay literal, and mathtext that matplotlib would fail to draw
HOSTILE = ("</script><script>alert(1)</script>", "<!--<script>", "]]>", "&lt;&amp;", "a\u2028b\u2029c",
           "<![CDATA[x", "</SCRIPT\t>", "$\\frac{$ ${1}", "\"'`\\", "<img src=x onerror=alert(2)>")
EVIL = "".join(HOSTILE)


def eval_output(**fields) -> dict:
    """``fields`` as an ``hpengine eval`` output of the format version the report reads."""
    return {"format": EVAL_FORMAT_NAME, "format_version": EVAL_FORMAT_VERSION, **fields}


def hostile(tag: str) -> str:
    """A distinct hostile value per field: ``tag`` (which field), then every hostile string."""
    return f"{tag}{EVIL}"


def hostile_question_file(path, n: int = 3):
    records = [{"id": hostile(f"q{i}"), "question": hostile(f"question {i} "), "answer": [hostile(f"gold {i} ")],
                "type": hostile("type "),
                "gold_passages": [{"title": hostile(f"title {i} "), "text": hostile(f"passage {i} ")}]}
               for i in range(n)]
    path.write_text(json.dumps(records))
    return path


def hostile_run(j: int, questions_path, n: int = 3) -> dict:
    """A run whose every text field (ids, question, prediction, gold, titles, chain, notes,
    method, config, warnings, stage names) is hostile; ranks are real so gold is marked."""
    records = []
    for i in range(n):
        gold_title = hostile(f"title {i} ")
        retrieved = [hostile(f"other {j}.{i} "), gold_title]
        records.append({
            "id": hostile(f"q{i}"), "question": hostile(f"question {i} "), "gold": [hostile(f"gold {i} ")],
            "prediction": hostile(f"prediction {j}.{i} "), "retrieved": retrieved, "gold_ranks": [1],
            "gold_in_index": 1,
            "notes": [hostile(f"note {j}.{i} ")],
            "chain": [{"subquery": hostile(f"subquery {j}.{i} "), "answer": hostile(f"hop answer {j}.{i} "),
                       "facts": [{"text": hostile(f"fact {j}.{i} "), "title": hostile(f"fact title {j}.{i} "),
                                  "passage": 0, "score": 0.5, "distance": 1}],
                       "linked": [hostile(f"linked {j}.{i} ")]}],
            "em": float(i == j), "f1": float(i == j), "recall@2": 1.0, "recall@5": 1.0})
    return eval_output(
        num_questions=n, retriever=hostile(f"method {j} "), llm=False, em=0.5, f1=0.5,
        seconds={hostile("stage "): 1.0}, wall_seconds=1.0, questions_per_second=3.0, llm_tokens_in=0,
        llm_tokens_out=0, peak_rss_mb=1.0, warnings=[hostile(f"warning {j} ")],
        config={"index": "idx", "questions": str(questions_path), "retrieval": {"top_k": hostile(f"setting {j} ")},
                "engine": {"retriever": "x"}, "model": {"llm": ""}},
        hop_diagnostics=[{"seeds": 0.5, "subgraph": 0.9, "selected": 0.4, "linked": 0.1, "chain": 0.5}],
        records=records, **{"recall@2": 1.0, "recall@5": 1.0})


def hostile_files(tmp_path, n: int = 3) -> list:
    qpath = hostile_question_file(tmp_path / "dev.json", n)
    paths = []
    for j in range(2):
        path = tmp_path / f"run{j}.json"
        path.write_text(json.dumps(hostile_run(j, qpath, n)))
        paths.append(path)
    return paths


_DATA_OPEN = '<script type="application/json" id="report-data">'


def _blob(page: str) -> str:
    start = page.index(_DATA_OPEN) + len(_DATA_OPEN)
    return page[start:page.index("</script>", start)]


class _Page(HTMLParser):
    """Start and end tags, comments, the text of each script and the text outside scripts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.starts, self.ends, self.comments, self.scripts, self.text = [], [], [], [], []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.starts.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        self.ends.append(tag)
        self._in_script = self._in_script and tag != "script"

    def handle_comment(self, data):
        self.comments.append(data)

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)


def test_hostile_text_cannot_end_or_alter_the_data_block(tmp_path):
    paths = hostile_files(tmp_path)
    results = [json.loads(p.read_text()) for p in paths]
    title = hostile("title ")
    page = build_report(results, paths=[str(p) for p in paths], title=title)
    blob = _blob(page)
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        assert raw not in blob, repr(raw)
    data = json.loads(blob)
    # exactly the strings the runs hold, and exactly what the library computed
    runs = make_runs(results, [str(p) for p in paths])
    expected = collect(runs).questions
    assert data["questions"] == json.loads(json.dumps(expected))
    assert [r["name"] for r in data["runs"]] == [run.name for run in runs]
    for i, q in enumerate(data["questions"]):
        assert q["id"] == hostile(f"q{i}") and q["question"] == hostile(f"question {i} ")
        assert q["gold"] == [hostile(f"gold {i} ")] and q["facets"] == {"type": hostile("type ")}
        assert q["passages"] == [[hostile(f"title {i} "), hostile(f"passage {i} ")]]
        for j, r in enumerate(q["runs"]):
            assert r["answer"] == hostile(f"prediction {j}.{i} ") and r["notes"] == [hostile(f"note {j}.{i} ")]
            assert r["ranked"] == [[hostile(f"other {j}.{i} "), False], [hostile(f"title {i} "), True]]
            hop = r["chain"][0]
            assert (hop["subquery"], hop["answer"], hop["linked"]) == (
                hostile(f"subquery {j}.{i} "), hostile(f"hop answer {j}.{i} "), [hostile(f"linked {j}.{i} ")])
            assert hop["facts"][0]["text"] == hostile(f"fact {j}.{i} ")
            assert hop["facts"][0]["title"] == hostile(f"fact title {j}.{i} ")
    assert data["runs"][0]["name"] == hostile("method 0 ")

    # the rest of the page is well formed: two script elements, the data and the browser
    parsed = _Page()
    parsed.feed(page)
    parsed.close()
    scripts = [attrs for tag, attrs in parsed.starts if tag == "script"]
    assert scripts == [{"type": "application/json", "id": "report-data"}, {}]
    assert parsed.ends.count("script") == 2 and parsed.ends[-2:] == ["body", "html"]
    assert parsed.scripts[0] == blob and "JSON.parse" in parsed.scripts[1]
    assert not [tag for tag, _ in parsed.starts if tag in ("img", "iframe", "object", "embed")]
    assert not any("script" in c.lower() or "alert" in c for c in parsed.comments), parsed.comments
    # hostile text outside the data is text: title, run names, methods, settings, warnings, plots
    text = "".join(parsed.text)
    for value in (title, hostile("method 0 "), hostile("method 1 "), hostile("setting 1 "), hostile("stage "),
                  hostile("warning 0 ")):
        assert value in text, value[:20]
    for value in (hostile("type "), hostile("method 1 ")):  # SVG text (legend, ticks, titles)
        assert value.replace("\u2028", "").replace("\u2029", "") in text.replace("\u2028", "").replace("\u2029", "")


def test_a_lone_surrogate_stays_an_escape(tmp_path):
    from hpengine.eval._report_page import json_script_text

    text = json_script_text({"a": "x\ud800y", "b": "<&>\u2028"})
    assert text == '{"a":"x\\ud800y","b":"\\u003c\\u0026\\u003e\\u2028"}'
    assert json.loads(text) == {"a": "x\ud800y", "b": "<&>\u2028"}
    text.encode("utf-8")


# --- non-finite and undefined numbers --------------------------------------------------------


def _small_run(**top) -> dict:
    records = [{"id": f"q{i}", "question": f"question {i}?", "gold": ["a"], "prediction": "a",
                "retrieved": ["T"], "gold_ranks": [0], "gold_in_index": 1, "em": 1.0, "f1": 1.0, "recall@2": 1.0,
                "recall@5": 1.0,
                "chain": [{"subquery": "s", "answer": "a",
                           "facts": [{"title": "T", "text": "t", "score": 0.5, "distance": 0}], "linked": []}]}
               for i in range(2)]
    return eval_output(**{"num_questions": 2, "retriever": "dense", "llm": False, "em": 1.0, "f1": 1.0,
                          "recall@2": 1.0, "recall@5": 1.0, "config": {"questions": None}, "records": records, **top})


def _cell(page: str, key: str) -> str:
    return re.search(rf'data-key="{re.escape(key)}"[^>]*>(.*?)</td>', page, re.S).group(1)


def test_non_finite_metrics_of_a_result_show_as_n_a():
    nan, inf = float("nan"), float("inf")
    run = _small_run(em=nan, f1=inf, questions_per_second=-inf, wall_seconds=nan, seconds={"encode": nan},
                     hop_diagnostics=[{"seeds": nan, "subgraph": 0.5}],
                     reasoning_paths={"questions": 2, "paths_per_question": nan, "distinct_paths_per_question": 1.0,
                                      "steps_per_path": inf, "unanimous_votes": 1})
    run["recall@5"] = nan
    run["records"][0].update(em=nan, f1=inf)
    run["records"][0]["chain"][0]["facts"][0]["score"] = nan
    page = build_report([run], questions=[])
    for key in ("em", "f1", "recall@5", "questions_per_second", "wall_seconds"):
        assert _cell(page, key) == "n/a", key
    assert _cell(page, "seconds") == "encode n/a"
    assert _cell(page, "reasoning_paths") == "n/a per question (1 distinct), n/a steps each, 1 of 2 unanimous"
    assert re.search(r"<td>hop 1</td><td[^>]*>n/a</td>", page)
    assert not re.search(r"\b(nan|inf|NaN|Infinity)\b", re.sub(r"<svg.*?</svg>", "", page, flags=re.S))

    def strict(constant):
        raise AssertionError(f"non-standard JSON constant {constant}")

    data = json.loads(_blob(page), parse_constant=strict)
    rec = data["questions"][0]["runs"][0]
    assert (rec["em"], rec["f1"], rec["chain"][0]["facts"][0]["score"]) == ("n/a", "n/a", "n/a")


def test_undefined_recall_shows_n_a():
    run = _small_run(**{"recall@2": None, "recall@5": None})
    for rec in run["records"]:  # no question has gold passages: recall is undefined everywhere
        rec.update({"gold_ranks": [], "gold_in_index": 0, "recall@2": None, "recall@5": None})
    page = build_report([run], questions=[])
    for k in (1, 2, 5, 10):
        assert _cell(page, f"recall@{k}") == "n/a"
    assert _cell(page, "recall_ceiling") == "n/a"


def _fail_line(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["report", *argv])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("hpengine: error: "), captured.err
    assert "Traceback" not in captured.err and "report written" not in captured.out
    return captured.err


@pytest.mark.parametrize("where, value, field", [
    ("top", ("recall@5", float("nan")), "recall@5 must be a finite number or null (got nan)"),
    ("top", ("em", float("inf")), "em must be a finite number or null (got inf)"),
    ("record", ("recall@2", float("nan")), "records[1].recall@2 must be a finite number or null (got nan)"),
    ("record", ("f1", float("-inf")), "records[1].f1 must be a finite number or null (got -inf)"),
])
def test_a_non_finite_metric_in_a_run_file_is_refused(tmp_path, capsys, where, value, field):
    run = _small_run()
    (run if where == "top" else run["records"][1])[value[0]] = value[1]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))  # Python writes NaN / Infinity, as a broken writer would
    err = _fail_line(capsys, [str(path), f"out={tmp_path / 'r.html'}"])
    assert str(path) in err and field in err, err
    assert not (tmp_path / "r.html").exists()


# --- run files with fields of the wrong type -------------------------------------------------


def _set(run: dict, dotted: str, value) -> None:
    keys = [int(k) if k.isdigit() else k for k in dotted.split(".")]
    target = run
    for k in keys[:-1]:
        target = target[k]
    target[keys[-1]] = value


@pytest.mark.parametrize("dotted, value, expected", [
    ("records", {"q0": {}}, "records must be a list of objects with an 'id' (got dict)"),
    ("records.1", "q1", "records[1] must be an object with an 'id' (got str)"),
    ("records.1.id", ["q1"], "records[1].id must be a string or an integer (got list)"),
    ("records.1.id", "q0", "records[1].id 'q0' repeats records[0].id"),
    ("records.1.retrieved", "T", "records[1].retrieved must be a list of passage titles (got str)"),
    ("records.1.retrieved", ["T", 3], "records[1].retrieved[1] must be a string (got int)"),
    ("records.1.gold", "a", "records[1].gold must be a list of answer strings (got str)"),
    ("records.1.gold_ranks", "0", "records[1].gold_ranks must be a list of ranks (integers or null) (got str)"),
    ("records.1.gold_ranks", [0.5], "records[1].gold_ranks[0] must be an integer or null (got float)"),
    ("records.1.gold_in_index", 1.0, "records[1].gold_in_index must be an integer (got float)"),
    ("records.1.gold_in_index", -1, "records[1].gold_in_index must be the number of its 1 gold passages"),
    ("format_version", True, "not an `hpengine eval` output of format 'hpengine-eval' version 1"),
    ("records.1.prediction", 3, "records[1].prediction must be a string or null (got int)"),
    ("records.1.em", "1.0", "records[1].em must be a number or null (got str)"),
    ("records.1.recall@5", True, "records[1].recall@5 must be a number or null (got bool)"),
    ("records.1.notes", "n", "records[1].notes must be a list of messages (got str)"),
    ("records.1.chain", {}, "records[1].chain must be a list of hop objects (got dict)"),
    ("records.1.chain.0.facts.0.score", "high", "records[1].chain[0].facts[0].score must be a number or null"),
    ("records.1.chain.0.linked", "T", "records[1].chain[0].linked must be a list of passage titles (got str)"),
    ("num_questions", "2", "num_questions must be an integer (got str)"),
    ("em", "0.5", "em must be a number or null (got str)"),
    ("recall@5", [1.0], "recall@5 must be a number or null (got list)"),
    ("seconds", {"encode": "1s"}, "seconds.encode must be a number (got str)"),
    ("retriever", 7, "retriever must be a string or null (got int)"),
    ("config", "cfg", "config must be an object or null (got str)"),
    ("config.model", "qwen", "config.model must be an object or null (got str)"),
    ("warnings", "w", "warnings must be a list of messages (got str)"),
    ("hop_diagnostics", [{"seeds": "x"}], "hop_diagnostics[0].seeds must be a number or null (got str)"),
    ("reasoning_paths", {"questions": 2}, "reasoning_paths.paths_per_question must be a number (got null)"),
    ("llm_tokens_in", 1.5, "llm_tokens_in must be an integer or null (got float)"),
])
def test_a_run_file_with_a_wrong_type_names_the_field(tmp_path, capsys, monkeypatch, dotted, value, expected):
    import hpengine.eval._report as report

    good, bad = _small_run(), _small_run()
    _set(bad, dotted, value)
    paths = [tmp_path / "good.json", tmp_path / "bad.json"]
    for path, run in zip(paths, (good, bad)):
        path.write_text(json.dumps(run))
    monkeypatch.setattr(report, "collect", lambda *a, **k: pytest.fail("the work started before the checks"))
    err = _fail_line(capsys, [*map(str, paths), f"out={tmp_path / 'r.html'}"])
    assert f"{paths[1]}: {expected}" in err, err
    assert sorted(os.listdir(tmp_path)) == ["bad.json", "good.json"]


# --- where the page goes -----------------------------------------------------------------------


@pytest.fixture
def run_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_small_run()))
    return path


def _no_work(monkeypatch):
    import hpengine.eval._report as report

    monkeypatch.setattr(report, "load_run", lambda *a: pytest.fail("a run file was read before out= was checked"))


def test_out_that_is_a_folder_is_refused_before_any_work(run_file, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "pages"
    folder.mkdir()
    _no_work(monkeypatch)
    err = _fail_line(capsys, [str(run_file), f"out={folder}"])
    assert f"out='{folder}' is a folder" in err and "report.html" in err
    assert sorted(os.listdir(tmp_path)) == ["pages", "run.json"] and not os.listdir(folder)


def test_out_in_a_missing_folder_is_refused(run_file, tmp_path, capsys, monkeypatch):
    _no_work(monkeypatch)
    err = _fail_line(capsys, [str(run_file), f"out={tmp_path / 'no' / 'r.html'}"])
    assert f"folder {tmp_path / 'no'} does not exist" in err
    assert not (tmp_path / "no").exists()


def test_out_in_a_folder_that_is_not_writable_is_refused(run_file, tmp_path, capsys, monkeypatch):
    locked = str(tmp_path / "locked")
    os.mkdir(locked)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if os.fspath(p) == locked else real_access(p, mode))
    _no_work(monkeypatch)
    err = _fail_line(capsys, [str(run_file), f"out={locked}/r.html"])
    assert f"folder {locked} is not writable" in err


def test_out_equal_to_an_input_is_refused(run_file, tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(run_file.read_text())
    before = other.read_bytes()
    err = _fail_line(capsys, [str(run_file), str(other), f"out={other}"])
    assert f"out='{other}' is the input file {other}" in err
    assert other.read_bytes() == before
    os.symlink(run_file, tmp_path / "link.html")  # the same file under another name
    err = _fail_line(capsys, [str(run_file), f"out={tmp_path / 'link.html'}"])
    assert "is the input file" in err and json.loads(run_file.read_text())["num_questions"] == 2


def test_the_page_is_written_atomically(run_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "r.html"
    out.write_text("old page")
    moves = []
    real_replace = os.replace

    def failing_replace(src, dst):
        moves.append(os.fspath(src))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    err = _fail_line(capsys, [str(run_file), f"out={out}"])
    assert f"out='{out}': cannot write the page (No space left on device)" in err
    assert out.read_text() == "old page"
    assert sorted(os.listdir(tmp_path)) == ["r.html", "run.json"]  # the temporary file is gone
    tmp = moves[0]
    assert os.path.dirname(tmp) == str(tmp_path) and os.path.basename(tmp).startswith(".r.html.")

    def recording_replace(src, dst):
        moves.append(os.fspath(src))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", recording_replace)
    main(["report", str(run_file), f"out={out}"])
    main(["report", str(run_file), f"out={out}"])
    assert capsys.readouterr().out.count(f"report written to {out}") == 2
    assert len(set(moves)) == 3  # a unique temporary name each time
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert sorted(os.listdir(tmp_path)) == ["r.html", "run.json"]


def test_an_interrupted_write_removes_the_temporary_file(run_file, tmp_path, monkeypatch):
    real_open = open
    started = []

    def interrupted_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if "x" in mode:  # the temporary page: created, then Ctrl-C half way through
            started.append(file)
            f.close()
            raise KeyboardInterrupt
        return f

    monkeypatch.setattr("builtins.open", interrupted_open)
    with pytest.raises(KeyboardInterrupt):
        write_report([run_file], tmp_path / "r.html")
    monkeypatch.undo()
    assert started and sorted(os.listdir(tmp_path)) == ["run.json"]


def test_a_missing_run_file_and_a_folder_as_run_file(tmp_path, capsys):
    err = _fail_line(capsys, [str(tmp_path / "gone.json")])
    assert f"run file {tmp_path / 'gone.json'} does not exist" in err
    err = _fail_line(capsys, [str(tmp_path)])
    assert f"run file {tmp_path} is a folder" in err


def test_run_file_not_utf8(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_bytes(b'{"num_questions": 1, "records": []}\n\xff')
    err = _fail_line(capsys, [str(path)])
    assert f"{path}:2: not valid UTF-8" in err
