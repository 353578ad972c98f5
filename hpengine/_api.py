"""The Python face of hpengine: what each command of the command line does, as a function over the
same configuration dataclasses (:mod:`hpengine.config`, the one source of defaults).

==========================================  =============================================
command line                                Python
==========================================  =============================================
``hpengine index IDX corpus=FILE``          ``index = hpengine.build_index(FILE, IDX)``
``hpengine add IDX corpus=FILE``            ``index = hpengine.add(IDX, FILE)``
``hpengine delete IDX titles=[...]``        ``index = hpengine.delete(IDX, titles=[...])``
``hpengine update IDX corpus=FILE``         ``index = hpengine.update(IDX, FILE)``
``hpengine grag-build IDX``                 ``index = hpengine.add_grag(IDX)``
``hpengine ask IDX "question"``             ``hpengine.Engine(hpengine.open_index(IDX)).ask("question")``
``hpengine eval IDX questions=FILE``        ``result = hpengine.evaluate(engine, FILE)``
``hpengine report run.json out=page.html``  ``hpengine.write_report([result], "page.html")``
==========================================  =============================================

A corpus is a file (JSON list or JSONL of ``{title, text}``, CSV, Parquet) or the records
themselves (a list of ``{title, text}`` dicts); :func:`demo_corpus` and :func:`demo_questions` are
the built-in demo set. Every write of an index commits a new generation atomically under the
index's writer lock, as the commands do (they run the same jobs, :mod:`hpengine.jobs`).

"""
from __future__ import annotations

import dataclasses
import difflib
import json
import os

from hpengine.config import EditJobConfig, EvalConfig, GragBuildConfig, IndexConfig


def demo_corpus() -> list:
    """The built-in demo corpus: 40 fictional passages written for hpengine, as records.

    Returns:
        a new list of ``{"title": str, "text": str}`` dicts.

    Example:
        >>> corpus = demo_corpus()
        >>> len(corpus), sorted(corpus[0])
        (40, ['text', 'title'])
    """
    from hpengine.graph import builtin_corpus_path

    with open(builtin_corpus_path(), encoding="utf-8") as f:
        return [{"title": r["title"], "text": r["text"]} for r in json.load(f)]


def demo_questions() -> list:
    """The 12 built-in multi-hop questions over :func:`demo_corpus`, with gold answers and passages.

    Returns:
        a list of :class:`~hpengine.eval.Question`.

    Example:
        >>> q = demo_questions()[0]
        >>> q.question, q.answers
        ('Where was the director of the film The Salt Lanterns born?', ['Port Calder'])
    """
    from hpengine.eval import load_questions
    from hpengine.graph import builtin_questions_path

    return load_questions(builtin_questions_path())


def _settings(cls, base, settings: dict, fixed: dict):
    """``base`` (a ``cls`` instance, or ``cls()`` when None) with ``settings`` and ``fixed`` set;
    an unknown setting is refused by name, listing the valid ones."""
    if base is not None and not isinstance(base, cls):
        raise TypeError(f"config must be a {cls.__name__} (got {type(base).__name__})")
    names = {f.name for f in dataclasses.fields(cls)} - set(fixed)
    unknown = sorted(set(settings) - names)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(names), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise TypeError(f"unknown setting {unknown[0]!r}{hint}; {cls.__name__} takes {sorted(names)} "
                        f"(got {unknown[0]}=...)")
    values = {**settings, **fixed}
    if "device" in settings:  # as device= on the command line: every part left on its default device follows
        for f in dataclasses.fields(cls):
            part = values[f.name] if f.name in values else (getattr(base, f.name) if base is not None
                                                            else _field_default(cls, f.name))
            if dataclasses.is_dataclass(part) and getattr(part, "device", None) == getattr(type(part)(), "device", 0):
                values[f.name] = dataclasses.replace(part, device=settings["device"])
    return dataclasses.replace(base, **values) if base is not None else cls(**values)


def _field_default(cls, name: str):
    """The default value of ``cls``'s field ``name`` (None when it has none)."""
    f = cls.__dataclass_fields__[name]
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _corpus(corpus) -> tuple:
    """``(path, loaded)``: a corpus file's path (its passages load in the job), or the records'
    :class:`~hpengine.graph.CorpusLoad`."""
    if isinstance(corpus, (str, os.PathLike)):
        return os.fspath(corpus), None
    from hpengine.graph import load_records

    return "", load_records(corpus)


