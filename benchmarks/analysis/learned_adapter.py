"""Does a query adapter add to the learned ranker? (docs/methods/learned.md, "Learning into the
representation"). On one dev set, k-fold: for each fold, a linear adapter on the frozen question
embeddings (identity init) is trained on the other folds' questions through ``hpengine.nn`` (a
listwise loss over dense passages and over facts, so that HyperProve's and PPR's seeds move too);
the learned method's candidates of every question are then computed from the adapted embeddings,
a ranker is trained on the other folds' candidates and scores the held fold. The same folds without
the adapter are the baseline. No question is scored by an adapter or a ranker that saw it.

    python benchmarks/analysis/learned_adapter.py --index IDX --questions QUESTIONS --label minilm_2wiki
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness
from _harness import RESULTS, write_json  # noqa: E402


def folds_of(n: int, k: int, seed: int) -> list:
    rows = list(range(n))
    random.Random(seed).shuffle(rows)
    return [sorted(rows[i::k]) for i in range(k)]


def gold_matrix(gold_ids: list, width: int) -> torch.Tensor:
    """int64 ``[Q, width]`` ids, ``-1`` padded."""
    out = torch.full((len(gold_ids), width), -1, dtype=torch.int64)
    for r, ids in enumerate(gold_ids):
        out[r, : min(width, len(ids))] = torch.tensor(ids[:width], dtype=torch.int64)
    return out


def listwise(module, query, gold, candidates: int, temperature: float):
    """``-log sum_gold softmax(score / T)`` over the top ``candidates`` keys plus the gold keys."""
    top = module.search(query, candidates)
    extra = torch.where((gold.unsqueeze(2) == top.unsqueeze(1)).any(2), torch.full_like(gold, -1), gold)
    ids = torch.cat([top, extra], dim=1)
    is_gold = ((ids.unsqueeze(2) == gold.unsqueeze(1)) & (gold.unsqueeze(1) >= 0)).any(2) & (ids >= 0)
    logp = torch.log_softmax(module.score(query, ids) / temperature, dim=1)
    has = is_gold.any(1)
    return -torch.logsumexp(logp.masked_fill(~is_gold, float("-inf")), dim=1)[has].mean()


def train_adapter(index, emb, gold_passages, gold_facts, args):
    """A linear ``[D, D]`` adapter (identity init, pulled toward identity) trained on ``emb``."""
    from hpengine.nn import DifferentiableDense

    passages = DifferentiableDense.from_index(index, over="passages", k=5)
    facts = DifferentiableDense.from_index(index, over="facts", k=5)
    dim = emb.shape[1]
    adapter = torch.nn.Linear(dim, dim, bias=False)
    with torch.no_grad():
        adapter.weight.copy_(torch.eye(dim))
    opt = torch.optim.Adam(adapter.parameters(), lr=args.lr)
    for _ in range(args.steps):
        q = torch.nn.functional.normalize(adapter(emb), dim=1)
        loss = listwise(passages, q, gold_passages, 50, args.temperature)
        if args.fact_weight:
            loss = loss + args.fact_weight * listwise(facts, q, gold_facts, 50, args.temperature)
        loss = loss + args.to_identity * (adapter.weight - torch.eye(dim)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return adapter.eval()


def candidates_of(engine, questions, emb):
    """The learned method's examples of ``questions`` with the given question embeddings."""
    from hpengine.pipeline import RankerExamples, gold_passage_ids

    retriever = engine.retriever
    gold_ids = gold_passage_ids(engine.index, questions)
    parts = []
    for start in range(0, len(questions), 64):
        texts = [q.question for q in questions[start:start + 64]]
        with torch.no_grad():
            cand, feats, valid = retriever.candidate_features(texts, emb[start:start + 64])
        gold = torch.zeros_like(valid)
        for i, ids in enumerate(gold_ids[start:start + 64]):
            if ids:
                gold[i] = torch.isin(cand[i], torch.tensor(ids)) & valid[i]
        num_gold = torch.tensor([len(ids) for ids in gold_ids[start:start + 64]])
        parts.append(RankerExamples(cand, feats, valid, gold, num_gold))
    return RankerExamples.concat(parts)


