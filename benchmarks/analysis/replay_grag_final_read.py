"""Replay the final reads of a GRAG-MH LLM-mode run under other final-read settings: each
recorded step's retrieval is rerun at the run's settings (checked against the record's
passages), then for each variant every path reads the question's final answer again as the
engine would at that variant (its passages from ``path_read_passages``, its prompt and choice
mapping from the engine's final read step) and the paths vote as the engine does
(``self_consistency_vote``). Costs one batched read per variant instead of a whole run.

    python -m benchmarks analysis replay_grag_final_read --run OUT/hotpotqa_grag.json --index IDX/hotpotqa \\
        --llm /work/models/qwen2.5-coder-1.5b --set engine.fact_weight=0 \\
        --variants "engine.final_passages=0 engine.final_with_steps=always engine.resolve_choice=false" \\
                   "engine.final_with_question=true"

The reader reads with the run's ``model.prefix_cache`` (its ``args``; off for runs made before
bench_qa recorded it). ``--set`` takes the run's settings where they differ from today's defaults
(a run made before ``fact_weight`` existed needs ``engine.fact_weight=0``); "steps whose passages
differ" must be 0 for a faithful replay. A variant is a space-separated list of
``engine.FIELD=VALUE`` on top of ``--set`` ("" is today's defaults); list the run's own final-read
settings first to check that the replay reproduces its answers. A prompt that an earlier variant read is not read again.

A variant's ``engine.restate_ends_path`` ends each recorded path where the engine would have
(:func:`kept_steps`), so that stop rule replays exactly too; a run made before it needs
``--set engine.restate_ends_path=false engine.final_skip_restated=false``. ``--only-changed``
rereads only the questions where a variant ends a path earlier or shows its final read other
steps (``final_skip_restated``):

    python -m benchmarks analysis replay_grag_final_read --run OUT/hotpotqa_grag.json --index IDX/hotpotqa \\
        --llm /work/models/qwen2.5-coder-1.5b --set engine.restate_ends_path=false engine.final_skip_restated=false \\
        --only-changed --variants "" "engine.restate_ends_path=true" "engine.final_skip_restated=true" \\
        "engine.restate_ends_path=true engine.final_skip_restated=true"
"""
from __future__ import annotations

import argparse
import json
import time



class _CachedReader:
    """The reader with a memo over final reads, so variants that give a path the same prompt
    (same question, passages and shown sub-answers) read it once."""

    def __init__(self, reader):
        self.reader, self.memo = reader, {}

    def read(self, questions, facts, final=False, steps=None):
        steps = steps if steps is not None else [None] * len(questions)
        keys = [(q, tuple(f), final, tuple(st) if st else None) for q, f, st in zip(questions, facts, steps)]
        todo = [i for i, k in enumerate(keys) if k not in self.memo]
        got = self.reader.read([questions[i] for i in todo], [facts[i] for i in todo], final=final,
                               steps=[steps[i] for i in todo]) if todo else []
        self.memo.update((keys[i], a) for i, a in zip(todo, got))
        return [self.memo[k] for k in keys]


def kept_steps(question: str, chain: list, cfg) -> int:
    """How many of a recorded path's steps the engine keeps at ``cfg``: it ends the path
    where :func:`~hpengine.pipeline.retrievers.path_stops` does. A replay can end paths earlier than
    the run did, never later (that would need the planner)."""
    from hpengine.pipeline.retrievers import path_stops

    for n, h in enumerate(chain):
        if path_stops(question, [x["subquery"] for x in chain[:n]], h["subquery"], cfg):
            return n
    return len(chain)


