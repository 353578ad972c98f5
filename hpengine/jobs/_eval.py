"""The ``eval`` and ``ask`` jobs: a question file in, metrics and per-question records out
(docs/methods/index.md#evaluation-protocol)."""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from hpengine._profiling import peak_rss_mb
from hpengine.config import DemoJobConfig, EvalConfig, EvalJobConfig
from hpengine.errors import UserError
from hpengine.models import check_llm, load_llm
from hpengine.pipeline import Engine


def make_engine(cfg: EvalJobConfig, index=None, encoder=None) -> Engine:
    """The engine of an eval/ask job, loading only what the method needs: the index, the query
    encoder (every method encodes the questions) and, only with ``cfg.model.llm``, the LLM.

    The encoder is the index's (its recorded config) unless ``cfg.encoder`` names one, which must
    then be the index's: a mismatch, like a ``model.llm`` that cannot load, is a one-line
    :class:`~hpengine.errors.UserError` before any model or tensor loads."""
    from hpengine.graph import Index
    from hpengine.jobs._paths import peek_index_meta
    from hpengine.models import encoder_for_index

    check_llm(cfg.model)  # before the encoder and index load, the slow part of a start-up
    if index is None and cfg.index:
        _check_grag_parts(cfg)
    if encoder is None:
        meta = index.meta if index is not None else peek_index_meta(cfg.index)
        if meta is None:  # not an index: loading says why
            index = Index.load(cfg.index, device=cfg.device)
            meta = index.meta
        encoder = encoder_for_index(meta, cfg.encoder, where=f"index={cfg.index!r}" if cfg.index else "the index")
    if index is None:
        index = Index.load(cfg.index, device=cfg.device, expected_encoder=encoder.name)
    decomposer, reader = load_llm(cfg.model) if cfg.model.llm else (None, None)  # no-LLM mode loads no LM
    return Engine(index, encoder, cfg.retrieval, cfg.engine, decomposer=decomposer, reader=reader)


def _check_ranker(cfg: EvalJobConfig) -> tuple[str, list]:
    """The learned method's ranker (``engine.ranker``, or the one shipped for the index's encoder)
    is read before any model loads: a missing or mismatched one is refused at once. Returns its
    path ("" for the other methods) and a warning where the engine's candidates are wider or
    narrower than the ones it was trained on."""
    from hpengine.config import LearnedConfig
    from hpengine.jobs._paths import peek_index_meta
    from hpengine.pipeline.retrievers import default_ranker_path, resolve_ranker

    if not isinstance(cfg.engine, LearnedConfig):
        return "", []
    encoder = str((peek_index_meta(cfg.index) or {}).get("encoder", ""))
    _, meta = resolve_ranker(cfg.engine.ranker, encoder)
    path = cfg.engine.ranker or str(default_ranker_path(encoder))
    differ = [f"{key}={meta[key]} (this run: {getattr(cfg.engine, key)})"
              for key in ("candidate_width", "mention_width", "passage_width")
              if key in meta and meta[key] != getattr(cfg.engine, key)]
    warnings = [f"ranker {path!r} was trained on candidates of {', '.join(differ)}; its ordering may not carry over "
                f"to other candidates"] if differ else []
    return path, warnings


def _check_grag_parts(cfg: EvalJobConfig) -> None:
    """A method that reads GRAG-MH's parts (grag, or a fusion member) on an index without them is
    refused before any model loads, naming the edit that dropped them when one did."""
    from hpengine.graph import IndexStore, has_grag_files

    engine = cfg.engine
    members = [m for m in getattr(engine, "members", ()) if engine.weight(m) > 0] if hasattr(engine, "weight") else []
    if "grag" not in {engine.method, *members}:
        return
    try:
        gen = IndexStore(cfg.index).generation()
    except UserError:
        return  # not an index: loading it says why
    if has_grag_files(gen.folder):
        return
    stale = gen.manifest.get("grag_stale")
    if stale:
        raise UserError(f"retriever=grag: {stale} (index={cfg.index!r})")
    raise UserError(f"retriever=grag needs the index's GRAG-MH parts, which index={cfg.index!r} lacks; build them "
                    f"with `hpengine grag-build {cfg.index}` (or index with grag.build=true)")


def _llm_counts(engine: Engine) -> dict:
    """LLM token counts summed over the engine's models (what reports count)."""
    from hpengine.jobs._checkpoint import LLM_KEYS

    models = engine.llm_components()
    return {k: sum(c.stats.get(k, 0) for c in models) for k in LLM_KEYS}


