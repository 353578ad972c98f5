"""The report page in a real headless browser (Debian's Chromium driven by playwright): the plots
render, the search and the filters pick the right questions, a question opens with its gold marked,
the page fetches nothing, each run's badges show its own measure and the per-run tables fit a
1,280 px window.

The full walks are slow (deselected by default): ``python -m pytest -m slow tests/eval/test_report_browser.py``;
the badge and width checks run by default. Every test skips without playwright or Chromium.
As a script it checks any report and can save a screenshot (docs/report.png is made this way):

    python tests/eval/test_report_browser.py REPORT.html [--search TEXT] [--screenshot PNG]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys

import pytest

CHROMIUM = os.environ.get("HPENGINE_CHROMIUM", "/usr/bin/chromium")
# offline and quiet: no update checks, no sync, no first-run pages
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _data(page_text: str) -> dict:
    """The embedded data as the page's ``JSON.parse`` reads it: ``<``, ``>``, ``&`` are ``\\u`` escapes
    in the block (nothing in it can end the element), which JSON decodes."""
    blob = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page_text, re.S).group(1)
    return json.loads(blob)


def _count(page) -> tuple:
    match = re.fullmatch(r"(\d+) of (\d+) questions", page.inner_text("#count"))
    assert match, page.inner_text("#count")
    return int(match.group(1)), int(match.group(2))


def check_page(path: str, search: str | None = None, screenshot: str | None = None) -> dict:
    """Open ``path`` in headless Chromium and check it; returns what was measured.

    Checks: no script errors and no request other than the file itself; every ``.plot`` SVG has a
    laid-out size and drawn paths; the search box, the type filter, the "gold not in index" filter
    (and its badge) and "solved by A and not by B" show exactly the questions the embedded data
    says; an opened question shows its ranked passages with the gold ones marked.
    """
    from playwright.sync_api import sync_playwright

    text = open(path, encoding="utf-8").read()
    data = _data(text)
    questions, runs = data["questions"], data["runs"]
    url = "file://" + os.path.abspath(path)
    found = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 900})
            errors, requests = [], []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("request", lambda req: requests.append(req.url) if req.url != url else None)
            page.goto(url)
            page.wait_for_selector("#questions details")

            plots = page.eval_on_selector_all(".plot", """els => els.map(e => {
                const svg = e.querySelector('svg'); const box = svg ? svg.getBoundingClientRect() : null;
                return {name: e.dataset.plot, width: box ? box.width : 0, height: box ? box.height : 0,
                        paths: svg ? svg.querySelectorAll('path').length : 0}; })""")
            assert plots and {p["name"] for p in plots} >= {"recall"}, plots
            for plot in plots:
                assert plot["width"] > 200 and plot["height"] > 100 and plot["paths"] > 10, plot
            found["plots"] = [p["name"] for p in plots]

            def shown():
                return page.eval_on_selector_all("#questions details", "els => els.map(e => e.dataset.id)")

            assert _count(page) == (len(questions), len(questions))
            assert shown() == [q["id"] for q in questions[:50]]

            # search: a question's own id finds it alone; words of a question find those containing them
            target = questions[len(questions) // 2]
            page.fill("#f-search", target["id"])
            assert _count(page)[0] == 1 and shown() == [target["id"]]
            words = (search or " ".join(target["question"].split()[:3])).lower()

            def hay(q):
                return " ".join([q["id"], q["question"], " ".join(q["gold"]), *(r["answer"] for r in q["runs"]),
                                 *(p[0] for p in q["passages"])]).lower()

            expected = [q["id"] for q in questions if all(w in hay(q) for w in words.split())]
            page.fill("#f-search", words)
            assert _count(page)[0] == len(expected) and shown() == expected[:50]
            found["search"] = (words, len(expected))
            page.fill("#f-search", "")

            facets = [(k, v) for q in questions for k, v in q["facets"].items()]
            if facets:
                key, value = facets[0]
                page.select_option("#f-type", f"{key}={value}")
                expected = [q["id"] for q in questions if q["facets"].get(key) == value]
                assert _count(page)[0] == len(expected) and shown() == expected[:50]
                page.select_option("#f-type", "")
            for choice, lacking in (("missing", True), ("present", False)):
                page.select_option("#f-gold", choice)
                expected = [q["id"] for q in questions if q["gold_not_in_index"] is lacking]
                assert _count(page)[0] == len(expected) and shown() == expected[:50]
                badges = page.eval_on_selector_all("#questions details > summary .badge.miss", "els => els.length")
                assert badges == (min(len(expected), 50) if lacking else 0)
                found[f"gold {choice}"] = len(expected)
            page.select_option("#f-gold", "")
            if len(runs) > 1:
                default_metric = page.input_value("#f-metric")  # restored below: the screenshot shows the page's own
                for metric, solved in (("em", lambda r: r["em"] == 1), ("r5", lambda r: r["recall5"] == 1)):
                    page.select_option("#f-metric", metric)
                    page.select_option("#f-a", "1")
                    page.select_option("#f-b", "0")
                    expected = [q["id"] for q in questions if solved(q["runs"][1]) and not solved(q["runs"][0])]
                    assert _count(page)[0] == len(expected) and shown() == expected[:50]
                    found[f"solved by {runs[1]['name']}, not {runs[0]['name']} ({metric})"] = len(expected)
                page.select_option("#f-a", "")
                page.select_option("#f-b", "")
                page.select_option("#f-metric", default_metric)

            # open a question with a gold passage in some run's ranking
            pick = next((q for q in questions if any(g for r in q["runs"] for _, g in r["ranked"])), questions[0])
            page.fill("#f-search", search or pick["id"])
            card = page.locator("#questions details").first
            card.locator("summary").click()
            card.locator(".body").wait_for()
            gold_marked = card.locator("ol.ranked li.gold").count()
            if not search:
                assert gold_marked == sum(g for r in pick["runs"] for _, g in r["ranked"])
            assert card.locator(".col").count() == len(runs)
            found["gold_marked"] = gold_marked
            if screenshot:
                page.evaluate("window.scrollTo(0, 0)")
                page.screenshot(path=screenshot, full_page=True)
            assert not errors, errors
            assert not requests, requests
        finally:
            browser.close()
    return found


@pytest.mark.slow
def test_report_in_headless_chromium(tmp_path):
    pytest.importorskip("playwright")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set HPENGINE_CHROMIUM)")
    sys.path.insert(0, os.path.dirname(__file__))
    from test_report import DENSE, GOLD, HYPER, _questions, _run

    from hpengine.eval import write_report

    qpath = _questions(tmp_path / "dev.json")
    paths = []
    for name, ranked, em in (("dense", DENSE, {"q1": 0, "q2": 1, "q3": 1, "q4": 0}),
                             ("hyperprove", HYPER, {"q1": 1, "q2": 0, "q3": 1, "q4": 1})):
        path = tmp_path / f"{name}.json"
        # the dense run's index lacks q4's gold passage: its badge, the filter and the ceiling
        path.write_text(json.dumps(_run(name, ranked, em, qpath, diagnostics=name == "hyperprove",
                                        not_in_index={"q4": 1} if name == "dense" else None)))
        paths.append(path)
    out = write_report(paths, tmp_path / "report.html")
    found = check_page(out, screenshot=str(tmp_path / "report.png"))
    assert found["plots"] == ["recall", "facet-type", "funnel"]
    assert found["solved by hyperprove, not dense (em)"] == 2  # q1 and q4
    assert (found["gold missing"], found["gold present"]) == (1, 3)  # q4
    assert found["gold_marked"] > 0
    assert os.path.getsize(tmp_path / "report.png") > 10_000
    assert len(GOLD) == 4


def check_hostile_page(path: str) -> dict:
    """Open a report whose text fields hold markup and script (``tests/eval/test_report_input.py``):
    no script runs (no dialog, no error, no request), the browser lists every question, and each
    text shows as text: in the list, in an opened question and in the summary table."""
    from playwright.sync_api import sync_playwright

    data = _data(open(path, encoding="utf-8").read())
    questions, runs = data["questions"], data["runs"]
    url = "file://" + os.path.abspath(path)
    found = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 900})
            errors, requests, dialogs = [], [], []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("request", lambda req: requests.append(req.url) if req.url != url else None)
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            page.goto(url)
            page.wait_for_selector("#questions details")
            assert _count(page) == (len(questions), len(questions))
            ids = page.eval_on_selector_all("#questions details", "els => els.map(e => e.dataset.id)")
            assert ids == [q["id"] for q in questions]
            assert page.eval_on_selector_all("script", "els => els.length") == 2
            assert page.eval_on_selector_all("#questions img, #summary img, .note img", "els => els.length") == 0
            summaries = page.eval_on_selector_all("#questions details > summary", "els => els.map(e => e.textContent)")
            for q, text in zip(questions, summaries):
                assert q["id"] in text and q["question"] in text, (q["id"], text)
            names = page.eval_on_selector_all('#summary td[data-key="name"]', "els => els.map(e => e.firstChild.data)")
            assert names == [r["name"] for r in runs]
            options = page.eval_on_selector_all("#f-type option, #f-a option", "els => els.map(e => e.textContent)")
            assert all(any(r["name"] in o for o in options) for r in runs)
            for k, q in enumerate(questions):  # every text of an opened question, as text
                card = page.locator("#questions details").nth(k)
                card.locator("summary").click()
                card.locator(".body").wait_for()
                body = card.locator(".body").evaluate("e => e.textContent")
                texts = [*q["gold"], *(x for p in q["passages"] for x in p)]
                for r in q["runs"]:
                    texts += [r["answer"], *r["notes"], *(t for t, _ in r["ranked"])]
                    for hop in r["chain"]:
                        texts += [hop["subquery"], hop["answer"], *hop["linked"],
                                  *(f[key] for f in hop["facts"] for key in ("title", "text"))]
                missing = [t for t in texts if t not in body]
                assert not missing, missing[:2]
                assert card.locator("ol.ranked li.gold").count() == sum(g for r in q["runs"] for _, g in r["ranked"])
            found["questions"] = len(questions)
            page.fill("#f-search", questions[-1]["id"].split()[0])
            found["search"] = _count(page)[0]
            assert not dialogs, dialogs
            assert not errors, errors
            assert not requests, requests
        finally:
            browser.close()
    return found


@pytest.mark.slow
def test_hostile_text_in_headless_chromium(tmp_path):
    pytest.importorskip("playwright")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set HPENGINE_CHROMIUM)")
    sys.path.insert(0, os.path.dirname(__file__))
    from test_report_input import hostile, hostile_files

    from hpengine.eval import write_report

    out = write_report(hostile_files(tmp_path, n=4), tmp_path / "report.html", title=hostile("title "))
    found = check_hostile_page(out)
    assert found == {"questions": 4, "search": 1}


def _need_chromium():
    pytest.importorskip("playwright")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set HPENGINE_CHROMIUM)")
    sys.path.insert(0, os.path.dirname(__file__))


@contextlib.contextmanager
def _browser(width: int = 1280, height: int = 800):
    """``open(path)``: a fresh page of one headless Chromium at ``width`` x ``height`` showing the report
    at ``path`` with its question list filled; script errors fail the test."""
    from playwright.sync_api import sync_playwright

    errors = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            def open_page(path):
                page = browser.new_page(viewport={"width": width, "height": height})
                page.on("pageerror", lambda err: errors.append(str(err)))
                page.goto("file://" + os.path.abspath(path))
                page.wait_for_selector("#questions details")
                return page

            yield open_page
        finally:
            browser.close()
    assert not errors, errors


def _grade(recall5):
    return "ok" if recall5 == 1 else "part" if recall5 > 0 else "bad"


def test_each_run_is_badged_by_its_own_measure_in_chromium(tmp_path):
    """A no-LLM run's badges show R@5 (green only when every gold passage is in the top 5), an LLM
    run's show EM; the "solved" filter opens on R@5 unless every run has LLM answers."""
    _need_chromium()
    from test_report import DENSE, HYPER, _questions, _run, with_llm

    from hpengine.eval import write_report

    qpath = _questions(tmp_path / "dev.json")
    dense = _run("dense", DENSE, {"q1": 0, "q2": 1, "q3": 0, "q4": 0}, qpath)  # no LLM: q3 has EM 0 at R@5 1
    llm = with_llm(_run("hyperprove", HYPER, {"q1": 1, "q2": 0, "q3": 1, "q4": 1}, qpath))
    mixed = write_report([dense, llm], tmp_path / "mixed.html")
    both_llm = write_report([with_llm(dense), llm], tmp_path / "llm.html")
    with _browser() as open_page:
        page = open_page(mixed)
        badges = page.eval_on_selector_all("#questions details > summary .badge[data-measure]",
                                           "els => els.map(e => [e.dataset.measure, e.className, e.textContent])")
        expected = []
        for d, m in zip(dense["records"], llm["records"]):
            expected.append(["r5", f"badge {_grade(d['recall@5'])}", f"dense R@5 {d['recall@5']:.3f}"])
            expected.append(["em", "badge " + ("ok" if m["em"] == 1 else "bad"),
                             f"hyperprove + LLM (qwen2.5-1.5b-instruct) EM {'✓' if m['em'] == 1 else '✗'} "
                             f"R@5 {m['recall@5']:.3f}"])
        assert badges == expected
        assert any(d["recall@5"] == 1 and d["em"] == 0 for d in dense["records"])  # the case the issue names
        assert page.input_value("#f-metric") == "r5"
        page.select_option("#f-a", "0")
        solved = [r["id"] for r in dense["records"] if r["recall@5"] == 1]
        assert _count(page)[0] == len(solved)
        assert page.eval_on_selector_all("#questions details", "els => els.map(e => e.dataset.id)") == solved
        card = page.locator("#questions details").first
        card.locator("summary").click()
        card.locator(".body").wait_for()
        assert "no LLM" in card.locator(".col").nth(0).inner_text()
        assert "no LLM" not in card.locator(".col").nth(1).inner_text()
        assert open_page(both_llm).input_value("#f-metric") == "em"


