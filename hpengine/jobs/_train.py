"""The ``train`` job: the learned method's ranker trained on the candidates of one or several
indexes and their question files (docs/methods/learned.md), validated on a held-out share of the
questions or cross-validated over ``folds`` (a question asked twice, in one file or two, is always
on one side), written as one safetensors file."""
from __future__ import annotations

import dataclasses
import math
import os
import random
import sys

from hpengine._console import warn
from hpengine.config import EvalJobConfig, LearnedConfig, TrainJobConfig
from hpengine.errors import UserError
from hpengine.jobs._eval import make_engine
from hpengine.jobs._paths import check_index_dir, check_output_file, check_outputs_apart, peek_index_meta, same_file


#: the fewest held (or cross-validated) questions whose R@5 difference :func:`format_train_report`
#: gives an interval
MIN_HELD_FOR_INTERVAL = 20


def _check(cfg: TrainJobConfig, given: int | None = None) -> str:
    """Every check that needs no model; returns the indexes' one encoder. ``given``: how many
    question lists came in memory instead of ``cfg.questions``."""
    if not cfg.index:
        raise UserError("train needs at least one index: hpengine train IDX questions=FILE out=ranker.safetensors "
                        "(got none)")
    count = len(cfg.questions) if given is None else given
    if count != len(cfg.index):
        raise UserError(f"train needs one questions= file per index (got {len(cfg.index)} indexes and "
                        f"{count} question files)")
    if not cfg.out:
        raise UserError("train needs out=FILE, the ranker file to write (got no out=)")
    if given is None:  # a pair given twice would count its questions twice, under two identical report lines
        pairs = list(zip(cfg.index, cfg.questions))
        for i, (path, questions) in enumerate(pairs):
            if any(same_file(path, p) and same_file(questions, q) for p, q in pairs[:i]):
                raise UserError(f"index {path!r} with questions={questions!r} is given twice; give each pair once")
    check_output_file(cfg.out, "out", example="ranker.safetensors")
    check_outputs_apart({"out": cfg.out}, {f"questions[{i}]": q for i, q in enumerate(cfg.questions)})
    _check_replaceable(cfg.out)
    encoders = {}
    for path in cfg.index:
        check_index_dir(path, "index")
        encoders[path] = str((peek_index_meta(path) or {}).get("encoder", ""))
    (a, ea), *rest = encoders.items()
    for b, eb in rest:
        if eb != ea:
            raise UserError(f"a ranker is trained for one encoder: index {a!r} uses {ea!r} and index {b!r} uses {eb!r}")
    return ea


def _check_replaceable(out: str) -> None:
    """``out`` is new or a ranker file: a corpus or question file there would be lost to the ranker."""
    from hpengine.pipeline import is_ranker_file

    if os.path.lexists(out) and not is_ranker_file(out):
        raise UserError(f"out={out!r} exists and is not a ranker file; writing the ranker would destroy it "
                        f"(name a new file, or a ranker file to replace)")


def _questions(cfg: TrainJobConfig, given: list | None = None) -> list:
    from hpengine.eval import load_questions

    out = []
    for i, path in enumerate(cfg.questions if given is None else [f"questions[{i}]" for i in range(len(given))]):
        qs = load_questions(path) if given is None else list(given[i])
        qs = qs[: cfg.max_questions] if cfg.max_questions else qs
        if not any(q.gold_passages for q in qs):
            raise UserError(f"questions={path!r} has no gold passages to train on (got {len(qs)} questions)")
        out.append(qs)
    return out


def _gold_in_index(indexes: list, question_sets: list, names: list, paths: list) -> list:
    """Warnings for questions whose gold passages an index lacks; refused where no question of a
    file has one in its index (a file written for another corpus would train on nothing)."""
    from hpengine.pipeline import gold_passage_ids

    warnings = []
    for index, qs, name, path in zip(indexes, question_sets, names, paths):
        ids = gold_passage_ids(index, qs)
        if not any(ids):
            raise UserError(f"questions={name!r}: none of its {len(qs)} questions' gold passages is in index "
                            f"{path!r} (were they written for another corpus?); nothing to train on")
        short = sum(len(found) < len({(t.strip(), x.strip()) for t, x in q.gold_passages})
                    for q, found in zip(qs, ids))
        if short:
            warnings.append(f"{short} of {len(qs)} questions of {name!r} have gold passages that are not in index "
                            f"{path!r}: training neither learns from nor counts those passages")
    return warnings


