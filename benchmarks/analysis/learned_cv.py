"""Cross-validated recall of the learned ranker (retriever=learned) beside the fusion and its
members, on the same candidates: k-fold (train on the other folds of every dataset, score the held
fold) and leave one dataset out (train on the others, score it). No question is scored by a model
that saw it. ``--repeats N`` runs both N times over other fold splits and model seeds and reports
the mean, and every learned row's difference to the fusion with a 95% interval from a paired
bootstrap over the questions (how far the dev questions themselves pin that difference down), in ``cv_<label>_r<N>.json``.
``--nested K`` adds a row whose training settings are chosen by nested cross-validation inside
each outer training set (:class:`NestedFit`), so that its estimate covers choosing them too.
A question asked twice is refused: the folds split rows.

    python benchmarks/analysis/learned_cv.py --set musique=IDX_M:QUESTIONS_M --set 2wikimultihopqa=IDX_W:QUESTIONS_W \\
        --set hotpotqa=IDX_H:QUESTIONS_H --label minilm

The candidates and features of each set are computed once and kept beside the results
(``benchmarks/results/learned/<label>_<set>.safetensors``, not committed: 8 MB for the three dev sets;
``--reuse`` reads them again, and refuses a cache of another index, question file, width or feature schema).
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

FIELDS = ("candidates", "features", "valid", "gold", "num_gold")
MEMBERS = ("dense", "hyperprove", "ppr")


def examples_of(name: str, index: str, questions: str, cache: Path, reuse: bool, max_questions: int,
                mention_width: int = 20):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from hpengine.config import EvalJobConfig, LearnedConfig
    from hpengine.eval import load_questions
    from hpengine.jobs import make_engine
    from hpengine.pipeline import RankerExamples, ranker_examples

    settings = _cache_settings(index, questions, max_questions, mention_width)
    if reuse and cache.exists():
        with safe_open(str(cache), "pt") as f:
            saved = f.metadata() or {}
        if saved != settings:
            differ = sorted(k for k in settings.keys() | saved.keys() if settings.get(k) != saved.get(k))
            raise SystemExit(f"learned_cv: {cache} holds candidates of other settings ({', '.join(differ)}); "
                             "run without --reuse, or with another --label")
        t = load_file(str(cache))
        return RankerExamples(*(t[f] for f in FIELDS)), 0.0
    engine = make_engine(EvalJobConfig(index=index, engine=LearnedConfig(mention_width=mention_width)))
    qs = load_questions(questions)
    qs = qs[:max_questions] if max_questions else qs
    start = time.perf_counter()
    ex = ranker_examples(engine, qs, batch_size=64,
                         progress=lambda d, n: print(f"\r{name}: {d}/{n}", end="", file=sys.stderr))
    seconds = time.perf_counter() - start
    print(file=sys.stderr)
    cache.parent.mkdir(parents=True, exist_ok=True)
    save_file({f: getattr(ex, f).contiguous() for f in FIELDS}, str(cache), metadata=settings)
    return ex, seconds


def _cache_settings(index: str, questions: str, max_questions: int, mention_width: int) -> dict:
    """What a candidate cache was computed from, recorded in it so that ``--reuse`` never reads
    candidates of another index, question file, feature schema or width."""
    from hpengine.pipeline.retrievers import FEATURES

    return {"index": str(Path(index).resolve()), "questions": str(Path(questions).resolve()),
            "max_questions": str(max_questions), "mention_width": str(mention_width), "features": ",".join(FEATURES)}


def check_distinct(questions: dict) -> None:
    """Refuse question sets that ask a question twice (case and outer spaces aside), in one set or
    two: the folds split rows, so a copy could be trained on where its twin is scored
    (``hpengine train`` keeps such copies on one side instead)."""
    seen = {}
    for name, qs in questions.items():
        for q in qs:
            key = q.question.strip().lower()
            if key in seen:
                raise SystemExit(f"learned_cv: {name} asks {q.question.strip()!r} again ({seen[key]} asks it too)")
            seen[key] = name


def folds_of(n: int, k: int, seed: int) -> list:
    rows = list(range(n))
    random.Random(seed).shuffle(rows)
    return [sorted(rows[i::k]) for i in range(k)]


def scores(order, examples) -> dict:
    from hpengine.pipeline import recall_at

    return {f"recall@{k}": round(recall_at(order, examples, k), 4) for k in (2, 5, 10)}


def run(args) -> dict:
    from hpengine.pipeline import fusion_order, list_order, train_ranker

    from hpengine.eval import load_questions

    torch.set_num_threads(args.threads)
    check_distinct({spec.partition("=")[0]: load_questions(spec.partition(":")[2])[: args.max_questions or None]
                    for spec in args.set})
    sets, seconds = {}, {}
    for spec in args.set:
        name, _, rest = spec.partition("=")
        index, _, questions = rest.partition(":")
        cache = RESULTS / "learned" / f"{args.label}_{name}.safetensors"
        sets[name], seconds[name] = examples_of(name, index, questions, cache, args.reuse, args.max_questions,
                                                args.mention_width)
    out = {"label": args.label, "folds": args.folds, "seed": args.seed, **_fit_args(args), "models": {}, "sets": {},
           "candidate_seconds": seconds}
    for name, ex in sets.items():
        row = {"questions": len(ex), "fusion": scores(fusion_order(ex), ex)}
        for m in MEMBERS:
            row[m] = scores(list_order(ex, m), ex)
        has = ex.num_gold > 0
        row["gold_in_candidates"] = round(float((ex.gold.sum(1).float()[has] / ex.num_gold[has]).mean()), 4)
        out["sets"][name] = row
    out["repeats"] = args.repeats
    fits = {f"hidden{h}": (lambda train, seed, h=h: train_ranker(train, hidden=h, seed=seed, **_fit_args(args)))
            for h in args.hidden}
    if args.gbdt:
        fits["gbdt"] = GbdtRanker
    if args.listformer:
        fits["listformer"] = fit_list_ranker
    if args.nested:  # each setting over the run's own (--epochs, --lr, ..., the first --hidden)
        base = {**_fit_args(args), "hidden": args.hidden[0]}
        fits["nested"] = NestedFit({k: {**base, **v} for k, v in NESTED_GRID.items()}, args.nested)
    for key, fit in fits.items():
        out["models"][key] = cross_validate(sets, fit, args.folds, args.seed, args.repeats)
    if args.nested:
        out["nested_grid"] = NESTED_GRID
        out["nested_choices"] = fits["nested"].chosen
    return out


def cross_validate(sets: dict, fit, folds: int, seed: int, repeats: int = 1) -> dict:
    """R@k of ``fit(train, seed) -> model`` k-fold over every set at once, and leaving each set out;
    with ``repeats`` > 1, the mean over that many fold splits and model seeds (``seed``,
    ``seed + 1``, ...), each repeat's R@5, and the difference to the fusion with its interval
    (:func:`versus_fusion`)."""
    from hpengine.pipeline import recall_at, recall_per_question

    runs = [held_out_orders(sets, fit, folds, seed + r) for r in range(repeats)]
    res = {n: {} for n in sets}
    for part in ("cv", "lodo"):
        for n, ex in sets.items():
            orders = [run[part][n] for run in runs if n in run[part]]
            if not orders:
                continue
            res[n][part] = {f"recall@{k}": round(float(torch.stack([recall_per_question(o, ex, k) for o in orders])
                                                           .mean()), 4) for k in (2, 5, 10)}
            if repeats > 1:
                res[n][f"{part}_runs"] = [round(recall_at(o, ex, 5), 4) for o in orders]
                res[n][f"{part}_vs_fusion"] = versus_fusion(orders, ex)
    return res


def held_out_orders(sets: dict, fit, folds: int, seed: int, lodo: bool = True) -> dict:
    """``{"cv": {set: order}, "lodo": {set: order}}``: every question's candidates ordered by a
    model that did not see it (int64 ``[N, C]``), k-fold and (``lodo``) leaving each set out."""
    from hpengine.pipeline import RankerExamples, rank_candidates

    rows = {name: folds_of(len(ex), folds, seed) for name, ex in sets.items()}
    out = {"cv": {n: torch.zeros_like(ex.candidates) for n, ex in sets.items()}, "lodo": {}}
    for f in range(folds):  # k-fold over every dataset at once
        train = RankerExamples.of_sets([ex.subset([r for g, fold in enumerate(rows[n]) if g != f for r in fold])
                                        for n, ex in sets.items()])
        model = fit(train, seed)
        for n, ex in sets.items():
            held = ex.subset(rows[n][f])
            out["cv"][n][rows[n][f]] = _pad(rank_candidates(model, held), ex.candidates.shape[1])
    if lodo and len(sets) > 1:
        for n, ex in sets.items():  # leave one dataset out
            model = fit(RankerExamples.of_sets([e for m, e in sets.items() if m != n]), seed)
            out["lodo"][n] = _pad(rank_candidates(model, ex), ex.candidates.shape[1])
    return out


# The training settings the recipe was chosen among on the dev questions (docs/methods/learned.md):
# --nested selects among them inside each outer training set only, so the outer estimate covers
# the choice of these settings too. Each entry overrides the run's own training settings.
NESTED_GRID = {
    "default": {},
    "weight_decay=0.01": {"weight_decay": 0.01},
    "weight_decay=0.1": {"weight_decay": 0.1},
    "balance_sets=false": {"balance_sets": False},
    "features alone": {"fusion_prior": False, "weight_decay": 1e-4, "balance_sets": False},
}


class NestedFit:
    """``fit(train, seed) -> model`` that first chooses its training settings among ``grid`` by
    cross-validating inside ``train`` alone, then trains with them on all of ``train``.

    The inner score of a setting is the mean over ``train``'s question sets of their R@5 (every set
    the same) in an inner ``folds``-fold split of every set (:func:`held_out_orders` on ``train``'s
    sets, k-fold only: each fit of the recipe takes seconds, and a grid times the folds times the
    outer fits is already hundreds of them), so no outer held question takes part in the choice.
    ``trainer(train, seed=, **settings) -> model`` (default
    :func:`hpengine.pipeline.train_ranker`); ``chosen`` logs each call's choice."""

    def __init__(self, grid: dict, folds: int, trainer=None):
        from hpengine.pipeline import train_ranker

        self.grid, self.folds, self.trainer, self.chosen = grid, folds, trainer or train_ranker, []

    def __call__(self, train, seed: int):
        sets = {int(s): train.subset(torch.nonzero(train.question_set == s).flatten())
                for s in torch.unique(train.question_set)}
        inner = {name: _inner_score(sets, self._fit_with(settings), self.folds, seed)
                 for name, settings in self.grid.items()}
        best = max(inner, key=inner.get)  # the first of equal scores: the grid's order
        self.chosen.append({"chosen": best, "sets": len(sets), "inner_r5": {k: round(v, 4) for k, v in inner.items()}})
        return self.trainer(train, seed=seed, **self.grid[best])

    def _fit_with(self, settings: dict):
        return lambda train, seed: self.trainer(train, seed=seed, **settings)


