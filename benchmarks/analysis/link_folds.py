"""Does the link setting chosen on some questions hold on others? A two-fold check of
``engine.link_anchors`` / ``engine.link_moves`` on the six dev cells (three datasets x two
encoders), from the saved ``fusion_sweep.py --link-grid`` results (their ``halves``: recalls of the
even- and odd-numbered questions).

    python benchmarks/analysis/link_folds.py          # reads benchmarks/results/fusion_links_*_{e5,minilm}.json

For each half: the setting with the best worst cell of (R@5 - the best member's R@5 on that half;
the members as the sweep ran them, PPR restarted), among settings whose R@2 is at or above dense's
in every cell, ties by the mean of R@2 and R@5; then that setting's R@5 on the *other* half beside
the ranking without links (row 0).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness
from _harness import result_path  # noqa: E402

CELLS = [(d, e) for e in ("e5", "minilm") for d in ("musique", "2wikimultihopqa", "hotpotqa")]


def choose(runs: dict, half: int) -> tuple:
    """(anchors, moves) chosen on ``half`` by the worst cell, and its score."""
    best = None
    for i, row in enumerate(runs[CELLS[0]]["grid"]):
        worst, mean, ok = float("inf"), 0.0, True
        for cell in CELLS:
            r = runs[cell]["grid"][i]["halves"][half]
            members = runs[cell]["members_halves"]
            top = max(m[half]["recall@5"] for m in members.values())
            worst = min(worst, r["recall@5"] - top)
            mean += (r["recall@2"] + r["recall@5"]) / (2 * len(CELLS))
            ok &= r["recall@2"] >= members["dense"][half]["recall@2"]
        key = (ok, worst, mean)
        if best is None or key > best[0]:
            best = (key, i, (row["link_anchors"], row["link_moves"]))
    return best


def main() -> int:
    runs = {cell: json.loads(result_path(f"fusion_links_{cell[0]}_{cell[1]}").read_text()) for cell in CELLS}
    for half in (0, 1):
        (ok, worst, mean), i, setting = choose(runs, half)
        other = 1 - half
        print(f"chosen on the {'even' if half == 0 else 'odd'} questions: links {setting} "
              f"(worst cell {worst:+.4f}, R@2 >= dense everywhere: {ok})")
        for cell in CELLS:
            none = runs[cell]["grid"][0]["halves"][other]["recall@5"]
            got = runs[cell]["grid"][i]["halves"][other]["recall@5"]
            print(f"  {cell[0]:16s} {cell[1]:6s} other half R@5: no links {none:.4f} -> {got:.4f} ({got - none:+.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
