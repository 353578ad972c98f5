"""What a report holds: the runs it compares and the data its page shows (shared by the
computation in ``_report_summary.py`` and ``_report_browser.py`` and the rendering in ``_report_page.py``)."""
from __future__ import annotations

from dataclasses import dataclass, field

#: Cut-offs of the Recall@k curves; the summary table shows the ones in ``TABLE_KS``.
CURVE_KS = tuple(range(1, 11))
TABLE_KS = (1, 2, 5, 10)
#: The marker of an ``hpengine eval`` output (``evaluate()``'s result and the file ``write_result``
#: writes): ``{"format": EVAL_FORMAT_NAME, "format_version": EVAL_FORMAT_VERSION, ...}``. A report
#: reads this version only; raise the version when a field the report reads changes meaning.
EVAL_FORMAT_NAME = "hpengine-eval"
EVAL_FORMAT_VERSION = 1


@dataclass
class Run:
    """One ``hpengine eval`` output, as read by :func:`load_run`.

    Attributes:
        name: label on the page (retriever, ``+ LLM``, and the file stem when labels repeat).
        result: the JSON object as written by ``evaluate()`` / ``run_eval()``.
        path: the file it came from ("" for an in-memory result).
    """

    name: str
    result: dict
    path: str = ""

    @property
    def records(self) -> list:
        return self.result["records"]


@dataclass
class ReportData:
    """What the page shows, computed from the runs and (optionally) their question file.

    Attributes:
        runs: the runs, in the order given.
        rows: summary-table rows, one dict per run (see :func:`summary_rows`).
        differing: config keys whose values differ between the runs, ``{key: [value per run]}``.
        curves: Recall@k for ``CURVE_KS`` from the records' ``gold_ranks``, one list per run
            (``None`` entries: no question with gold).
        facets: question-type breakdowns, ``{facet: {value: [per-run {"n", "recall@5", "em"}]}}``.
        funnels: per run, its ``hop_diagnostics`` (``None`` when the run has none).
        questions: per question, the record for the browser (see :func:`browser_records`).
        measures: per run, what its question badges show: ``"em"`` for a run with LLM answers,
            ``"r5"`` for a no-LLM run (see :func:`run_measure`).
        notes: remarks shown at the top of the page (missing files, the runs' warnings, each once).
    """

    runs: list
    rows: list
    differing: dict
    curves: list
    facets: dict
    funnels: list
    questions: list
    measures: list
    notes: list = field(default_factory=list)