def _inner_score(sets: dict, fit, folds: int, seed: int) -> float:
    """Mean R@5 over ``sets`` of ``fit`` in a ``folds``-fold split of every set."""
    from hpengine.pipeline import recall_at

    orders = held_out_orders(sets, fit, folds, seed, lodo=False)
    return sum(recall_at(orders["cv"][n], ex, 5) for n, ex in sets.items()) / len(sets)


def versus_fusion(orders: list, examples) -> dict:
    """``{"recall@k": [mean, low, high]}`` (k = 2, 5): the recall of ``orders`` (int64 ``[N, C]``
    each, one per repeat) less the fusion's on the same candidates, each question's recall averaged
    over the ``orders`` first, with the 95% interval of :func:`hpengine.pipeline.paired_difference`
    over the questions (the sampling of questions only: the repeats' own spread is averaged out)."""
    from hpengine.pipeline import fusion_order, paired_difference, recall_per_question

    fused = fusion_order(examples)
    out = {}
    for k in (2, 5):
        mine = torch.stack([recall_per_question(o, examples, k) for o in orders]).mean(0)
        out[f"recall@{k}"] = [round(v, 4) for v in paired_difference(mine, recall_per_question(fused, examples, k))]
    return out


class GbdtRanker:
    """LightGBM's LambdaMART on the same features (``--gbdt``; needs ``pip install lightgbm``): a
    reference for how much a stronger model than the engine's MLP gets out of them (every question
    weighing the same, whatever ``--no-balance-sets`` says)."""

    def __init__(self, train, seed: int = 0):
        import lightgbm

        valid = train.valid
        groups = valid.sum(1)
        self.model = lightgbm.LGBMRanker(objective="lambdarank", num_leaves=15, learning_rate=0.05, n_estimators=300,
                                         subsample=0.8, subsample_freq=1, colsample_bytree=0.8, min_child_samples=20,
                                         lambdarank_truncation_level=10, random_state=seed, n_jobs=1, verbose=-1)
        self.model.fit(train.features[valid].numpy(), train.gold[valid].int().numpy(), group=groups[groups > 0].numpy())

    def __call__(self, features, valid):
        out = torch.full(valid.shape, float("-inf"))
        out[valid] = torch.from_numpy(self.model.predict(features[valid].numpy())).float()
        return out