def _question_ranks(question_sets: list, seed: int) -> tuple[list, int]:
    """Per file, each question's place in a seeded shuffle of the distinct question texts (case and
    outer spaces ignored), and how many there are: a question asked twice gets one place, so a
    split by place never trains on a copy of a question it scores."""
    key = [[q.question.strip().lower() for q in qs] for qs in question_sets]
    distinct = sorted({k for ks in key for k in ks})
    random.Random(seed).shuffle(distinct)
    place = {k: i for i, k in enumerate(distinct)}
    return [[place[k] for k in ks] for ks in key], len(distinct)


def _split(places: list, distinct: int, share: float) -> tuple[list, list]:
    """``(train rows, held rows)`` of one file: the questions whose place is among the first
    ``share`` of the ``distinct`` ones are held."""
    cut = round(distinct * share)
    return [r for r, p in enumerate(places) if p >= cut], [r for r, p in enumerate(places) if p < cut]


def run_train(cfg: TrainJobConfig, *, progress: bool = True, questions: list | None = None) -> dict:
    """Train and write a ranker; returns the report (questions, held-out recall of the ranker and of
    the fusion on the same candidates, loss). ``questions``: one list of
    :class:`~hpengine.eval.Question` per index, instead of ``cfg.questions``' files.

    Raises:
        UserError: no index, unpaired question files, indexes of different encoders, a question file
            without gold passages (or none in its index), a split that leaves nothing to train on,
            fewer distinct questions than ``folds``, an unwritable ``out``; all before any model
            loads.
    """
    from hpengine.graph import Index
    from hpengine.pipeline import (RankerExamples, rank_candidates, ranker_examples, ranker_meta, train_adapter,
                                   train_ranker)

    encoder = _check(cfg, None if questions is None else len(questions))
    question_sets = _questions(cfg, questions)
    names = cfg.questions if questions is None else [f"questions[{i}]" for i in range(len(questions))]
    places, distinct = _question_ranks(question_sets, cfg.seed)
    splits = [_split(p, distinct, 0.0 if cfg.folds else cfg.holdout) for p in places]
    if cfg.folds and distinct < cfg.folds:
        raise UserError(f"folds={cfg.folds} needs at least {cfg.folds} distinct questions (got {distinct})")
    if not sum(len(rows) for rows, _ in splits):
        raise UserError(f"holdout={cfg.holdout} holds out every question ({sum(map(len, question_sets))} in all); "
                        f"nothing is left to train on (lower holdout=, or give more questions)")
    indexes = [Index.load(path, device=cfg.device) for path in cfg.index]
    warnings = _gold_in_index(indexes, question_sets, names, cfg.index)  # before the encoder loads
    for text in warnings if progress else ():  # now, not after minutes of work
        warn(text)
    engines = [make_engine(EvalJobConfig(index=path, device=cfg.device,
                                         engine=LearnedConfig(candidate_width=cfg.candidate_width,
                                                              mention_width=cfg.mention_width)), index=index)
               for path, index in zip(cfg.index, indexes)]
    adapter = None
    if cfg.adapter_steps:  # on the training questions only: the held-out ones stay unseen
        adapter = train_adapter(_adapter_parts(engines, question_sets, splits, cfg), steps=cfg.adapter_steps,
                                seed=cfg.seed, log=_say("adapter step") if progress else None)
    train_parts, held_parts, held_files = [], [], []
    files = [f"{path} questions={name}" for path, name in zip(cfg.index, names)]
    for path, engine, qs, (train_rows, held_rows), file in zip(cfg.index, engines, question_sets, splits, files):
        say = (lambda done, total, p=path: print(f"\r{p}: candidates of {done}/{total} questions", end="",
                                                 file=sys.stderr)) if progress else None
        examples = ranker_examples(engine, qs, batch_size=cfg.batch_size, adapter=adapter, progress=say)
        if progress:
            print(file=sys.stderr)
        train_parts.append(examples.subset(train_rows))
        if held_rows:
            held_parts.append(examples.subset(held_rows))
            held_files.append(file)
    train = RankerExamples.of_sets(train_parts)
    fit = dict(hidden=cfg.hidden, epochs=cfg.epochs, lr=cfg.lr, weight_decay=cfg.weight_decay,
               fusion_prior=cfg.fusion_prior, balance_sets=cfg.balance_sets, seed=cfg.seed)
    say_fold = (lambda f, n: print(f"fold {f + 1}/{cfg.folds}: trained on {n} questions", file=sys.stderr)) \
        if progress else None
    folded = _cross_validated(train_parts, [p % cfg.folds for ps in places for p in ps], cfg.folds, fit, say_fold,
                              files) if cfg.folds else {}
    losses = []
    say_epoch = _say("epoch") if progress else (lambda epoch, loss: None)
    model = train_ranker(train, **fit, log=lambda epoch, loss: (losses.append(loss), say_epoch(epoch, loss)),
                         adapter=adapter)
    report = {"encoder": encoder, "train_questions": len(train), "loss": losses[-1], "first_loss": losses[0],
              "balanced_files": len(train_parts) if cfg.balance_sets and len(train_parts) > 1 else 0,
              "adapter_steps": cfg.adapter_steps if adapter is not None else 0, "warnings": warnings, **folded}
    if held_parts:
        held = RankerExamples.of_sets(held_parts)
        order = rank_candidates(model, held)
        report.update(_versus_fusion(order, held, "held"))
        if len(held_parts) > 1:
            report["held_per_file"] = _per_file(order, held, held_files)
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k in ("hidden", "epochs", "lr", "weight_decay",
                                                                         "fusion_prior", "balance_sets",
                                                                         "holdout", "seed",
                                                                         "adapter_steps", "folds")}
    settings["holdout"] = 0.0 if cfg.folds else cfg.holdout  # the folds validate; nothing was held from the ranker
    _write(model, cfg.out, ranker_meta(engines[0], train, **settings, report=report))
    return report