def answer_batch(engine, positions: list, batch: list, ckpt=None) -> list:
    """``engine.answer`` on one batch (``batch``: the questions at ``positions``); with ``ckpt``
    (an :class:`~hpengine.jobs.EvalCheckpoint`), the finished batch is appended to
    it with its wall time, stage seconds and LLM token counts before this returns."""
    before = (time.perf_counter(), dict(engine.timer.seconds), _llm_counts(engine))
    answered = engine.answer([q.question if hasattr(q, "question") else q for q in batch])
    if ckpt is not None:
        after = _llm_counts(engine)
        ckpt.add(list(positions), batch, answered, time.perf_counter() - before[0],
                 {k: v - before[1].get(k, 0.0) for k, v in engine.timer.seconds.items()},
                 {k: after[k] - before[2][k] for k in after})
    return answered


def evaluate(engine: Engine, questions: list, eval_cfg: EvalConfig, progress: bool = True) -> dict:
    """Run ``questions`` (list of :class:`hpengine.eval.Question`) in batches and score them.

    With ``eval_cfg.checkpoint`` set, each finished batch is appended to that file first, and the
    questions it already holds are not run again (:mod:`hpengine.jobs._checkpoint`). Wall
    time, stage seconds and token counts then cover every batch, this process's and the earlier
    ones.

    A question without gold passages has ``recall@k`` None (JSON null) and is left out of the
    mean recall; gold passages that are not in the index count as not retrieved. Both are counted
    (``questions_without_gold``, ``questions_with_gold_not_in_index``) and said in ``warnings``;
    each record has ``gold_ranks`` (per distinct gold passage, its rank or None) and
    ``gold_in_index`` (how many of them the index holds), from which ``hpengine report`` draws
    Recall@k for any k and its ceiling.

    The result starts with the format marker ``"format": "hpengine-eval"``, ``"format_version"``
    (:data:`hpengine.eval.EVAL_FORMAT_VERSION`), the one ``hpengine report`` reads.

    Raises:
        UserError: no questions (after ``eval_cfg.max_questions``).
    """
    from tqdm.auto import tqdm

    from hpengine.errors import UserError
    from hpengine.eval import EVAL_FORMAT_NAME, EVAL_FORMAT_VERSION, exact_match, f1_score, recall_at_k

    if eval_cfg.max_questions:
        questions = questions[: eval_cfg.max_questions]
    if not questions:
        raise UserError("no questions to evaluate (got 0)")
    ckpt = None
    if eval_cfg.checkpoint:
        from hpengine.jobs._checkpoint import EvalCheckpoint, run_fingerprint

        ckpt = EvalCheckpoint(eval_cfg.checkpoint, run_fingerprint(engine), questions,
                              num_passages=engine.index.num_passages)
    done = ckpt.done if ckpt is not None else {}
    todo = [i for i in range(len(questions)) if i not in done]
    start = time.perf_counter()
    preds = dict(done)
    bar = tqdm(total=len(questions), initial=len(done), desc="questions", disable=not progress)
    for b in range(0, len(todo), eval_cfg.batch_size):
        positions = todo[b: b + eval_cfg.batch_size]
        batch = [questions[i] for i in positions]
        preds.update(zip(positions, answer_batch(engine, positions, batch, ckpt)))
        if eval_cfg.page_out:
            engine.index.page_out()
        bar.update(len(batch))
    bar.close()
    preds = [preds[i] for i in range(len(questions))]
    wall = time.perf_counter() - start + (ckpt.wall if ckpt is not None else 0.0)
    idx = engine.index
    indexed = set((p.title, p.text) for p in idx.passages)
    records, totals = [], {"em": 0.0, "f1": 0.0, **{f"recall@{k}": 0.0 for k in eval_cfg.recall_ks}}
    no_gold = gold_missing = missing_passages = 0
    for q, p in zip(questions, preds):
        retrieved = [(idx.passages[i].title, idx.passages[i].text) for i in p.passages]
        rec = {"id": q.id, "gold": q.answers, **p.to_dict(idx), "em": exact_match(p.answer, q.answers),
               "f1": f1_score(p.answer, q.answers)}
        # rank of each distinct gold passage (None: not retrieved): `hpengine report` draws Recall@k for any k
        gold = list(dict.fromkeys((t.strip(), x.strip()) for t, x in q.gold_passages))
        rec["gold_ranks"] = [retrieved.index(g) if g in retrieved else None for g in gold]
        missing = sum(g not in indexed for g in gold)
        rec["gold_in_index"] = len(gold) - missing  # the report's Recall@k ceiling
        gold_missing += missing > 0
        missing_passages += missing
        if not gold:  # recall is undefined: null in the output, not in the mean (never NaN)
            no_gold += 1
        for k in eval_cfg.recall_ks:
            # the corpus loader strips whitespace; compare gold passages the same way
            rec[f"recall@{k}"] = (recall_at_k(retrieved, [(t.strip(), x.strip()) for t, x in q.gold_passages], k)
                                  if gold else None)
        for key in totals:
            totals[key] += rec[key] or 0.0
        records.append(rec)
    n = len(questions)
    with_gold = n - no_gold
    means = {key: (round(v / with_gold, 4) if with_gold else None) if key.startswith("recall@") else round(v / n, 4)
             for key, v in totals.items()}
    warnings = []
    if no_gold:
        warnings.append(f"{no_gold} of {n} questions have no gold passages: their recall is null and left out "
                        f"of the mean recall")
    if gold_missing:
        warnings.append(f"{gold_missing} of {n} questions have gold passages that are not in the index "
                        f"({missing_passages} passages): they count as not retrieved")
    diag = hop_diagnostics(questions, preds, idx) if any(p.diagnostics for p in preds) else None
    paths = path_stats(preds)
    llm = _llm_counts(engine)
    seconds = dict(engine.timer.seconds)
    if ckpt is not None:  # the batches of earlier runs count too
        llm = {k: v + ckpt.llm.get(k, 0) for k, v in llm.items()}
        for k, v in ckpt.seconds.items():
            seconds[k] = seconds.get(k, 0.0) + v
    fallback = engine.decomposer.stats["fallback"] if engine.decomposer is not None else 0
    return {
        "format": EVAL_FORMAT_NAME, "format_version": EVAL_FORMAT_VERSION,  # what `hpengine report` reads
        "num_questions": len(questions),
        "retriever": engine.method,
        "llm": bool(engine.reader is not None),
        **means,
        "questions_without_gold": no_gold,
        "questions_with_gold_not_in_index": gold_missing,
        "warnings": warnings,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "wall_seconds": round(wall, 3),
        "questions_per_second": round(len(questions) / wall, 3) if wall > 0 else None,
        "llm_tokens_in": llm["tokens_in"], "llm_tokens_out": llm["tokens_out"],
        "llm_prompts_repeated": llm["repeats"],  # answered by an identical prompt of the same generate call
        "resumed_questions": len(done),
        "decomposition_fallbacks": fallback,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        **({"hop_diagnostics": diag} if diag else {}),
        **({"reasoning_paths": paths} if paths else {}),
        "records": records,
    }