class ListRanker(torch.nn.Module):
    """A transformer over each question's candidate list (``--listformer``): one encoder layer
    (``d`` wide) over the first ``top`` candidates (the union's order, which holds every gold
    candidate of the dev sets within 60), scored by the engine's linear ranker (its standardised
    features and linear term) plus the layer's output. A reference for whether attention across the
    candidates finds what per-candidate scoring misses (every question weighing the same)."""

    def __init__(self, num_features: int, d: int = 32, heads: int = 4, top: int = 60):
        from hpengine.nn import CandidateRanker

        super().__init__()
        self.top = top
        self.base = CandidateRanker(num_features, hidden=0)
        self.inp = torch.nn.Linear(num_features, d)
        self.layer = torch.nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True)
        self.out = torch.nn.Linear(d, 1)

    def forward(self, features, valid):
        """float ``[Q, C, F]``, bool ``[Q, C]`` -> float ``[Q, C]`` (``-inf`` past ``top`` and where not valid)."""
        x, v = features[:, : self.top], valid[:, : self.top]
        z = (x.float() - self.base.mean) / self.base.scale
        attended = self.out(self.layer(self.inp(z), src_key_padding_mask=~v)).squeeze(-1)
        out = torch.full(valid.shape, float("-inf"), device=features.device)
        out[:, : v.shape[1]] = self.base(x, v) + attended  # the base is -inf where not valid
        return out


