"""matplotlib figures of the report, returned as inline SVG text (no pyplot state, no files)."""
from __future__ import annotations

import io
import math
import re

#: Stage order of ``hop_diagnostics`` (see ``hpengine.jobs.hop_diagnostics``).
FUNNEL_STAGES = ("seeds", "subgraph", "selected", "linked", "chain")
_RC = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
       "axes.grid": True, "grid.alpha": 0.3, "legend.frameon": False}


def _require_matplotlib():
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError as err:  # pragma: no cover - matplotlib is an install requirement
        raise ImportError("hpengine report needs matplotlib: pip install 'matplotlib>=3.7'") from err
    return matplotlib, Figure


def _svg(fig, key: str) -> str:
    matplotlib, _ = _require_matplotlib()
    buf = io.StringIO()
    # a per-figure salt keeps clip-path ids of several inline SVGs distinct and the output stable
    with matplotlib.rc_context({**_RC, "svg.hashsalt": f"hpengine-report-{key}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: the SVG sits inside HTML


def _figure(width: float, height: float, ncols: int = 1):
    matplotlib, Figure = _require_matplotlib()
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _plain(text) -> str:
    """``text`` as matplotlib draws it literally: a run name or question type with ``$`` would
    otherwise be read as mathtext (and one such as ``$\\frac{$`` fails to draw), and a legend
    label starting with ``_`` would be left out of the legend."""
    text = str(text).replace("$", r"\$")
    return "\u200b" + text if text.startswith("_") else text


def _colors(n: int) -> list:
    matplotlib, _ = _require_matplotlib()
    cmap = matplotlib.colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def recall_curve_svg(names: list, ks: tuple, curves: list) -> str:
    """Recall@k against k, one line per run."""
    matplotlib, _ = _require_matplotlib()
    with matplotlib.rc_context(_RC):
        fig, (ax,) = _figure(6.0, 3.4)
        for name, curve, color in zip(names, curves, _colors(len(names))):
            points = [(k, v) for k, v in zip(ks, curve) if v is not None]
            if points:
                ax.plot(*zip(*points), marker="o", label=_plain(name), color=color)
        ax.set_xlabel("k (passages)")
        ax.set_ylabel("passage Recall@k")
        ax.set_xticks(list(ks))
        ax.set_ylim(0, 1.02)
        ax.legend(loc="lower right")
    return _svg(fig, "recall")


def facet_svg(facet: str, table: dict, names: list) -> str:
    """Grouped bars: per value of ``facet`` (question type, level, hops), one bar per run, for
    Recall@5 (left) and EM (right)."""
    matplotlib, _ = _require_matplotlib()
    values = list(table)
    width = 0.8 / max(len(names), 1)
    with matplotlib.rc_context(_RC):
        fig, axes = _figure(max(6.0, 1.1 * len(values) * 2 + 2), 3.4, ncols=2)
        for ax, metric, label in zip(axes, ("recall@5", "em"), ("Recall@5", "EM")):
            for j, (name, color) in enumerate(zip(names, _colors(len(names)))):
                xs = [i + (j - (len(names) - 1) / 2) * width for i in range(len(values))]
                ys = [table[v][j][metric] or 0.0 for v in values]  # undefined (no question): no bar
                ax.bar(xs, ys, width=width, label=_plain(name), color=color)
            ax.set_xticks(range(len(values)))
            ax.set_xticklabels([f"{_plain(v)}\n(n={table[v][0]['n']})" for v in values], fontsize=8)
            ax.set_ylim(0, 1.0)
            ax.set_title(f"{label} by {_plain(facet)}")
        axes[0].legend(loc="upper left", fontsize=8)
    return _svg(fig, f"facet-{re.sub(r'[^a-z0-9]+', '-', facet.lower())}")


def funnel_svg(names: list, funnels: list) -> str:
    """Per run with diagnostics, the share of gold passages reached at each stage, one bar per hop."""
    matplotlib, _ = _require_matplotlib()
    shown = [(n, f) for n, f in zip(names, funnels) if f]
    with matplotlib.rc_context(_RC):
        fig, axes = _figure(max(4.5, 4.2 * len(shown)), 3.3, ncols=len(shown))
        for ax, (name, hops) in zip(axes, shown):
            stages = [s for s in FUNNEL_STAGES if any(s in h for h in hops)]
            width = 0.8 / len(hops)
            for t, (hop, color) in enumerate(zip(hops, _colors(len(hops)))):
                xs = [i + (t - (len(hops) - 1) / 2) * width for i in range(len(stages))]
                heights = [hop.get(s) for s in stages]  # null or non-finite (an in-memory run): no bar
                heights = [h if isinstance(h, (int, float)) and math.isfinite(h) else 0.0 for h in heights]
                ax.bar(xs, heights, width=width, label=f"hop {t + 1}", color=color)
            ax.set_xticks(range(len(stages)))
            ax.set_xticklabels(stages)
            ax.set_ylim(0, 1.0)
            ax.set_ylabel("share of gold passages reached")
            ax.set_title(_plain(name))
            ax.legend(loc="upper right", fontsize=8)
    return _svg(fig, "funnel")


__all__ = ["FUNNEL_STAGES", "facet_svg", "funnel_svg", "recall_curve_svg"]