def _wide_runs(tmp_path) -> list:
    """Three runs with what makes the per-run tables wide: long file paths, several differing settings
    (a long model path among them), an LLM run with its tokens, five timed stages and reasoning paths."""
    from test_report import DENSE, HYPER, _questions, _run, with_llm

    folder = tmp_path / "runs_of_the_e5_small_encoder" / "on_2wikimultihopqa_dev_1000_questions_seed_0"
    folder.mkdir(parents=True)
    qpath = _questions(folder / "dev.json")
    em = {"q1": 1, "q2": 0, "q3": 1, "q4": 1}
    runs = [_run("dense", DENSE, em, qpath), _run("hyperprove", HYPER, em, qpath, diagnostics=True, top_k=5),
            with_llm(_run("grag", HYPER, em, qpath, top_k=7), model="/models/Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4")]
    runs[2]["seconds"] = {"encode": 12.5, "decompose": 130.25, "retrieve": 40.5, "read": 300.75, "link": 3.5}
    runs[2]["reasoning_paths"] = {"questions": 1000, "paths_per_question": 3.0, "distinct_paths_per_question": 1.82,
                                  "steps_per_path": 2.13, "unanimous_votes": 681}
    paths = []
    for j, run in enumerate(runs):
        run["config"]["retrieval"].update(num_seeds=10 * (j + 1), query_chunk_size=512 * (j + 1))
        paths.append(folder / f"{run['retriever']}_e5_small_2wiki_dev_1000_questions_top_k_{j}.json")
        paths[-1].write_text(json.dumps(run))
    return paths


def test_the_summary_fits_a_1280_px_window_in_chromium(tmp_path):
    _need_chromium()
    from hpengine.eval import write_report

    out = write_report(_wide_runs(tmp_path), tmp_path / "report.html")
    with _browser(1280, 800) as open_page:
        page = open_page(out)
        sizes = page.evaluate("""() => ({doc: document.documentElement.scrollWidth,
            tables: ['summary', 'cost'].map(id => { const t = document.getElementById(id);
              return {id, right: t.getBoundingClientRect().right, rows: t.rows.length,
                      scroll: t.parentElement.scrollWidth, client: t.parentElement.clientWidth}; })})""")
    assert sizes["doc"] <= 1280, sizes
    for table in sizes["tables"]:
        assert table["rows"] == 4, table  # the header and one row per run
        assert table["right"] <= 1280 and table["scroll"] <= table["client"], table


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report")
    parser.add_argument("--search", help="search text to leave in the box (and open its first question)")
    parser.add_argument("--screenshot", help="save a full-page PNG here")
    args = parser.parse_args()
    print(json.dumps(check_page(args.report, args.search, args.screenshot), indent=1))