def fit_list_ranker(train, seed: int = 0, epochs: int = 300, lr: float = 3e-3) -> ListRanker:
    """A :class:`ListRanker` trained full-batch with Adam on the engine's listwise loss."""
    from hpengine.nn import listwise_loss

    torch.manual_seed(seed)
    model = ListRanker(train.features.shape[-1])
    model.base.fit_scaling(train.features, train.valid)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=1e-4)
    top = model.top  # a gold passage past the list's top cannot be scored
    for _ in range(epochs):
        opt.zero_grad()
        listwise_loss(model(train.features, train.valid)[:, :top], train.gold[:, :top], train.valid[:, :top]).backward()
        opt.step()
    return model.eval()


def ship(args, out: dict, engines=None, questions=None) -> None:
    """Train on all the sets' questions and write the ranker ``--ship`` names (with a query
    adapter when ``--adapter-steps`` is given)."""
    from safetensors.torch import load_file

    from hpengine.config import LearnedConfig
    from hpengine.graph import IndexStore
    from hpengine.pipeline import RankerExamples, train_ranker, write_ranker
    from hpengine.pipeline.retrievers import FEATURES

    parts, encoders = [], set()
    for spec in args.set:
        name, _, rest = spec.partition("=")
        t = load_file(str(RESULTS / "learned" / f"{args.label}_{name}.safetensors"))
        parts.append(RankerExamples(*(t[f] for f in FIELDS)))
        encoders.add(str(IndexStore(rest.partition(":")[0]).read_manifest().get("encoder", "")))
    if len(encoders) != 1:
        raise SystemExit(f"the sets use several encoders: {sorted(encoders)}")
    examples = RankerExamples.of_sets(parts)
    hidden = args.hidden[0]
    if args.adapter_steps:
        model, adapted = fit_adapted(engines, questions, {n: list(range(len(qs))) for n, qs in questions.items()}, args)
        examples = RankerExamples.of_sets(list(adapted.values()))
    else:
        model = train_ranker(examples, hidden=hidden, seed=args.seed, **_fit_args(args))
    cfg = LearnedConfig(mention_width=args.mention_width)
    write_ranker(model, args.ship, {"features": list(FEATURES), "encoder": encoders.pop(),
                                    "candidate_width": cfg.candidate_width, "mention_width": cfg.mention_width,
                                    "passage_width": cfg.passage_width,
                                    "questions": len(examples), "hidden": hidden, **_fit_args(args),
                                    "adapter_steps": args.adapter_steps,
                                    "trained_on": [s.partition("=")[0] for s in args.set], "cv": out["models"]})
    print(f"ranker trained on {len(examples)} questions written to {args.ship}")