def _say(what: str):
    """A progress line on stderr for each ``(step, loss)``."""
    return lambda step, loss: print(f"{what} {step}: loss {loss:.4f}", file=sys.stderr)


def _adapter_parts(engines: list, question_sets: list, splits: list, cfg: TrainJobConfig) -> list:
    """What the query adapter trains on: each index's training questions (never the held ones)."""
    from hpengine.pipeline import adapter_part

    return [adapter_part(e, [qs[r] for r in rows], batch_size=cfg.batch_size)
            for e, qs, (rows, _) in zip(engines, question_sets, splits) if rows]  # a file all held out adds none


def _cross_validated(parts: list, fold_of: list, folds: int, fit: dict, progress=None, files=None) -> dict:
    """Each question (the rows of ``parts``, in order) ranked by a ranker trained on the folds
    other than its ``fold_of``, then the R@2 / R@5 of those orders beside the fusion's and the R@5
    difference with its 95% interval over the questions with a gold passage in their index: what a
    ranker trained on these questions does on questions it has not seen, with every question used.
    ``progress``: ``(fold, questions trained on) -> None`` after each fold; ``files``: the parts'
    names, for the same numbers per file (``cv_per_file``) when there are several."""
    import torch

    from hpengine.pipeline import RankerExamples, rank_candidates, train_ranker

    every = RankerExamples.of_sets(parts)
    fold_of = torch.tensor(fold_of, dtype=torch.int64)
    order = torch.zeros_like(every.candidates)
    for f in range(folds):
        held, rest = (fold_of == f).nonzero()[:, 0], (fold_of != f).nonzero()[:, 0]
        model = train_ranker(every.subset(rest), **fit)
        order[held] = rank_candidates(model, every.subset(held))
        if progress is not None:
            progress(f, len(rest))
    out = {"folds": folds, **_versus_fusion(order, every, "cv")}
    if files is not None and len(parts) > 1:
        out["cv_per_file"] = _per_file(order, every, files)
    return out


