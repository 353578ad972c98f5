"""Can a fusion rule learned from the members' ranks generalise across datasets? Leave one dataset out.

    python -m benchmarks analysis fusion_rank_table \
        --set musique IDX/musique_e5 ../shared/data/musique/dev.json \
        --set 2wikimultihopqa IDX/2wikimultihopqa_e5 ../shared/data/2wikimultihopqa/dev.json \
        --set hotpotqa IDX/hotpotqa_e5 ../shared/data/hotpotqa/dev.json --threads 2

The members (HyperProve, PPR, dense at their defaults, 10 passages each, no LLM) run once per set
(``fusion_sweep.member_outputs``: the fusion's own shared steps). Every passage in some member's
list gets features: for each member, which rank bucket it is in (1, 2, 3, 4-5, 6-10, or absent),
and in how many members' top 5 it is (0-3). A linear score over them (19 weights: a table of
per-member, per-rank weights, the family RRF with per-method weights belongs to, plus agreement)
is fitted by a listwise loss (each gold passage against its question's other candidates, L2
1e-2, Adam, 300 steps) on two datasets and scored on the third; ties by first position in
rank-major order, as the fusion's rules. Also printed: each member alone and the oracle bound (the
best 5 of the members' top 5s).

Second experiment, a per-question choice between HyperProve's and PPR's whole lists from the
members' own scores: PPR's top-10 passage scores (captured from the PPR member's
``passage_scores``; their shares of the top 10's sum, the log of the first), HyperProve's best fact
score per hop (from its chain records), and how much the two lists overlap. A logistic selector
over them (standardised, each question weighted by the R@5 it decides, L2 1e-2, L-BFGS) is fitted
on two datasets and scored on the third, beside the oracle choice.
"""
from __future__ import annotations

import argparse
import sys

import torch


from benchmarks.analysis.fusion_sweep import MEMBERS, member_outputs  # noqa: E402

BUCKETS = (0, 1, 2, 3, 5, 10)  # 0-based rank r is in bucket b when BUCKETS[b] <= r < BUCKETS[b + 1]


def member_rankings(index_path: str, questions_path: str, batch_size: int = 256) -> tuple[dict, list]:
    """``({member: [Q, 10] passage ids, -1 padded}, gold passage ids per question)``."""
    from hpengine.config import EncoderConfig, FusionConfig, RetrievalConfig
    from hpengine.eval import load_questions
    from hpengine.graph import Index
    from hpengine.models import encoder_for_index
    from hpengine.pipeline import Engine

    index = Index.load(index_path)
    encoder = encoder_for_index(index.meta, EncoderConfig(name_or_path=""))
    questions = load_questions(questions_path)
    engine = Engine(index, encoder, RetrievalConfig(), FusionConfig(members=list(MEMBERS)))
    ppr_scores = _capture_ppr_scores(engine.retriever.members["ppr"][0])
    batches = member_outputs(engine, questions, batch_size)
    ranked = {m: torch.cat([torch.nn.functional.pad(o[m].ranked, (0, 10 - o[m].ranked.shape[1]), value=-1)
                            for o, _ in batches]) for m in MEMBERS}
    ids = {(p.title.strip(), p.text.strip()): i for i, p in enumerate(index.passages)}
    gold = [[ids.get((t.strip(), x.strip()), -2) for t, x in q.gold_passages] for q in questions]
    hops = [[max([f.score for f in hop.facts] or [0.0]) for hop in chain][:2] for o, _ in batches
            for chain in o["hyperprove"].chains]
    scores = {"ppr": ppr_scores(len(questions)), "hyperprove": torch.tensor([h + [0.0] * (2 - len(h)) for h in hops])}
    return ranked, gold, scores