def load_engines(args) -> tuple[dict, dict]:
    """``(engines, questions)`` by set name, the learned method's engines (no ranker read)."""
    from hpengine.config import EvalJobConfig, LearnedConfig
    from hpengine.eval import load_questions
    from hpengine.jobs import make_engine

    engines, questions = {}, {}
    for spec in args.set:
        name, _, rest = spec.partition("=")
        index, _, qfile = rest.partition(":")
        engines[name] = make_engine(EvalJobConfig(index=index, engine=LearnedConfig(mention_width=args.mention_width)))
        qs = load_questions(qfile)
        questions[name] = qs[: args.max_questions] if args.max_questions else qs
    return engines, questions


def fit_adapted(engines: dict, questions: dict, rows: dict, args):
    """A query adapter and a ranker trained on ``rows`` (set -> question rows), and the examples
    of every set computed through that adapter."""
    from hpengine.pipeline import RankerExamples, adapter_part, ranker_examples, train_adapter, train_ranker

    parts = [adapter_part(engines[n], [questions[n][r] for r in rs]) for n, rs in rows.items() if rs]
    adapter = train_adapter(parts, steps=args.adapter_steps, seed=args.seed)
    examples = {n: ranker_examples(engines[n], questions[n], adapter=adapter) for n in engines}
    train = RankerExamples.of_sets([examples[n].subset(rs) for n, rs in rows.items() if rs])
    model = train_ranker(train, hidden=args.hidden[0], seed=args.seed, adapter=adapter, **_fit_args(args))
    return model, examples


def run_adapted(args, out: dict, engines: dict, questions: dict) -> None:
    """The same folds with a query adapter (``--adapter-steps``): per fold, the adapter is trained
    on the training questions of every set, every set's candidates are computed again through it,
    and the ranker is trained on the training rows of those; leave one dataset out likewise (the
    adapter and the ranker from the other sets only). Adds ``models["adapter<N>_hidden<H>"]``."""
    from hpengine.pipeline import rank_candidates

    folds = {n: folds_of(len(qs), args.folds, args.seed) for n, qs in questions.items()}
    res = {n: {} for n in engines}
    held_orders = {n: [] for n in engines}
    for f in range(args.folds):
        rows = {n: [r for g, fold in enumerate(folds[n]) if g != f for r in fold] for n in engines}
        model, examples = fit_adapted(engines, questions, rows, args)
        for n in engines:
            held = examples[n].subset(folds[n][f])
            held_orders[n].append((held, rank_candidates(model, held)))
        print(f"adapter fold {f + 1}/{args.folds}", file=sys.stderr)
    for n in engines:
        res[n]["cv"] = _pooled(held_orders[n])
    if len(engines) > 1 and not args.no_lodo:
        for n in engines:
            model, examples = fit_adapted(engines, questions,
                                          {m: list(range(len(questions[m]))) for m in engines if m != n}, args)
            res[n]["lodo"] = _pooled([(examples[n], rank_candidates(model, examples[n]))])
            print(f"adapter, {n} left out", file=sys.stderr)
    out["models"][f"adapter{args.adapter_steps}_hidden{args.hidden[0]}"] = res


def _pooled(pairs: list) -> dict:
    """Recall@2/5/10 over the held parts together (weighted by their questions with gold)."""
    from hpengine.pipeline import recall_at

    weight = [int((e.num_gold > 0).sum()) for e, _ in pairs]
    return {f"recall@{k}": round(sum(recall_at(o, e, k) * w for (e, o), w in zip(pairs, weight)) / sum(weight), 4)
            for k in (2, 5, 10)}


def _pad(order, width: int):
    return order if order.shape[1] == width else torch.cat(
        [order, torch.arange(order.shape[1], width).expand(order.shape[0], -1)], dim=1)


