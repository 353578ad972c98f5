"""Does the link setting chosen on some questions hold on others? A two-fold check of
``engine.link_anchors`` / ``engine.link_moves`` (and ``engine.named_anchors``) on the six dev cells
(three datasets x two encoders), from the saved ``fusion_sweep.py --link-grid`` (or
``--named-grid``) results (their ``halves``: recalls of the even- and odd-numbered questions).

    python -m benchmarks analysis link_folds          # reads benchmarks/results/fusion_links_*_{e5,minilm}.json
    python -m benchmarks analysis link_folds --prefix fusion_named   # the --named-grid results

First, every setting on all the questions: its worst cell of (R@5 - the best single method's R@5,
each method alone as ``fusion_sweep.py`` without ``--restart-share`` ran it), its worst cell of
(R@2 - the best single method's R@2), and its means; settings whose R@2 is at or above the best
method's in every cell first (both recalls at or above every member's),
then by the worst R@5 cell, then by the mean of R@2 and R@5. Then for each half: the setting with the best worst cell of (R@5 - the best member's R@5 on that half;
the members as the sweep ran them, PPR restarted), among settings whose R@2 is at or above dense's
in every cell, ties by the mean of R@2 and R@5; then that setting's R@5 on the *other* half beside
row 0 of the grid (no links; with ``--named-grid``: the links without named anchors).
"""
from __future__ import annotations

import argparse
import json
import sys

from benchmarks._harness import result_path  # noqa: E402

CELLS = [(d, e) for e in ("e5", "minilm") for d in ("musique", "2wikimultihopqa", "hotpotqa")]


def choose(runs: dict, half: int) -> tuple:
    """(anchors, moves, named) chosen on ``half`` by the worst cell, and its score."""
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
            best = (key, i, (row["link_anchors"], row["link_moves"], row.get("named_anchors", 0)))
    return best


def whole_table(runs: dict) -> list:
    """Per setting, on every question: (worst R@5 cell, worst R@2 cell, mean R@5, mean R@2,
    setting, per-cell R@2 / R@5), each cell against the best single method; best first."""
    alone = {cell: json.loads(result_path(f"fusion_sweep_{cell[0]}_{cell[1]}").read_text())["members"]
             for cell in CELLS}
    rows = []
    for i, row in enumerate(runs[CELLS[0]]["grid"]):
        got = [runs[cell]["grid"][i] for cell in CELLS]
        worst = min(g["recall@5"] - max(m["recall@5"] for m in alone[c].values()) for g, c in zip(got, CELLS))
        ok = min(g["recall@2"] - max(m["recall@2"] for m in alone[c].values()) for g, c in zip(got, CELLS))
        m5 = sum(g["recall@5"] for g in got) / len(CELLS)
        m2 = sum(g["recall@2"] for g in got) / len(CELLS)
        setting = (row["link_anchors"], row["link_moves"], row.get("named_anchors", 0))
        rows.append((round(worst, 4), round(ok, 4), round(m5, 4), round(m2, 4), setting,
                     " ".join(f"{g['recall@2']:.3f}/{g['recall@5']:.3f}" for g in got)))
    return sorted(rows, key=lambda r: (r[1] < 0, -r[0], -(r[2] + r[3])))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", default="fusion_links", help="the sweep results' label before _<dataset>_<encoder>")
    args = ap.parse_args(argv)
    runs = {cell: json.loads(result_path(f"{args.prefix}_{cell[0]}_{cell[1]}").read_text()) for cell in CELLS}
    print("every question; cells " + ", ".join(f"{d} {e}" for d, e in CELLS) + " (R@2/R@5)")
    for worst, worst2, m5, m2, setting, cells in whole_table(runs):
        print(f"  {setting}: worst R@5 - best method {100 * worst:+.2f} points, R@2 {100 * worst2:+.2f}, "
              f"mean R@5 {m5:.4f}, mean R@2 {m2:.4f} | {cells}")
    for half in (0, 1):
        (ok, worst, mean), i, setting = choose(runs, half)
        other = 1 - half
        print(f"chosen on the {'even' if half == 0 else 'odd'} questions: links {setting} "
              f"(worst cell {worst:+.4f}, R@2 >= dense everywhere: {ok})")
        for cell in CELLS:
            none = runs[cell]["grid"][0]["halves"][other]["recall@5"]
            got = runs[cell]["grid"][i]["halves"][other]["recall@5"]
            print(f"  {cell[0]:16s} {cell[1]:6s} other half R@5: row 0 {none:.4f} -> {got:.4f} ({got - none:+.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