def _capture_ppr_scores(ppr):
    """Wrap the PPR member's ``seeds`` and ``passage_scores`` to keep each walked question's top-10
    passage scores; returns ``f(Q) -> [Q, 10]`` (zeros for questions with no seed)."""
    seeded, top = [], []
    seeds, passage_scores = ppr.seeds, ppr.passage_scores

    def seeds_kept(*a, **kw):
        ids, mass = seeds(*a, **kw)
        seeded.append((mass > 0).any(dim=1))
        return ids, mass

    def scores_kept(fact_mass, passage_mass):
        score = passage_scores(fact_mass, passage_mass)
        top.append(torch.topk(score, min(10, score.shape[1]), dim=1).values)
        return score

    ppr.seeds, ppr.passage_scores = seeds_kept, scores_kept

    def collect(num_questions: int) -> torch.Tensor:
        out = torch.zeros(num_questions, 10)
        if top:
            values = torch.cat(top)
            out[torch.cat(seeded), :values.shape[1]] = values
        return out

    return collect


def _bucket(rank: int) -> int:
    return next(b for b in range(len(BUCKETS) - 1) if BUCKETS[b] <= rank < BUCKETS[b + 1])


def candidates(ranked: dict, gold: list) -> list:
    """Per question with gold: ``(features [n, F], is_gold [n], gold count, first position [n])``."""
    nb, out = len(BUCKETS) - 1, []
    for i, g in enumerate(gold):
        if not g:
            continue
        ranks: dict = {}
        for m, name in enumerate(MEMBERS):
            for r, p in enumerate(ranked[name][i].tolist()):
                if p >= 0:
                    ranks.setdefault(p, {})[m] = r
        ids = list(ranks)
        x = torch.zeros(len(ids), len(MEMBERS) * nb + len(MEMBERS) + 1)
        for j, p in enumerate(ids):
            for m, r in ranks[p].items():
                x[j, m * nb + _bucket(r)] = 1
            x[j, len(MEMBERS) * nb + sum(r < 5 for r in ranks[p].values())] = 1
        first = torch.tensor([min(r * len(MEMBERS) + m for m, r in ranks[p].items()) for p in ids], dtype=torch.float)
        out.append((x, torch.tensor([p in set(g) for p in ids]), len(set(g)), first))
    return out


def recall(w: torch.Tensor, cands: list, k: int) -> float:
    total = 0.0
    for x, y, n_gold, first in cands:
        top = torch.topk(x @ w - 1e-4 * first, min(k, len(first))).indices
        total += float(y[top].sum()) / n_gold
    return total / len(cands)