def path_view(question: str, chain: list, cfg) -> tuple:
    """What a recorded path's final read gets at ``cfg``: its kept steps' sub-questions and those
    it shows."""
    from hpengine.pipeline import HopRecord
    from hpengine.pipeline.retrievers import final_read_steps

    hops = [HopRecord(h["subquery"], h["answer"], [], []) for h in chain[:kept_steps(question, chain, cfg)]]
    return [h.subquery for h in hops], [h.subquery for h in final_read_steps(question, hops, cfg)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="bench_qa.py JSON of a grag LLM-mode run")
    ap.add_argument("--index", required=True, help="the index it ran on (with GRAG parts)")
    ap.add_argument("--llm", required=True)
    ap.add_argument("--variants", nargs="+", default=[""], help="final-read settings to replay, one string each")
    ap.add_argument("--set", nargs="*", default=[], help="engine.FIELD=VALUE settings of the run")
    ap.add_argument("--max-questions", type=int, default=0, help="the run's first N records only (0: all)")
    ap.add_argument("--only-changed", action="store_true",
                    help="replay only the questions where some variant ends a path earlier or shows its final read "
                         "other steps than the run's settings; the others count with the run's answers")
    ap.add_argument("--out", default="", help="JSON file for every variant's per-path answers and votes")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-batch-tokens", type=int, default=16384)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks._harness import write_json
    from benchmarks._presets import apply_overrides
    from revote_grag import recorded_paths  # this folder's
    from hpengine.config import EncoderConfig, GragConfig
    from hpengine.eval import exact_match, f1_score, normalize_answer
    from hpengine.graph import Index
    from hpengine.jobs import peek_index_meta
    from hpengine.models import Reader, encoder_for_index
    from hpengine.pipeline import Engine, HopRecord
    from hpengine.pipeline.retrievers import final_read_steps, path_read_passages, self_consistency_vote

    run = json.load(open(args.run))
    records = next(iter(run["results"].values()))["records"]
    prefix_cache = bool(run.get("args", {}).get("llm_prefix_cache"))  # the run's setting (older runs: off)
    records = records[: args.max_questions] if args.max_questions else records
    run_records, kept = records, []
    if args.only_changed:
        base = apply_overrides(GragConfig(), args.set, "engine")
        cfgs = [apply_overrides(GragConfig(), args.set + v.split(), "engine") for v in args.variants]
        records = [r for r in records if any(path_view(r["question"], ch, c) != path_view(r["question"], ch, base)
                                             for ch in recorded_paths(r)[0] for c in cfgs)]
        chosen = {r["id"] for r in records}
        kept = [r for r in run_records if r["id"] not in chosen]
        print(f"{len(records)} of {len(run_records)} questions have a path that a variant changes", flush=True)
    enc = encoder_for_index(peek_index_meta(args.index), EncoderConfig(name_or_path=""))
    index = Index.load(args.index, expected_encoder=enc.name)
    cfg = apply_overrides(GragConfig(), args.set, "engine")
    engine = Engine(index, enc, config=cfg)
    search = engine.retriever.search
    chains = [recorded_paths(r)[0] for r in records]
    items = [(qi, pi, si, cfg.search_template.format(subquery=h["subquery"], question=r["question"]).strip())
             for qi, r in enumerate(records) for pi, ch in enumerate(chains[qi]) for si, h in enumerate(ch)]

    def read_ids(texts: list) -> tuple[list, list]:
        """The reader_passages passage ids each text's search reads and its top score, 256 texts
        per batch."""
        out, top = [], []
        for start in range(0, len(texts), 256):
            chunk = texts[start:start + 256]
            found = search.search(chunk, engine.steps.encode(chunk), cfg.passage_width)
            out += [[p for p in row if p >= 0] for row in found["ranked"][:, : cfg.reader_passages].tolist()]
            top += found["scores"][:, 0].tolist()
        return out, top

    got, got_top = read_ids([t for *_, t in items])
    step_ids = {(qi, pi, si): ids for (qi, pi, si, _), ids in zip(items, got)}
    step_top = {(qi, pi, si): sc for (qi, pi, si, _), sc in zip(items, got_top)}
    differ = sum([index.passages[p].title for p in ids] != chains[qi][pi][si]["linked"]
                 for (qi, pi, si), ids in step_ids.items())
    # the question's own passages (no-LLM retrieval at the run's settings)
    own, own_top = read_ids([r["question"] for r in records])
    print(f"{len(items)} steps, steps whose passages differ from the run's: {differ}", flush=True)

    tokenizer = AutoTokenizer.from_pretrained(args.llm)
    model = AutoModelForCausalLM.from_pretrained(args.llm, dtype=torch.bfloat16).eval()
    reader = Reader(model, tokenizer, batch_size=args.batch_size, max_batch_tokens=args.max_batch_tokens,
                    prefix_cache=prefix_cache)
    cached = _CachedReader(reader)
    n = len(run_records)
    saved = []
    for variant in args.variants:
        vcfg = apply_overrides(GragConfig(), args.set + variant.split(), "engine")
        steps = Engine(index, enc, config=vcfg, reader=cached).steps
        questions, reads, hops, owner, scores = [], [], [], [], {}
        for qi, r in enumerate(records):
            for pi, chain in enumerate(chains[qi]):
                chain = chain[:kept_steps(r["question"], chain, vcfg)]
                shown = final_read_steps(r["question"], [HopRecord(h["subquery"], h["answer"], [], []) for h in chain],
                                         vcfg)
                ids = path_read_passages(own[qi], [step_ids[qi, pi, si] for si in range(len(chain))], vcfg)
                questions.append(r["question"])
                reads.append(steps.passage_texts(torch.tensor([ids or [-1]]))[0])
                hops.append(shown)
                owner.append((qi, pi))
                tops = [step_top[qi, pi, si] for si in range(len(chain))]
                scores.setdefault(qi, []).append(sum(tops) / len(tops) if tops else own_top[qi])
        start, tokens = time.perf_counter(), reader.stats["tokens_in"]
        finals = steps.final_answers(questions, reads, hops)
        seconds = time.perf_counter() - start
        per: dict = {}
        for (qi, pi), a in zip(owner, finals):
            per.setdefault(qi, []).append(a)
        em = sum(r["em"] for r in kept)
        f1 = sum(r["f1"] for r in kept)
        same = 0.0
        preds = []
        for qi, r in enumerate(records):
            pred = r["prediction"]
            if qi in per:
                pred = per[qi][self_consistency_vote(per[qi], scores[qi])]
            preds.append({"id": r["id"], "paths": per.get(qi, []), "prediction": pred})
            same += normalize_answer(pred) == normalize_answer(r["prediction"])
            em += exact_match(pred, r["gold"])
            f1 += f1_score(pred, r["gold"])
        saved.append({"variant": variant, "em": round(em / n, 4), "f1": round(f1 / n, 4), "records": preds})
        if args.out:
            write_json({"run": args.run, "set": args.set, "variants": saved}, args.out)
        run_em, run_f1 = (sum(r[k] for r in run_records) / n for k in ("em", "f1"))
        print(f"[{variant or 'defaults'}] EM {em / n:.3f} F1 {f1 / n:.3f}, answers as in the run "
              f"{same:.0f}/{len(records)}, {len(questions)} prompts, {reader.stats['tokens_in'] - tokens:,} tokens in, "
              f"{seconds:.0f} s (the run: EM {run_em:.3f} F1 {run_f1:.3f})", flush=True)


if __name__ == "__main__":
    main()