def build_index(corpus, out, *, config: IndexConfig | None = None, overwrite: bool = False,
                progress: bool = False, **settings):
    """Build an index of ``corpus`` and save it to the folder ``out`` (``hpengine index``).

    Args:
        corpus: a corpus file (JSON list or JSONL of ``{title, text}``, CSV, Parquet) or a list
            of ``{title, text}`` records (:func:`demo_corpus`). Whitespace is stripped, empty
            texts skipped and exact duplicates dropped.
        out: the index folder written (a new generation, committed atomically).
        config: an :class:`~hpengine.config.IndexConfig` to start from (default: its defaults).
        overwrite: replace an index already at ``out``. Default False: refuse.
        progress: progress bars. Default False.
        **settings: :class:`~hpengine.config.IndexConfig` fields, e.g. ``device="cuda"`` (the
            extractor and encoder follow unless given another device, as ``device=`` on the
            command line), ``encoder=EncoderConfig(name_or_path="e5-small")``, ``shard_size=0``.

    Returns:
        the :class:`~hpengine.graph.Index`; ``index.meta["build_report"]`` has the counts and
        the seconds per stage.

    Raises:
        UserError: a corpus without passages, or an ``out`` that holds something else (or an
            index, without ``overwrite``); checked before any model loads.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     index = build_index(demo_corpus()[:4], f"{tmp}/index")
        >>> index.num_passages, index.passages[0].title
        (4, 'The Salt Lanterns')
    """
    from hpengine.jobs import run_index

    from hpengine.errors import OutputExistsError
    from hpengine.graph import IndexStore

    path, loaded = _corpus(corpus)
    cfg = _settings(IndexConfig, config, settings, {"corpus": path, "out": os.fspath(out)})
    if not overwrite and os.path.isdir(cfg.out) and IndexStore(cfg.out).is_index():  # said in this API's words
        raise OutputExistsError(f"{cfg.out!r} already holds an index: open it with hpengine.open_index({cfg.out!r}), "
                                f"grow it with hpengine.add, or pass overwrite=True to replace it")
    return run_index(cfg, overwrite=overwrite, progress=progress, loaded=loaded)[0]


def open_index(path, *, device: str = "cpu"):
    """Load the saved index at ``path`` (its current generation; reading changes nothing).

    Args:
        path: an index folder.
        device: where its tensors go. Default ``"cpu"`` (memory-mapped there).

    Returns:
        the :class:`~hpengine.graph.Index`.

    Raises:
        IndexFormatError: no index, or a damaged one (naming the file).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = build_index(demo_corpus()[:4], f"{tmp}/index")
        ...     index = open_index(f"{tmp}/index")
        >>> index.num_passages
        4
    """
    from hpengine.graph import Index

    return Index.load(os.fspath(path), device=device)


def add(path, corpus, *, progress: bool = False, **settings):
    """Add passages to the saved index at ``path`` (``hpengine add``): only the new passages are
    extracted and embedded, and only their rows are written.

    Args:
        path: the index folder.
        corpus: a corpus file or a list of ``{title, text}`` records, as :func:`build_index` takes.
        progress: progress bars. Default False.
        **settings: :class:`~hpengine.config.IndexConfig` fields; ``encoder`` must be the index's
            (default MiniLM, the default of :func:`build_index`).

    Returns:
        the new :class:`~hpengine.graph.Index`; ``index.meta["add_reports"][-1]`` counts what
        was added (``added_passages``) and what was already there (``skipped_known_passages``).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = build_index(demo_corpus()[:4], f"{tmp}/index")
        ...     index = add(f"{tmp}/index", [{"title": "Oro River", "text": "The Oro River flows past Sarn."}])
        >>> index.num_passages, index.passages[-1].title
        (5, 'Oro River')
    """
    from hpengine.jobs import run_add

    corpus_path, loaded = _corpus(corpus)
    cfg = _settings(IndexConfig, None, settings, {"corpus": corpus_path, "out": os.fspath(path)})
    return run_add(cfg, progress=progress, loaded=loaded)[0]


def delete(path, *, titles=None, ids=None, records=None, progress: bool = False, **settings):
    """Delete passages from the saved index at ``path`` (``hpengine delete``): the index equals a
    fresh build without them; only what they touched is re-extracted and re-embedded.

    Args:
        path: the index folder.
        titles: a title or a list of them (every passage with the title). Default none.
        ids: a passage id (its position in the index) or a list of them. Default none.
        records: a corpus file or ``{title, text}`` records (matched by title and text, else by
            title). Default none. At least one of ``titles``, ``ids``, ``records`` is needed.
        progress: progress bars. Default False.
        **settings: :class:`~hpengine.config.EditJobConfig` fields (device, lock_timeout; the
            extractor, encoder and graph settings are the index's).

    Returns:
        the new :class:`~hpengine.graph.Index`. GRAG parts, if the index had any, are dropped and
        marked stale (:func:`add_grag` rebuilds them).

    Raises:
        UserError: nothing named, a name that matches no passage, or every passage named; the
            index is then untouched.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = build_index(demo_corpus()[:4], f"{tmp}/index")
        ...     index = delete(f"{tmp}/index", titles=["The Salt Lanterns"])
        >>> index.num_passages, "The Salt Lanterns" in [p.title for p in index.passages]
        (3, False)
    """
    from hpengine.jobs import run_delete

    corpus_path, loaded = _corpus(records) if records is not None else ("", None)
    cfg = _settings(EditJobConfig, None, settings,
                    {"out": os.fspath(path), "corpus": corpus_path, "titles": titles, "ids": ids})
    return run_delete(cfg, progress=progress, loaded=loaded)[0]