def fit(cands: list, l2: float = 1e-2, steps: int = 300) -> torch.Tensor:
    torch.manual_seed(0)
    w = torch.zeros(cands[0][0].shape[1], requires_grad=True)
    opt = torch.optim.Adam([w], lr=0.05)
    for _ in range(steps):
        loss = sum(-torch.log_softmax(x @ w, 0)[y].mean() for x, y, _, _ in cands if y.any())
        loss = loss / len(cands) + l2 * (w ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return w.detach()


def oracle(ranked: dict, gold: list, depth: int = 5, k: int = 5) -> float:
    rows = [i for i, g in enumerate(gold) if g]
    got = [set().union(*(set(ranked[m][i, :depth].tolist()) for m in MEMBERS)) & set(gold[i]) for i in rows]
    return sum(min(len(s), k) / len(set(gold[i])) for s, i in zip(got, rows)) / len(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", nargs=3, action="append", required=True, metavar=("NAME", "INDEX", "QUESTIONS"))
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    data, picks = {}, {}
    for name, index_path, questions_path in args.set:
        ranked, gold, scores = member_rankings(index_path, questions_path)
        data[name] = (ranked, gold, candidates(ranked, gold))
        picks[name] = selector_rows(ranked, gold, scores)
    print("| set | " + " | ".join(f"{m} R@2 / R@5" for m in MEMBERS) + " | oracle R@5 | learned, held out R@2 / R@5 |")
    print("|---" * (len(MEMBERS) + 3) + "|")
    for held, (ranked, gold, cands) in data.items():
        w = fit([c for name, (_, _, cs) in data.items() if name != held for c in cs])
        alone = [f"{member_recall(ranked[m], gold, 2):.3f} / {member_recall(ranked[m], gold, 5):.3f}" for m in MEMBERS]
        print(f"| {held} | " + " | ".join(alone) + f" | {oracle(ranked, gold):.3f} | "
              f"{recall(w, cands, 2):.3f} / {recall(w, cands, 5):.3f} |")
    print("\n| held-out set | HyperProve R@5 | PPR R@5 | oracle choice R@5 | learned choice R@2 / R@5 "
          "| HyperProve picked |")
    print("|---|---:|---:|---:|---|---:|")
    for held, (x, r5, r2) in picks.items():
        w, mu, sd = fit_selector([picks[name] for name in picks if name != held])
        hp = ((x - mu) / sd) @ w[:-1] + w[-1] > 0
        print(f"| {held} | {r5[:, 0].mean():.3f} | {r5[:, 1].mean():.3f} | {r5.max(dim=1).values.mean():.3f} | "
              f"{torch.where(hp, r2[:, 0], r2[:, 1]).mean():.3f} / {torch.where(hp, r5[:, 0], r5[:, 1]).mean():.3f} | "
              f"{hp.float().mean():.2f} |")
    return 0


def selector_rows(ranked: dict, gold: list, scores: dict) -> tuple:
    """Per question with gold: features ``[n, 9]``, R@5 ``[n, 2]`` and R@2 ``[n, 2]`` of
    (HyperProve, PPR)."""
    hp, ppr = ranked["hyperprove"], ranked["ppr"]
    feats, r5, r2 = [], [], []
    for i, g in enumerate(gold):
        if not g:
            continue
        gs, top = set(g), scores["ppr"][i]
        total = top.sum().clamp_min(1e-9)
        h1, h2 = scores["hyperprove"][i].tolist()
        a5, a2 = set(hp[i, :5].tolist()), set(hp[i, :2].tolist())  # HyperProve's top 5, top 2
        b5, b2 = set(ppr[i, :5].tolist()), set(ppr[i, :2].tolist())  # PPR's
        shares = [float(top[0] / total), float(top[:2].sum() / total), float(top[:5].sum() / total)]
        feats.append([*shares, float(top[0].clamp_min(1e-9).log()), h1, h2,
                      len(a5 & b5) / 5, len(a2 & b5) / 2, len(b2 & a5) / 2])
        r5.append([len(a5 & gs) / len(gs), len(b5 & gs) / len(gs)])
        r2.append([len(a2 & gs) / len(gs), len(b2 & gs) / len(gs)])
    return torch.tensor(feats), torch.tensor(r5), torch.tensor(r2)


def fit_selector(parts: list) -> tuple:
    """Logistic "HyperProve's list is better" over standardised features, each question weighted
    by the R@5 its choice decides (questions where both lists tie weigh 0)."""
    x = torch.cat([p[0] for p in parts])
    gain = torch.cat([p[1][:, 0] - p[1][:, 1] for p in parts])
    mu, sd = x.mean(0), x.std(0).clamp_min(1e-6)
    z, keep = (x - mu) / sd, gain != 0
    w = torch.zeros(x.shape[1] + 1, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=200)

    def closure():
        opt.zero_grad()
        logit = z[keep] @ w[:-1] + w[-1]
        bce = torch.nn.functional.binary_cross_entropy_with_logits(logit, (gain[keep] > 0).float(), reduction="none")
        loss = (gain[keep].abs() * bce).mean() + 1e-2 * (w[:-1] ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), mu, sd


def member_recall(ranked: torch.Tensor, gold: list, k: int) -> float:
    rows = [i for i, g in enumerate(gold) if g]
    return sum(len(set(ranked[i, :k].tolist()) & set(gold[i])) / len(set(gold[i])) for i in rows) / len(rows)


if __name__ == "__main__":
    sys.exit(main())