def _versus_fusion(order, examples, prefix: str) -> dict:
    """``{prefix}_questions`` and ``_scored`` (those with a gold passage in their index), the R@2 /
    R@5 of ``order`` ``[N, C]`` and of the fusion's order on the same candidates, and the R@5
    difference with its 95% interval (:func:`~hpengine.pipeline.paired_difference`)."""
    return {f"{prefix}_{key}": value for key, value in _recalls(order, examples).items()}


def _recalls(order, examples) -> dict:
    """What :func:`_versus_fusion` reports, its keys without the prefix."""
    from hpengine.pipeline import fusion_order, paired_difference, recall_at, recall_per_question

    base = fusion_order(examples)
    gain = paired_difference(recall_per_question(order, examples, 5), recall_per_question(base, examples, 5))
    return {"questions": len(examples), "scored": int((examples.num_gold > 0).sum()),
            **{f"recall@{k}": round(recall_at(order, examples, k), 4) for k in (2, 5)},
            **{f"fusion_recall@{k}": round(recall_at(base, examples, k), 4) for k in (2, 5)},
            "gain@5": [round(v, 4) for v in gain]}


def _per_file(order, examples, files: list) -> list:
    """:func:`_recalls` of each question file's questions (``examples.question_set`` ``i`` is
    ``files[i]``), with its ``file``: a small file's numbers are not hidden in the pooled ones."""
    out = []
    for i, file in enumerate(files):
        rows = (examples.question_set == i).nonzero()[:, 0]
        if len(rows):
            out.append({"file": file, **_recalls(order[rows], examples.subset(rows))})
    return out


def _write(model, out: str, meta: dict) -> None:
    """The ranker file, or one line saying why it could not be written (the trained model is
    lost with the process, so say it plainly)."""
    from hpengine.pipeline import write_ranker

    try:
        write_ranker(model, out, meta)
    except OSError as exc:
        raise UserError(f"out={out!r}: the ranker could not be written ({exc.strerror or exc}); nothing was "
                        f"replaced") from None


def format_train_report(report: dict, out: str) -> str:
    """Human-readable report of a training run."""
    lines = [f"ranker written to {out} (encoder {report['encoder']})",
             f"  trained on {report['train_questions']} questions: loss {report['first_loss']:.4f} -> "
             f"{report['loss']:.4f}" + (f", with a query adapter ({report['adapter_steps']} steps)"
                                         if report.get("adapter_steps") else "")
             + (f", each of the {report['balanced_files']} question files weighing the same"
                if report.get("balanced_files") else "")]
    if report.get("folds"):
        lines.append(f"  {report['folds']}-fold cross-validated over {report['cv_questions']} questions: R@2 "
                     f"{report['cv_recall@2']:.3f} / R@5 {report['cv_recall@5']:.3f} (the fusion on the same "
                     f"candidates: {report['cv_fusion_recall@2']:.3f} / {report['cv_fusion_recall@5']:.3f})")
        lines.append(_gain_line(report["cv_scored"], report["cv_gain@5"], "questions"))
        return "\n".join(lines + _per_file_lines(report.get("cv_per_file", [])))
    held = report.get("held_questions", 0)
    if not held:
        lines.append("  no question held out (holdout=0, or too few questions for its share): nothing validated")
        return "\n".join(lines)
    scored = report.get("held_scored", held)
    over = f" ({scored} with a gold passage in the index, which the recalls are over)" if scored < held else ""
    lines.append(f"  held out {held} question{'s' if held != 1 else ''}{over}: R@2 {report['held_recall@2']:.3f} / "
                 f"R@5 {report['held_recall@5']:.3f} (the fusion on the same candidates: "
                 f"{report['held_fusion_recall@2']:.3f} / {report['held_fusion_recall@5']:.3f})")
    lines.append(_gain_line(scored, report.get("held_gain@5", [float("nan")] * 3),
                            "held questions"))
    return "\n".join(lines + _per_file_lines(report.get("held_per_file", [])))