def update(path, records, *, ids=None, progress: bool = False, **settings):
    """Replace the texts of passages of the saved index at ``path`` (``hpengine update``), matched
    by title (or by ``ids``, one per record); nothing is written when every record equals its passage.

    Args:
        path: the index folder.
        records: a corpus file or ``{title, text}`` records with the new texts.
        ids: the passage each record replaces, in order. Default None: by title.
        progress: progress bars. Default False.
        **settings: :class:`~hpengine.config.EditJobConfig` fields, as :func:`delete` takes.

    Returns:
        the new :class:`~hpengine.graph.Index`.

    Raises:
        UserError: a title that matches no passage or several, or bad ids; the index is then untouched.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = build_index(demo_corpus()[:4], f"{tmp}/index")
        ...     new = {"title": "The Salt Lanterns", "text": "The Salt Lanterns is a 1962 film by Ilse Marrow."}
        ...     index = update(f"{tmp}/index", [new])
        >>> index.num_passages, [p.text for p in index.passages if p.title == "The Salt Lanterns"] == [new["text"]]
        (4, True)
    """
    from hpengine.jobs import run_update

    corpus_path, loaded = _corpus(records)
    cfg = _settings(EditJobConfig, None, settings, {"out": os.fspath(path), "corpus": corpus_path, "ids": ids})
    return run_update(cfg, progress=progress, loaded=loaded)[0]


def add_grag(path, *, progress: bool = False, lock_timeout: float = 60.0, **settings):
    """Build GRAG-MH's parts of the saved index at ``path`` and commit them (``hpengine grag-build``):
    the triples of every fact, Louvain communities and one summary node per community, which
    ``retriever="grag"`` needs. An edit (add, delete, update) drops them; this rebuilds them.

    Args:
        path: the index folder.
        progress: progress bars. Default False.
        lock_timeout: seconds to wait while another process writes the index. Default 60.
        **settings: :class:`~hpengine.config.GragBuildConfig` fields, e.g. ``triples="llm"`` with
            ``llm_model=PATH``, ``summarizer=MODEL`` (abstractive summaries).

    Returns:
        the new :class:`~hpengine.graph.Index` (``index.grag`` holds the parts).

    Example:
        >>> import tempfile, hpengine
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = build_index(demo_corpus()[:4], f"{tmp}/index")
        ...     index = add_grag(f"{tmp}/index")
        ...     answer = hpengine.Engine(index, retriever="grag").ask("Who directed The Salt Lanterns?")
        >>> index.grag is not None, answer.passages[0].title
        (True, 'The Salt Lanterns')
    """
    from hpengine.jobs import run_grag_build

    cfg = _settings(GragBuildConfig, None, settings, {})
    run_grag_build(os.fspath(path), cfg, progress=progress, lock_timeout=lock_timeout)
    return open_index(path, device=cfg.device)


def evaluate(engine, questions, *, output=None, config: EvalConfig | None = None, progress: bool = False,
             **settings) -> dict:
    """Answer ``questions`` with ``engine`` and score them (``hpengine eval``).

    Args:
        engine: an :class:`~hpengine.pipeline.Engine`.
        questions: a question file (JSON list or JSONL, the ``dev.json`` schema) or a list of
            :class:`~hpengine.eval.Question` (:func:`demo_questions`).
        output: a JSON file to write the result to (atomically), as ``hpengine eval output=``
            does; :func:`write_report` reads it. Default None: not written.
        config: an :class:`~hpengine.config.EvalConfig` to start from (default: its defaults).
        progress: a progress bar. Default False.
        **settings: :class:`~hpengine.config.EvalConfig` fields, e.g. ``recall_ks=[1, 2, 5]``,
            ``max_questions=100``, ``batch_size=64``, ``checkpoint="run.jsonl"`` (resumable).

    Returns:
        the result dict as ``hpengine eval`` writes it: the mean metrics (``"recall@2"``,
        ``"recall@5"``, ``"em"``, ``"f1"``), speed and token counts, and ``"records"``, one per
        question (prediction, ranked titles, chain, ``gold_ranks``, per-question metrics).

    Raises:
        UserError: no questions, or a ``recall_ks`` above the engine's ``passage_width``.

    Example:
        >>> import tempfile, hpengine
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     index = build_index(demo_corpus()[:4], f"{tmp}/index")
        ...     result = evaluate(hpengine.Engine(index, retriever="dense"), demo_questions()[:2], recall_ks=[1, 2])
        >>> result["num_questions"], sorted(k for k in result if k.startswith("recall@"))
        (2, ['recall@1', 'recall@2'])
    """
    from hpengine.errors import UserError
    from hpengine.jobs import evaluate as run_evaluate, write_result

    cfg = _settings(EvalConfig, config, settings, {})
    width = getattr(engine.config, "passage_width", None)
    if width is not None and max(cfg.recall_ks) > width:
        raise UserError(f"recall_ks must be <= the engine's passage_width={width}, the passages ranked per "
                        f"question (got {list(cfg.recall_ks)})")
    if isinstance(questions, (str, os.PathLike)):
        from hpengine.eval import load_questions

        questions = load_questions(questions)
    result = run_evaluate(engine, list(questions), cfg, progress)
    if output is not None:
        write_result(result, os.fspath(output))
    return result