def path_stats(preds: list) -> dict | None:
    """Over the predictions with reasoning paths (:attr:`Prediction.paths`): paths and distinct
    paths per question (by their (sub-question, answer) steps and final answer), steps per path,
    and how many votes were unanimous (every path's normalised answer the same). None when no
    prediction has paths."""
    from hpengine.eval import normalize_answer

    with_paths = [p for p in preds if p.paths]
    if not with_paths:
        return None
    steps = distinct = unanimous = paths = 0
    for p in with_paths:
        start, seen = 0, set()
        for path in p.paths:
            n = path["steps"]
            seen.add((tuple((h.subquery, h.answer) for h in p.chain[start:start + n]), path["answer"]))
            start += n
            steps += n
        paths += len(p.paths)
        distinct += len(seen)
        unanimous += len({normalize_answer(x["answer"]) for x in p.paths}) == 1
    q = len(with_paths)
    return {"questions": q, "paths_per_question": round(paths / q, 3),
            "distinct_paths_per_question": round(distinct / q, 3), "steps_per_path": round(steps / paths, 3),
            "unanimous_votes": unanimous}


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


def _finite_or_null(obj, found: list):
    """``obj`` with non-finite floats as None (counted in ``found``): the output is strict JSON."""
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            found.append(obj)
            return None
        return obj
    if isinstance(obj, dict):
        return {k: _finite_or_null(v, found) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_null(v, found) for v in obj]
    return obj