def run(args) -> dict:
    from hpengine.config import EvalJobConfig, LearnedConfig
    from hpengine.eval import load_questions
    from hpengine.jobs import make_engine
    from hpengine.pipeline import fusion_order, gold_passage_ids, rank_candidates, recall_at, train_ranker

    torch.set_num_threads(args.threads)
    engine = make_engine(EvalJobConfig(index=args.index, engine=LearnedConfig()))
    index = engine.index
    questions = load_questions(args.questions)
    with torch.no_grad():
        emb = engine.steps.encode([q.question for q in questions]).float()
    gold_p = gold_passage_ids(index, questions)
    fact_passage = index.fact_passage.cpu()
    gold_f = [torch.nonzero(torch.isin(fact_passage, torch.tensor(ids or [-1]))).flatten().tolist() for ids in gold_p]
    gp, gf = gold_matrix(gold_p, 4), gold_matrix(gold_f, max(1, max(len(f) for f in gold_f)))
    folds = folds_of(len(questions), args.folds, args.seed)
    start = time.perf_counter()
    base = candidates_of(engine, questions, emb)
    out = {"label": args.label, "questions": len(questions), "folds": args.folds, "args": vars(args)}
    orders = {"ranker": torch.zeros_like(base.candidates), "adapter+ranker": None, "adapter fusion": None}
    adapted_orders, adapted_fusion = [], []
    width = base.candidates.shape[1]
    for f, held in enumerate(folds):
        train = [r for g, fold in enumerate(folds) if g != f for r in fold]
        model = train_ranker(base.subset(train), hidden=args.hidden, epochs=args.epochs, seed=args.seed)
        orders["ranker"][held] = _pad(rank_candidates(model, base.subset(held)), width)
        adapter = train_adapter(index, emb[train], gp[train], gf[train], args)
        with torch.no_grad():
            adapted = torch.nn.functional.normalize(adapter(emb), dim=1)
        ex = candidates_of(engine, questions, adapted)
        model = train_ranker(ex.subset(train), hidden=args.hidden, epochs=args.epochs, seed=args.seed)
        held_ex = ex.subset(held)
        adapted_orders.append((held_ex, rank_candidates(model, held_ex)))
        adapted_fusion.append((held_ex, fusion_order(held_ex)))
        print(f"fold {f + 1}/{args.folds} done ({time.perf_counter() - start:.0f} s)", file=sys.stderr)

    def pooled(pairs, k):
        hits = sum(recall_at(o, e, k) * int((e.num_gold > 0).sum()) for e, o in pairs)
        return round(hits / sum(int((e.num_gold > 0).sum()) for e, _ in pairs), 4)

    out["fusion"] = {f"recall@{k}": round(recall_at(fusion_order(base), base, k), 4) for k in (2, 5)}
    out["ranker"] = {f"recall@{k}": round(recall_at(orders["ranker"], base, k), 4) for k in (2, 5)}
    out["adapter_fusion"] = {f"recall@{k}": pooled(adapted_fusion, k) for k in (2, 5)}
    out["adapter_ranker"] = {f"recall@{k}": pooled(adapted_orders, k) for k in (2, 5)}
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def _pad(order, width: int):
    return order if order.shape[1] == width else torch.cat(
        [order, torch.arange(order.shape[1], width).expand(order.shape[0], -1)], dim=1)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", required=True)
    p.add_argument("--questions", required=True)
    p.add_argument("--label", default="run")
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--epochs", type=int, default=300)
    p.add_argument("--steps", type=int, default=150, help="adapter training steps")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--temperature", type=float, default=0.05)
    p.add_argument("--fact-weight", type=float, default=0.5)
    p.add_argument("--to-identity", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    out = run(args)
    path = write_json(out, RESULTS / "learned" / f"adapter_{args.label}.json")
    for key in ("fusion", "ranker", "adapter_fusion", "adapter_ranker"):
        print(f"{key:16s} R@2 {out[key]['recall@2']:.3f}  R@5 {out[key]['recall@5']:.3f}")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