def train(indexes, questions, out, *, progress: bool = False, **settings) -> dict:
    """Train the learned method's ranker on the questions of one or several indexes (``hpengine
    train``) and write it to ``out``; ``retriever="learned"`` with ``LearnedConfig(ranker=out)``
    ranks with it (docs/methods/learned.md).

    Args:
        indexes: an index folder, or a list of them.
        questions: per index, a question file or a list of :class:`~hpengine.eval.Question`
            with gold passages (one index: that file or list alone).
        out: the ranker file (safetensors).
        progress: progress lines. Default False.
        **settings: :class:`~hpengine.config.TrainJobConfig` fields, e.g. ``hidden=0`` (a linear
            ranker), ``epochs=300``, ``holdout=0.2``.

    Returns:
        the report: questions trained on and held out, the loss, and the held-out R@2 / R@5 of the
        ranker beside the fusion's on the same candidates.

    Example:
        >>> import tempfile, hpengine
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     index = build_index(demo_corpus()[:8], f"{tmp}/index")
        ...     report = train(f"{tmp}/index", demo_questions()[:4], f"{tmp}/ranker.safetensors", epochs=20, holdout=0.25)
        ...     learned = hpengine.Engine(index, config=hpengine.LearnedConfig(ranker=f"{tmp}/ranker.safetensors"))
        ...     answer = learned.ask(demo_questions()[0].question)
        >>> report["train_questions"], report["held_questions"], len(answer.passages) > 0
        (3, 1, True)
    """
    from hpengine.config import TrainJobConfig
    from hpengine.jobs import check_one_validation, run_train

    check_one_validation(settings)
    given = list(indexes) if isinstance(indexes, (list, tuple)) else [indexes]
    for item in given:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"train reads index folders (it computes candidates on each): pass the folder the index "
                            f"was built in or opened from (got {type(item).__name__})")
    paths = [os.fspath(p) for p in given]
    sets = questions if isinstance(questions, (list, tuple)) and len(paths) > 1 else [questions]
    files = [q for q in sets if isinstance(q, (str, os.PathLike))]
    cfg = _settings(TrainJobConfig, None, settings, {"index": paths, "out": os.fspath(out),
                                                     "questions": [os.fspath(q) for q in files]})
    if len(files) == len(sets):
        return run_train(cfg, progress=progress)
    from hpengine.eval import load_questions

    loaded = [load_questions(q) if isinstance(q, (str, os.PathLike)) else list(q) for q in sets]
    return run_train(dataclasses.replace(cfg, questions=[]), progress=progress, questions=loaded)


def write_report(runs, out, *, questions=None) -> str:
    """Write one self-contained HTML page comparing eval runs (``hpengine report``).

    Args:
        runs: results of :func:`evaluate` (dicts) or the JSON files it wrote, over the same questions.
        out: the HTML file written (atomically).
        questions: the :class:`~hpengine.eval.Question` list the runs answered. Default: read
            from the runs' question file (the built-in questions for in-memory runs without one).

    Returns:
        the path written.

    Example:
        >>> import os, tempfile, hpengine
        >>> questions = demo_questions()[:2]
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     index = build_index(demo_corpus()[:4], f"{tmp}/index")
        ...     runs = [evaluate(hpengine.Engine(index, retriever=m), questions) for m in ("dense", "ppr")]
        ...     page = write_report(runs, f"{tmp}/report.html", questions=questions)
        ...     page.endswith("report.html"), os.path.getsize(page) > 10_000
        (True, True)
    """
    from hpengine.eval import write_report as write

    return write(list(runs), os.fspath(out), questions=questions)
