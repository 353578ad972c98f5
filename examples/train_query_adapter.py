"""Train a query adapter through a retriever module (hpengine.nn), end to end on a real index.

Frozen MiniLM question embeddings, a trainable linear adapter (identity init), a listwise loss over
the dense retriever's candidate passages (plus the gold passages) with the gold passages as targets;
trained on the first half of the dev questions, Recall@2/@5 through the same retriever on the
second half, before and after.

    python examples/train_query_adapter.py --index /work/idx/2wikimultihopqa \
        --questions ../shared/data/2wikimultihopqa/dev.json [--steps 200] [--out adapter.json]
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from hpengine.config import EncoderConfig
from hpengine.eval import load_questions
from hpengine.graph import Index
from hpengine.models import Encoder
from hpengine.nn import DifferentiableDense, dense_listwise_loss


def gold_ids(questions, index, width: int) -> torch.Tensor:
    """int64 ``[Q, width]`` gold passage ids (``-1`` padded; gold passages not in the index left out)."""
    pid = {(p.title, p.text): i for i, p in enumerate(index.passages)}
    out = torch.full((len(questions), width), -1, dtype=torch.int64)
    for r, q in enumerate(questions):
        ids = list(dict.fromkeys(pid[g] for g in ((t.strip(), x.strip()) for t, x in q.gold_passages) if g in pid))
        out[r, : min(width, len(ids))] = torch.tensor(ids[:width], dtype=torch.int64)
    return out


def recall(ids: torch.Tensor, gold: torch.Tensor, k: int) -> float:
    """Mean ``|top-k ∩ gold| / |gold|`` over questions with gold."""
    hit = (ids[:, :k].unsqueeze(2) == gold.unsqueeze(1)) & (gold.unsqueeze(1) >= 0)
    n_gold = (gold >= 0).sum(1)
    has = n_gold > 0
    return float((hit.any(1).sum(1)[has] / n_gold[has]).mean())


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--candidates", type=int, default=50)
    ap.add_argument("--temperature", type=float, default=0.05)
    ap.add_argument("--to_identity", type=float, default=1.0, help="weight of ||W - I||^2")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig())
    index = Index.load(args.index, expected_encoder=encoder.name)
    questions = load_questions(args.questions)
    with torch.no_grad():
        emb = encoder.encode([q.question for q in questions]).float()  # frozen
    gold = gold_ids(questions, index, 4)
    half = len(questions) // 2
    train, test = slice(0, half), slice(half, len(questions))
    retriever = DifferentiableDense.from_index(index, over="passages", k=5)
    dim = emb.shape[1]
    adapter = torch.nn.Linear(dim, dim, bias=False)
    with torch.no_grad():
        adapter.weight.copy_(torch.eye(dim))
    opt = torch.optim.Adam(adapter.parameters(), lr=args.lr)

    def evaluate(part) -> dict:
        with torch.no_grad():
            ids = retriever(adapter(emb[part])).ids
        return {"recall@2": round(recall(ids, gold[part], 2), 4), "recall@5": round(recall(ids, gold[part], 5), 4)}

    before = {"train": evaluate(train), "test": evaluate(test)}
    setup = time.perf_counter() - start
    curve = []
    for step in range(args.steps):
        loss = dense_listwise_loss(retriever, adapter(emb[train]), gold[train], args.candidates, args.temperature)
        total = loss + args.to_identity * (adapter.weight - torch.eye(dim)).pow(2).sum()
        opt.zero_grad()
        total.backward()
        opt.step()
        curve.append(round(loss.item(), 4))
        if step % 20 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  listwise loss {loss.item():.4f}")
    after = {"train": evaluate(train), "test": evaluate(test)}
    result = {"questions": {"train": half, "test": len(questions) - half}, "passages": index.num_passages,
              "before": before, "after": after, "loss_curve": curve, "setup_seconds": round(setup, 1),
              "train_seconds": round(time.perf_counter() - start - setup, 1), "args": vars(args)}
    print(json.dumps({k: v for k, v in result.items() if k != "loss_curve"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