def table(out: dict) -> str:
    lines = [f"learned ranker, {out['label']}: R@2 / R@5, {out['folds']}-fold CV and leave-one-dataset-out"]
    names = list(out["sets"])
    head = "| method | " + " | ".join(names) + " |"
    lines += [head, "|" + "---|" * (len(names) + 1)]

    def cell(r):
        return f"{r['recall@2']:.3f} / {r['recall@5']:.3f}"

    for m in (*MEMBERS, "fusion"):
        lines.append(f"| {m} | " + " | ".join(cell(out["sets"][n][m]) for n in names) + " |")
    for key, res in out["models"].items():
        lines.append(f"| learned {key}, CV | " + " | ".join(cell(res[n]["cv"]) for n in names) + " |")
        if all("lodo" in res[n] for n in names):
            lines.append(f"| learned {key}, LODO | " + " | ".join(cell(res[n]["lodo"]) for n in names) + " |")
    lines.append("| gold in candidates | " + " | ".join(f"{out['sets'][n]['gold_in_candidates']:.3f}" for n in names)
                 + " |")
    for key, res in out["models"].items():
        for part in ("cv", "lodo"):
            if all(f"{part}_vs_fusion" in res[n] for n in names):
                lines.append(f"| {key} {part.upper()} less fusion, R@5 (95% interval) | " + " | ".join(
                    "{:+.1f} [{:+.1f}, {:+.1f}]".format(*(100 * v for v in res[n][f"{part}_vs_fusion"]["recall@5"]))
                    for n in names) + " |")
    if out.get("nested_choices"):
        counts = {}
        for c in out["nested_choices"]:
            counts[c["chosen"]] = counts.get(c["chosen"], 0) + 1
        lines.append("nested: settings chosen per outer training: " + ", ".join(f"{k} x{v}" for k, v in counts.items()))
    return "\n".join(lines)


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def _inner_folds(text: str) -> int:
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"inner folds must be at least 2 (got {value})")
    return value


def _fit_args(args) -> dict:
    """The training settings of ``train_ranker`` that the command line sets."""
    return dict(epochs=args.epochs, lr=args.lr, weight_decay=args.weight_decay, fusion_prior=not args.no_fusion_prior,
                balance_sets=not args.no_balance_sets)


def main(argv=None) -> None:
    from hpengine.config import TrainJobConfig

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", action="append", required=True, help="NAME=INDEX:QUESTIONS (repeat)")
    p.add_argument("--label", default="run")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--hidden", type=int, nargs="+", default=[0, 32])
    p.add_argument("--epochs", type=int, default=TrainJobConfig.epochs)
    p.add_argument("--lr", type=float, default=TrainJobConfig.lr)
    p.add_argument("--weight-decay", type=float, default=TrainJobConfig.weight_decay)
    p.add_argument("--no-fusion-prior", action="store_true", help="score from the features alone, not starting "
                   "from the fusion's order (TrainJobConfig.fusion_prior)")
    p.add_argument("--no-balance-sets", action="store_true", help="weigh every question the same in the loss, not "
                   "every set (TrainJobConfig.balance_sets; the MLP's: --gbdt and --listformer always weigh every "
                   "question the same)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=_at_least_one, default=1, help="run the folds and the left-out sets this many times "
                   "(fold splits and model seeds --seed, --seed + 1, ...): the mean, each run's R@5, and the "
                   "difference to the fusion with a 95%% interval over the questions")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mention-width", type=int, default=20, help="engine.mention_width of the candidates "
                   "(0: without the passages the fused top five name)")
    p.add_argument("--max-questions", type=int, default=0)
    p.add_argument("--gbdt", action="store_true", help="also LightGBM's LambdaMART on the same features (needs lightgbm)")
    p.add_argument("--listformer", action="store_true", help="also a one-layer transformer over each candidate "
                   "list on the same features (minutes per fold on a CPU)")
    p.add_argument("--nested", type=_inner_folds, default=0, metavar="K", help="also the recipe's training settings chosen "
                   "by nested cross-validation: inside each outer training set, among NESTED_GRID by K inner folds, then "
                   "scored on the outer held questions (NestedFit)")
    p.add_argument("--reuse", action="store_true", help="read the saved candidates instead of computing them")
    p.add_argument("--ship", metavar="FILE", help="also train on every question of every set (hidden: the first "
                   "--hidden) and write the ranker to FILE (the package's default ranker of this encoder)")
    p.add_argument("--adapter-steps", type=int, default=0, help="also measure a query adapter trained this many "
                   "steps with the ranker (hidden: the first --hidden); computes every set's candidates again per fold")
    p.add_argument("--no-lodo", action="store_true", help="with --adapter-steps: k-fold only (leave one dataset out "
                   "computes every set's candidates three more times)")
    args = p.parse_args(argv)
    out = run(args)
    engines = questions = None
    if args.adapter_steps:
        engines, questions = load_engines(args)
        run_adapted(args, out, engines, questions)
    repeats = f"_r{args.repeats}" if args.repeats > 1 else ""
    path = write_json(out, RESULTS / "learned" / f"cv_{args.label}{repeats}.json")
    print(table(out))
    print(f"written to {path}")
    if args.ship:
        ship(args, out, engines, questions)


if __name__ == "__main__":
    main()
