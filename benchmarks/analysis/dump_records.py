"""Every method's records on one index (ranked passages, answers, chains, notes, paths), no-LLM and
with a tiny random LLM: the before/after check of a behaviour-preserving change.

    PYTHONPATH=OLD_CHECKOUT python benchmarks/analysis/dump_records.py --index IDX --questions Q.json --out old.json
    PYTHONPATH=.            python benchmarks/analysis/dump_records.py --index IDX --questions Q.json --out new.json
    python benchmarks/analysis/dump_records.py --compare old.json new.json

The same records on two devices (``--device cuda``), compared with a tolerance on the floats
(scores sum in another order there) and exactly on everything else:

    python benchmarks/analysis/dump_records.py --index IDX --questions Q.json --device cpu --out cpu.json
    python benchmarks/analysis/dump_records.py --index IDX --questions Q.json --device cuda --out cuda.json
    python benchmarks/analysis/dump_records.py --compare cpu.json cuda.json --atol 1e-4

The tiny LLM is a 2-layer Qwen2 with random weights over a tokenizer trained on the index's
passages (``hpengine.testing``): its outputs are nonsense, but every LLM-mode code path runs and
is deterministic, so the records must match exactly.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time


def dump(args) -> None:
    import torch

    from hpengine.config import EncoderConfig, LearnedConfig
    from hpengine.eval import load_questions
    from hpengine.graph import Index
    from hpengine.models import Decomposer, Reader
    from hpengine.models import encoder_for_index
    from hpengine.pipeline import Engine
    from hpengine.testing._tiny_lm import build_tiny_pair

    torch.set_num_threads(args.threads)
    index = Index.load(args.index, device=args.device)
    encoder = encoder_for_index(index.meta, EncoderConfig(name_or_path="", dtype=args.encoder_dtype,
                                                             device=args.device))
    questions = load_questions(args.questions)
    texts = [q.question for q in (questions[: args.max] if args.max else questions)]
    _record_or_replay_mentions(args, texts)
    model, tok = build_tiny_pair([p.text for p in index.passages[:300]] + texts[:200], vocab_size=320,
                                 initializer_range=0.5)
    model = model.to(args.device)
    out = {}
    for method in args.methods:
        for mode in ("nollm", "tiny"):
            start = time.time()
            llm = {} if mode == "nollm" else {"decomposer": Decomposer(model, tok, max_new_tokens=12),
                                               "reader": Reader(model, tok, max_new_tokens=8)}
            config = LearnedConfig(ranker=args.ranker) if method == "learned" else None
            engine = Engine(index, encoder, config=config, retriever=None if config else method, **llm)
            batch = texts if mode == "nollm" else texts[: args.llm_max]
            preds = [p for i in range(0, len(batch), 64) for p in engine.answer(batch[i:i + 64])]
            out[f"{method}/{mode}"] = [dataclasses.asdict(p) for p in preds]
            print(f"{method} {mode}: {len(preds)} questions, {time.time() - start:.1f} s", flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, default=str)


def _record_or_replay_mentions(args, texts: list) -> None:
    """``--save-mentions``: write the questions' spaCy mentions; ``--mentions``: serve those instead
    of spaCy (for a machine without it), through the name the retrievers load the tagger by."""
    if args.save_mentions:
        from hpengine.models import MentionTagger

        with open(args.save_mentions, "w", encoding="utf-8") as f:
            json.dump(dict(zip(texts, MentionTagger().mentions(texts))), f)
    if args.mentions:
        import hpengine.models
        from hpengine.testing._fakes import TableTagger

        with open(args.mentions, encoding="utf-8") as f:
            table = json.load(f)
        hpengine.models.MentionTagger = lambda *_args, **_kwargs: TableTagger(table)


def _close(a, b, atol: float) -> bool:
    """``a == b``, except that floats may differ by ``atol`` (0: exact)."""
    if isinstance(a, float) and isinstance(b, (int, float)) and atol:
        return abs(a - b) <= atol
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], atol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, atol) for x, y in zip(a, b))
    return a == b


def compare(old_path: str, new_path: str, atol: float = 0.0) -> int:
    with open(old_path, encoding="utf-8") as f:
        old = json.load(f)
    with open(new_path, encoding="utf-8") as f:
        new = json.load(f)
    differing = 0
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a is None or b is None:  # a method run on one side only is a difference, named as such
            differing += 1
            print(f"{key:<20} only in {new_path if a is None else old_path}")
            continue
        same = _close(a, b, atol)
        differing += not same
        print(f"{key:<20} {len(a):>5} questions  {'identical' if same else 'DIFFERENT'}")
        if not same and a and b:
            first = next(i for i, (x, y) in enumerate(zip(a, b)) if not _close(x, y, atol)) if len(a) == len(b) else 0
            print(f"  first difference at question {first}")
            if len(a) == len(b):
                x, y = a[first], b[first]
                fields = [k for k in x if not _close(x.get(k), y.get(k), atol)] if isinstance(x, dict) else []
                print(f"  fields that differ there: {fields}")
    return 1 if differing else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index")
    ap.add_argument("--questions")
    ap.add_argument("--out")
    ap.add_argument("--max", type=int, default=0, help="questions for the no-LLM runs (0: all)")
    ap.add_argument("--llm-max", type=int, default=16, help="questions for the tiny-LLM runs")
    ap.add_argument("--methods", nargs="+", default=["dense", "hyperprove", "ppr", "grag"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ranker", default="", help="the learned method's ranker file (default: the one shipped for "
                                                 "the index's encoder)")
    ap.add_argument("--encoder-dtype", default="float32",
                    help="the query encoder's dtype, named (the default 'auto' of newer checkouts resolves by CPU)")
    ap.add_argument("--device", default="cpu", help="where the index, the query encoder, the tiny LLM and retrieval run")
    ap.add_argument("--save-mentions", metavar="FILE", help="write the questions' spaCy mentions to FILE")
    ap.add_argument("--mentions", metavar="FILE", help="serve the mentions of FILE instead of spaCy's")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--atol", type=float, default=0.0, help="--compare: floats may differ by this much")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare, atol=args.atol)
    if not (args.index and args.questions and args.out):
        ap.error("--index, --questions and --out are needed (or --compare OLD NEW)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    dump(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
