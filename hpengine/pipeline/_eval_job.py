"""The ``eval`` and ``ask`` jobs: a question file in, metrics and per-question records out (SPEC §4)."""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hpengine._profiling import peak_rss_mb
from hpengine.config import EncoderConfig, EvalConfig, ExtractorConfig, GraphConfig, ModelConfig, RetrievalConfig
from hpengine.pipeline._engine import Engine, EngineConfig


@dataclass
class EvalJobConfig:
    """``hpengine eval index=DIR questions=PATH retriever=hyperprove|dense output=FILE.json``."""

    index: str = ""
    questions: str = ""  # empty: the built-in demo questions
    output: str = ""
    device: str = "cpu"
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def load_llm(cfg: ModelConfig):
    """Decomposer and reader sharing one causal LM, or ``(None, None)`` in no-LLM mode."""
    if not cfg.llm:
        return None, None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hpengine.models._decomposer import Decomposer
    from hpengine.models._reader import Reader

    if not os.path.exists(cfg.llm) and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise FileNotFoundError(f"model.llm={cfg.llm!r} is not a local folder and the hub is offline")
    tok = AutoTokenizer.from_pretrained(cfg.llm)
    model = AutoModelForCausalLM.from_pretrained(cfg.llm, dtype=getattr(torch, cfg.dtype)).to(cfg.device).eval()
    return (Decomposer(model, tok, max_new_tokens=cfg.max_new_tokens_decompose, batch_size=cfg.batch_size),
            Reader(model, tok, max_new_tokens=cfg.max_new_tokens_read, batch_size=cfg.batch_size))


def make_engine(cfg: EvalJobConfig, index=None, encoder=None) -> Engine:
    from hpengine.graph._index import Index
    from hpengine.pipeline._factory import make_encoder

    encoder = encoder or make_encoder(cfg.encoder)
    if index is None:
        index = Index.load(cfg.index, device=cfg.device, expected_encoder=encoder.name)
    decomposer, reader = load_llm(cfg.model)
    return Engine(index, encoder, cfg.retrieval, cfg.engine, decomposer=decomposer, reader=reader)


def evaluate(engine: Engine, questions: list, eval_cfg: EvalConfig, progress: bool = True) -> dict:
    """Run ``questions`` (list of :class:`hpengine.eval.Question`) in batches and score them."""
    from tqdm.auto import tqdm

    from hpengine.eval import exact_match, f1_score, recall_at_k

    if eval_cfg.max_questions:
        questions = questions[: eval_cfg.max_questions]
    start = time.perf_counter()
    preds = []
    bar = tqdm(total=len(questions), desc="questions", disable=not progress)
    for b in range(0, len(questions), eval_cfg.batch_size):
        batch = questions[b: b + eval_cfg.batch_size]
        preds.extend(engine.answer([q.question for q in batch]))
        bar.update(len(batch))
    bar.close()
    wall = time.perf_counter() - start
    idx = engine.index
    records, totals = [], {"em": 0.0, "f1": 0.0, **{f"recall@{k}": 0.0 for k in eval_cfg.recall_ks}}
    for q, p in zip(questions, preds):
        retrieved = [(idx.passages[i].title, idx.passages[i].text) for i in p.passages]
        rec = {"id": q.id, "gold": q.answers, **p.to_dict(idx), "em": exact_match(p.answer, q.answers),
               "f1": f1_score(p.answer, q.answers)}
        # rank of each distinct gold passage (None: not retrieved): `hpengine report` draws Recall@k for any k
        gold = list(dict.fromkeys((t.strip(), x.strip()) for t, x in q.gold_passages))
        rec["gold_ranks"] = [retrieved.index(g) if g in retrieved else None for g in gold]
        for k in eval_cfg.recall_ks:
            # the corpus loader strips whitespace; compare gold passages the same way
            rec[f"recall@{k}"] = recall_at_k(retrieved, [(t.strip(), x.strip()) for t, x in q.gold_passages], k)
        for key in totals:
            totals[key] += rec[key]
        records.append(rec)
    n = max(len(questions), 1)
    diag = hop_diagnostics(questions, preds, idx) if any(p.diagnostics for p in preds) else None
    tokens_in = sum(c.stats.get("tokens_in", 0) for c in (engine.decomposer, engine.reader) if c is not None)
    tokens_out = sum(c.stats.get("tokens_out", 0) for c in (engine.decomposer, engine.reader) if c is not None)
    fallback = engine.decomposer.stats["fallback"] if engine.decomposer is not None else 0
    return {
        "num_questions": len(questions),
        "retriever": engine.config.retriever,
        "llm": bool(engine.reader is not None),
        **{key: round(v / n, 4) for key, v in totals.items()},
        "seconds": {k: round(v, 3) for k, v in engine.timer.seconds.items()},
        "wall_seconds": round(wall, 3),
        "questions_per_second": round(len(questions) / wall, 3) if wall > 0 else None,
        "llm_tokens_in": tokens_in, "llm_tokens_out": tokens_out,
        "decomposition_fallbacks": fallback,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        **({"hop_diagnostics": diag} if diag else {}),
        "records": records,
    }