def _per_file_lines(rows: list) -> list:
    """One line per question file of a run over several (:func:`_per_file`)."""
    return [f"    {r['file']}: {r['questions']} questions, R@2 {r['recall@2']:.3f} / R@5 {r['recall@5']:.3f} (the "
            f"fusion: {r['fusion_recall@2']:.3f} / {r['fusion_recall@5']:.3f}); R@5 less the fusion's: "
            + _gain_text(r["scored"], r["gain@5"], "questions") for r in rows]


def _gain_line(n: int, gain: list, what: str) -> str:
    """The R@5 difference to the fusion over the ``n`` questions with a gold passage in their
    index, with its 95% interval where they are enough to give one (docs/methods/learned.md)."""
    return "  R@5 less the fusion's: " + _gain_text(n, gain, what)


def _gain_text(n: int, gain: list, what: str) -> str:
    """What :func:`_gain_line` says after its label."""
    if not math.isfinite(gain[0]):
        return f"none of the {what} has a gold passage in its index to compare on"
    if n < MIN_HELD_FOR_INTERVAL:  # a bootstrap over a handful of questions looks surer than it is
        return f"{100 * gain[0]:+.1f} points; {n} {what} are too few for an interval (it needs {MIN_HELD_FOR_INTERVAL})"
    return "{:+.1f} points, 95% interval {:+.1f} to {:+.1f} over the {}".format(*(100 * v for v in gain), what)


def check_one_validation(given: dict) -> None:
    """``holdout`` and ``folds`` both given (the keys a user set, not the defaults) are refused:
    they are two ways to validate, and ``folds`` trains on every question."""
    if given.get("folds") and "holdout" in given:
        raise UserError(f"holdout={given['holdout']} and folds={given['folds']} are two ways to validate; give one "
                        f"(folds= cross-validates, then trains on every question)")


def parse_train_args(argv: list) -> TrainJobConfig:
    """``hpengine train IDX questions=FILE [IDX2 questions=FILE2 ...] [key=value ...]`` as a
    :class:`~hpengine.config.TrainJobConfig`: each ``questions=`` pairs with the index before it;
    ``index=`` works too; every other key is a field of the config, its value read as the field's
    type. No value is interpolated.

    Raises:
        UserError: an unknown key (the closest one named), a value of the wrong type, a
            ``questions=`` without its index.
    """
    import difflib

    fields = {f.name: f for f in dataclasses.fields(TrainJobConfig)}
    indexes, questions, values, raw = [], [], {}, {}
    for arg in argv:
        key, eq, value = arg.partition("=")
        if not eq:
            indexes.append(arg)
        elif key == "index":
            indexes.append(value)
        elif key == "questions":
            if len(questions) >= len(indexes):
                got = f"it follows questions={questions[-1]!r}" if questions else "got no index before it"
                raise UserError(f"questions={value!r} pairs with the index before it: hpengine train IDX "
                                f"questions=FILE [IDX2 questions=FILE2 ...] ({got})")
            questions.append(value)
        elif key in fields and key != "debug":
            if key in values:  # the last would win silently
                raise UserError(f"{key}= is given twice ({raw[key]!r} and {arg!r}); give it once")
            values[key], raw[key] = _typed(key, value, fields[key].default), arg
        else:
            near = difflib.get_close_matches(key, [*fields, "debug"], n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise UserError(f"unknown key {key!r} for hpengine train{hint} (hpengine train --help lists the keys)")
    check_one_validation(values)
    try:
        return TrainJobConfig(index=indexes, questions=questions, **values)
    except (TypeError, ValueError) as exc:
        raise UserError(str(exc)) from None


def _typed(key: str, value: str, default):
    """``value`` as the type of the field's ``default`` (str, bool, int, float)."""
    from hpengine._console import read_switch

    kind = type(default)
    if kind is str:
        return value
    if kind is bool:
        return read_switch(key, value)
    try:
        return kind(value)
    except ValueError:
        raise UserError(f"{key}= must be {'an int' if kind is int else 'a number'} (got {value!r})") from None