def write_result(result: dict, path: str) -> None:
    """Write ``result`` as strict JSON (no NaN/Infinity), atomically, starting with the eval format
    marker (``evaluate()`` sets it; see :data:`hpengine.eval.EVAL_FORMAT_VERSION`). Non-finite numbers
    become null and are said in ``result["warnings"]``."""
    from hpengine.eval import EVAL_FORMAT_NAME, EVAL_FORMAT_VERSION

    found: list = []
    clean = {"format": EVAL_FORMAT_NAME, "format_version": EVAL_FORMAT_VERSION, **_finite_or_null(result, found)}
    if found:
        clean.setdefault("warnings", []).append(f"{len(found)} non-finite numbers (NaN/inf) written as null")
        result["warnings"] = clean["warnings"]
    text = json.dumps(clean, indent=1, ensure_ascii=False, allow_nan=False)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except OSError as exc:  # disk full, quota: the old file (if any) is as it was
        from hpengine.errors import UserError

        raise UserError(f"output={path!r}: cannot write the results ({exc.strerror or exc}); "
                        f"{'the old file is unchanged' if out.exists() else 'nothing was written'}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def run_eval(cfg: EvalJobConfig, progress: bool = True, *, evaluator=None) -> dict | None:
    """Evaluate ``cfg.questions`` on the index ``cfg.index``; with ``cfg.output``, write the result.

    Every input and output is checked before any model loads: questions file (required, at
    least one question), index folder, output path (a file, not a folder), ``eval.recall_ks``
    against ``engine.passage_width``.

    Raises:
        UserError: one of the checks above, or a bad question file or index.
    """
    from hpengine.errors import UserError
    from hpengine.eval import load_questions
    from hpengine.jobs._paths import check_index_dir, check_output_file, check_outputs_apart

    if not cfg.questions:
        from hpengine.graph import builtin_questions_path

        raise UserError(f"eval needs questions=PATH (a JSON list or JSONL question file, such as the built-in "
                        f"{builtin_questions_path()}) (got no questions=)")
    check_index_dir(cfg.index, "index")
    check_llm(cfg.model)
    ranker, ranker_warnings = _check_ranker(cfg)
    if cfg.output:
        check_output_file(cfg.output)
    check_outputs_apart({"output": cfg.output, "eval.checkpoint": cfg.eval.checkpoint},
                        {"questions": cfg.questions}, cfg.index)
    if cfg.eval.checkpoint:
        from hpengine.jobs._checkpoint import check_checkpoint_path

        check_checkpoint_path(cfg.eval.checkpoint)
    width = getattr(cfg.engine, "passage_width", None)
    if width is not None and max(cfg.eval.recall_ks) > width:
        raise UserError(f"eval.recall_ks must be <= engine.passage_width={width}, the passages ranked per question "
                        f"(got {list(cfg.eval.recall_ks)})")
    questions = load_questions(cfg.questions)
    if cfg.eval.max_questions:
        questions = questions[: cfg.eval.max_questions]
    if not questions:
        raise UserError(f"questions={cfg.questions!r} has no questions (got 0 records)")
    engine = make_engine(cfg)
    # evaluator: evaluate, or a rank's part of a torchrun job (distributed/_eval.py), None off rank 0
    result = (evaluator or evaluate)(engine, questions, cfg.eval, progress)
    if result is None:
        return None
    result["config"] = {"index": cfg.index, "questions": cfg.questions, "retrieval": asdict(cfg.retrieval),
                        "engine": asdict(cfg.engine), "model": asdict(cfg.model)}
    if ranker:  # the file that ranked, the shipped one included (engine.ranker is "" then)
        result["ranker"] = ranker
        result["warnings"] = [*ranker_warnings, *result.get("warnings", [])]
    if cfg.output:
        write_result(result, cfg.output)
    return result


#: the label of a no-LLM answer: the best bridge entity of the evidence, not a read answer
NO_LLM_LABEL = "best bridge entity (no LLM; answers need model=qwen1.5b or model.llm=PATH)"


def _snippet(text: str, width: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width].rsplit(" ", 1)[0] + " ..."


def format_prediction(pred, index=None, *, llm: bool = False, num_passages: int = 5,
                      num_facts: int | None = None, note: str = "") -> str:
    """One question's block as ``ask`` and ``demo`` print it.

    With an LLM (``llm``): the question, ``A:`` the answer, the ranked passages, the chain. Without
    one the engine is a retrieval engine, and the block says so: the ranked evidence passages first,
    then the chain, then the best bridge entity labelled :data:`NO_LLM_LABEL` (it is not an answer).

    Args:
        pred: a :class:`~hpengine.pipeline.Prediction`, or its record as :func:`evaluate` writes
            it (``Prediction.to_dict``: passages by title).
        index: the index the passages come from (their titles and a snippet of their text); None:
            no passages are shown.
        llm: whether an LLM read the answer. Default False.
        num_passages: passages shown, best first. Default 5.
        num_facts: facts shown per hop (None: all). Default None.
        note: a line after the answer (the demo's gold answer and scores). Default none.
    """
    if isinstance(pred, dict):  # a record: passages by title, chain as dicts
        question, answer = pred["question"], pred["prediction"]
        texts = {} if index is None else {p.title: p.text for p in reversed(index.passages)}
        passages = [(t, texts.get(t, "")) for t in pred.get("retrieved", ())] if index is not None else []
        chain = [(h["subquery"], h["answer"], [(f["score"], f["title"], f["text"]) for f in h["facts"]])
                 for h in pred.get("chain", ())]
    else:
        question, answer = pred.question, pred.answer
        passages = ([(index.passages[i].title, index.passages[i].text) for i in pred.passages if i >= 0]
                    if index is not None else [])
        chain = [(h.subquery, h.answer, [(f.score, f.title, f.text) for f in h.facts]) for h in pred.chain]
    answer_lines = [f"A: {answer}" if llm else f"{NO_LLM_LABEL}: {answer or '(none found)'}"] + \
        ([note] if note else [])
    lines = [f"Q: {question}"] + (answer_lines if llm else [])
    if passages:
        shown = passages[:num_passages]
        lines.append(f"  passages (top {len(shown)} of {len(passages)} ranked):")
        lines += [f"    {rank}. [{title}] {_snippet(text)}" for rank, (title, text) in enumerate(shown, 1)]
    for t, (subquery, hop_answer, facts) in enumerate(chain, 1):
        lines.append(f"  hop {t}: {subquery!r} -> {hop_answer!r}")
        lines += [f"     {score:+.3f} [{title}] {text}" for score, title, text in facts[:num_facts]]
    return "\n".join(lines + ([] if llm else answer_lines))


def run_demo(cfg: DemoJobConfig, progress: bool = False, *, overwrite: bool = False) -> tuple:
    """Build the built-in index, answer the built-in questions; returns ``(build_report, result, engine)``.

    ``cfg.out`` (default: a new temporary folder, removed again if the demo stops) must not hold an
    index unless ``overwrite``; ``result["index"]`` is the folder the index was written to."""
    import shutil
    import tempfile

    from hpengine.jobs._paths import check_output_dir

    if cfg.out:
        check_output_dir(cfg.out, overwrite=overwrite)
        return _demo_into(cfg, cfg.out, progress, overwrite)
    made = tempfile.mkdtemp(prefix="hpengine_demo_")
    try:
        return _demo_into(cfg, os.path.join(made, "index"), progress, overwrite)
    except BaseException:  # an error or Ctrl-C: the demo's own folder goes with it
        shutil.rmtree(made, ignore_errors=True)
        raise


def _demo_into(cfg: DemoJobConfig, out: str, progress: bool, overwrite: bool) -> tuple:
    """:func:`run_demo`'s work, its index written to ``out``."""
    from hpengine.config import IndexConfig
    from hpengine.eval import load_questions
    from hpengine.graph import builtin_corpus_path, builtin_questions_path
    from hpengine.jobs._index import run_index
    from hpengine.models import make_encoder

    icfg = IndexConfig(corpus=str(builtin_corpus_path()), out=out, device=cfg.device, extractor=cfg.extractor,
                       encoder=cfg.encoder, graph=cfg.graph)
    index, build_report = run_index(icfg, overwrite=overwrite, progress=progress)
    encoder = make_encoder(cfg.encoder)
    ecfg = EvalJobConfig(index=out, device=cfg.device, encoder=cfg.encoder, retrieval=cfg.retrieval,
                         engine=cfg.engine, model=cfg.model, eval=cfg.eval)
    engine = make_engine(ecfg, index=index, encoder=encoder)
    questions = load_questions(str(builtin_questions_path()))
    result = evaluate(engine, questions, cfg.eval, progress)
    from hpengine.eval import write_report  # the demo's report page, beside its index

    result["report"] = write_report([result], f"{out}.report.html", questions=questions)
    result["index"] = out  # where the demo's index is (a new temporary folder unless out=)
    return build_report, result, engine