def hop_diagnostics(questions: list, preds: list, index) -> list:
    """Mean recall of gold passages per hop and stage: dense seeds, random-walk subgraph, selected
    facts (this hop), the passages linked to the hop (titled with its bridges / answer), and the
    chain so far (selected and linked passages of all hops up to this one). A question without a
    given hop (masked) counts with its last chain."""
    pid = {(p.title, p.text): i for i, p in enumerate(index.passages)}
    num_hops = max(len(p.diagnostics) for p in preds)
    stages = ("seeds", "subgraph", "selected", "linked")
    sums = [dict.fromkeys((*stages, "chain"), 0.0) for _ in range(num_hops)]
    counted = 0
    for q, p in zip(questions, preds):
        gold = {pid[g] for g in ((t.strip(), x.strip()) for t, x in q.gold_passages) if g in pid}
        if not gold or not p.diagnostics:
            continue
        counted += 1
        chain = set()
        for t in range(num_hops):
            d = p.diagnostics[min(t, len(p.diagnostics) - 1)]
            if t < len(p.diagnostics):
                chain |= set(d["selected"]) | set(d.get("linked", ()))
            for stage in stages:
                sums[t][stage] += len(gold & set(d.get(stage, ()))) / len(gold)
            sums[t]["chain"] += len(gold & chain) / len(gold)
    return [{k: round(v / max(counted, 1), 4) for k, v in hop.items()} for hop in sums]


def summary_table(result: dict) -> str:
    keys = ["num_questions", "retriever", "llm"] + [k for k in result if k.startswith("recall@")] + \
        ["em", "f1", "questions_per_second", "wall_seconds", "llm_tokens_in", "llm_tokens_out"]
    width = max(len(k) for k in keys)
    lines = [f"{k:<{width}}  {result[k]}" for k in keys if k in result]
    for t, hop in enumerate(result.get("hop_diagnostics", []), 1):
        lines.append(f"hop {t} gold-passage recall: " + ", ".join(f"{k} {v:.3f}" for k, v in hop.items()))
    return "\n".join(lines)


def run_eval(cfg: EvalJobConfig, progress: bool = True) -> dict:
    from hpengine.eval import load_questions
    from hpengine.graph._corpus import builtin_questions_path

    engine = make_engine(cfg)
    questions = load_questions(cfg.questions or str(builtin_questions_path()))
    result = evaluate(engine, questions, cfg.eval, progress)
    result["config"] = {"index": cfg.index, "questions": cfg.questions, "retrieval": asdict(cfg.retrieval),
                        "engine": asdict(cfg.engine), "model": asdict(cfg.model)}
    if cfg.output:
        out = Path(cfg.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=1, ensure_ascii=False))
        os.replace(tmp, out)
    return result


def format_prediction(pred) -> str:
    lines = [f"Q: {pred.question}", f"A: {pred.answer}"]
    for t, hop in enumerate(pred.chain, 1):
        lines.append(f"  hop {t}: {hop.subquery!r} -> {hop.answer!r}")
        for f in hop.facts:
            lines.append(f"     {f.score:+.3f} [{f.title}] {f.text}")
    return "\n".join(lines)


@dataclass
class DemoJobConfig:
    """``hpengine demo``: index the built-in corpus, answer the built-in questions, print everything."""

    out: str = ""  # empty: a temporary folder
    device: str = "cpu"
    extractor: ExtractorConfig = field(default_factory=ExtractorConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def run_demo(cfg: DemoJobConfig, progress: bool = False) -> tuple:
    """Build the built-in index, answer the built-in questions; returns ``(build_report, result, preds)``."""
    import tempfile

    from hpengine.config import IndexConfig
    from hpengine.eval import load_questions
    from hpengine.graph._corpus import builtin_questions_path
    from hpengine.pipeline._factory import make_encoder
    from hpengine.pipeline._index_job import run_index

    out = cfg.out or os.path.join(tempfile.mkdtemp(prefix="hpengine_demo_"), "index")
    icfg = IndexConfig(corpus="", out=out, device=cfg.device, extractor=cfg.extractor, encoder=cfg.encoder,
                       graph=cfg.graph)
    index, build_report = run_index(icfg, progress=progress)
    encoder = make_encoder(cfg.encoder)
    ecfg = EvalJobConfig(index=out, device=cfg.device, encoder=cfg.encoder, retrieval=cfg.retrieval,
                         engine=cfg.engine, model=cfg.model, eval=cfg.eval)
    engine = make_engine(ecfg, index=index, encoder=encoder)
    questions = load_questions(str(builtin_questions_path()))
    result = evaluate(engine, questions, cfg.eval, progress)
    from hpengine.eval._report import write_report  # the demo's report page, beside its index

    result["report"] = write_report([result], f"{out}.report.html", questions=questions)
    return build_report, result, engine
