"""The ``delete`` and ``update`` jobs: passages out of (or new texts into) a saved index, one new
generation committed under the index's writer lock, the edit report printed."""
from __future__ import annotations

import dataclasses
import hashlib

from hpengine.config import EditJobConfig, EncoderConfig, GraphConfig
from hpengine.errors import UserError
from hpengine.graph import Index, IndexStore, delete_passages, load_corpus, update_passages
from hpengine.jobs._index import _EXTRACTOR_RUNTIME, format_report
from hpengine.jobs._paths import check_index_dir, check_writable
from hpengine.models import encoder_for_index, make_extractor


class _OnFirstUse:
    """Stands for a model that is made on first attribute access: a delete needs its models only
    to re-read a moved first mention, and no job loads a model before its input is checked."""

    def __init__(self, make):
        self._make = make
        self._model = None

    def __getattr__(self, name):
        if self._model is None:
            self._model = self._make()
        return getattr(self._model, name)


def _models(cfg: EditJobConfig, meta: dict) -> dict:
    """The index's extractor and encoder, each made on first use."""
    store = IndexStore(cfg.out)
    extractor = _as_built("extractor", cfg.extractor, _recorded(meta, "extractor"), runtime=_EXTRACTOR_RUNTIME)
    encoder = _encoder_config(cfg, meta)
    return {"extractor": _OnFirstUse(lambda: make_extractor(extractor, store)),
            "encoder": _OnFirstUse(lambda: encoder_for_index(meta, encoder, f"out={cfg.out!r}"))}


def _recorded(meta: dict, key: str):
    return (meta.get("build_config") or {}).get(key)


def _encoder_config(cfg: EditJobConfig, meta: dict) -> EncoderConfig:
    """``cfg.encoder``; left at its defaults, the config the index recorded (dtype and batch sizes
    too: new embeddings match the kept ones only when computed alike), on this run's device."""
    given = cfg.encoder
    recorded = meta.get("encoder_config") or _recorded(meta, "encoder")
    if given != EncoderConfig(name_or_path="", device=given.device) or not isinstance(recorded, dict):
        return given
    names = {f.name for f in dataclasses.fields(EncoderConfig)}
    try:
        return dataclasses.replace(EncoderConfig(**{k: v for k, v in recorded.items() if k in names}),
                                   device=given.device)
    except (TypeError, ValueError):  # recorded by another version of the schema
        return given


def built_graph_config(meta: dict) -> GraphConfig:
    """The graph settings an index was built with: its recorded build config (the defaults when it
    records none), with η as the build resolved it (``meta["synonym_threshold"]``)."""
    cfg = _as_built("graph", GraphConfig(), _recorded(meta, "graph"))
    eta = meta.get("synonym_threshold")
    return cfg if eta is None else dataclasses.replace(cfg, synonym_threshold=float(eta))


def _as_built(key: str, given, recorded, runtime: tuple = ()):
    """The settings the index was built with (``recorded``, from its build config), ``runtime``
    fields from ``given``: an edit equals a fresh build only with the build's extractor and graph
    settings. ``given`` is returned when nothing was recorded (or what was is not valid here).

    Raises:
        UserError: a field of ``given`` was changed from its default to another value than the build's.
    """
    cls = type(given)
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(recorded, dict):
        return given
    try:
        built = cls(**{k: v for k, v in recorded.items() if k in names})
    except (TypeError, ValueError):  # recorded by another version of the schema
        return given
    built = dataclasses.replace(built, **{k: getattr(given, k) for k in runtime})
    default = dataclasses.replace(cls(), **{k: getattr(given, k) for k in runtime})
    conflicts = [n for n in sorted(names) if getattr(given, n) not in (getattr(default, n), getattr(built, n))]
    if not conflicts:  # what the command line set agrees with the build
        return built
    diff = conflicts[0]
    raise UserError(f"{key}.{diff} differs from the index's build ({getattr(built, diff)!r}); an edit keeps the "
                    f"settings the index was built with, so leave {key}.* unset (got {key}.{diff}="
                    f"{getattr(given, diff)!r})")


def _check_paths(cfg: EditJobConfig, command: str) -> None:
    if not cfg.out:
        raise UserError(f"{command} needs out=DIR, the index folder to change (got no out=)")
    check_index_dir(cfg.out, "out")
    check_writable(cfg.out, "out")


def _corpus(cfg: EditJobConfig, command: str, loaded=None) -> list:
    """The passages of ``cfg.corpus``, or ``loaded`` (a :class:`~hpengine.graph.CorpusLoad` of records
    given in memory); none when neither is given; a corpus without passages is refused."""
    if loaded is None and not cfg.corpus:
        return []
    loaded = load_corpus(cfg.corpus) if loaded is None else loaded
    if not loaded.passages:
        r = loaded.report
        raise UserError(f"corpus={cfg.corpus or 'records'!r} has no passages to {command} ({r['num_records']} records, "
                        f"{r['empty_skipped']} with empty text, {r['duplicates_dropped']} duplicates)")
    return loaded.passages


def run_delete(cfg: EditJobConfig, *, progress: bool = True, loaded=None):
    """Delete the passages that ``cfg.corpus`` (records matched by title and text, else by title; or
    ``loaded``, the records as a :class:`~hpengine.graph.CorpusLoad`), ``cfg.titles`` and ``cfg.ids``
    name from the saved index at ``cfg.out``.

    Raises:
        UserError: no index at ``out``, nothing named, a name that matches no passage, or every
            passage named; checked before any model loads, the index untouched.
    """
    _check_paths(cfg, "delete")
    records = _corpus(cfg, "delete", loaded)
    if not (records or cfg.titles or cfg.ids):
        raise UserError("delete needs corpus=PATH, titles=[...] or ids=[...] to name the passages to remove "
                        "(got none)")
    with IndexStore(cfg.out).writer(timeout=cfg.lock_timeout, command="hpengine delete") as writer:
        current = _check_generation(cfg, writer)
        index = Index.load(cfg.out, device=cfg.device)  # the latest, under the lock
        done = _finished_delete(cfg, index, current)
        if done is not None:  # a rerun of a delete by ids= that committed: positions have shifted since
            return index, done
        removed = [_content_key(index.passages[i]) for i in cfg.ids or () if 0 <= i < index.num_passages]
        graph_cfg = _as_built("graph", cfg.graph, _recorded(index.meta, "graph"))
        new, report = delete_passages(index, ids=cfg.ids, titles=cfg.titles, passages=records,
                                      graph_cfg=graph_cfg, progress=progress, **_models(cfg, index.meta))
        report = {"corpus": cfg.corpus, "titles": cfg.titles, "ids": cfg.ids, "from_generation": current,
                  "removed_by_id": removed, **report}
        _record(new, "delete", report, cfg.out)
        new.save(cfg.out, writer=writer)
        report["generation"] = writer.previous.number
    return new, report


def _check_generation(cfg: EditJobConfig, writer) -> int:
    """The generation the edit starts from; refused unless it is ``cfg.expect_generation`` (when set)."""
    current = writer.previous.number if writer.previous is not None else 0
    if cfg.expect_generation is not None and cfg.expect_generation != current:
        raise UserError(f"out={cfg.out!r} is at generation {current}, not expect_generation={cfg.expect_generation}: "
                        f"it changed since you read it (ids are positions in one generation); nothing was "
                        f"changed: look again and pass expect_generation={current}")
    return current


def _content_key(passage) -> dict:
    """A passage by content: its title and the sha256 of its title and text."""
    digest = hashlib.sha256(f"{passage.title}\0{passage.text}".encode("utf-8")).hexdigest()
    return {"title": passage.title, "sha256": digest}


def _finished_delete(cfg: EditJobConfig, index: Index, current: int) -> dict | None:
    """The no-op report of a delete by ids= that is the index's last edit, committed as generation
    ``current`` with the passages it removed gone (None: not such a rerun, or ``expect_generation``
    given, which asks for exactly this generation's positions)."""
    if not cfg.ids or cfg.expect_generation is not None:
        return None
    last = (index.meta.get("edit_reports") or [{}])[-1]
    same = (last.get("command") == "delete" and last.get("ids") == cfg.ids and last.get("titles") == cfg.titles
            and last.get("corpus") == cfg.corpus and last.get("from_generation") == current - 1)
    if not same:
        return None
    present = {_content_key(p)["sha256"] for p in index.passages}
    removed = last.get("removed_by_id") or []
    if any(r.get("sha256") in present for r in removed):
        return None
    return {"deleted_passages": 0, "already_done": True, "generation": current, "ids": cfg.ids,
            "removed_by_id": removed}


def run_update(cfg: EditJobConfig, *, progress: bool = True, loaded=None):
    """Replace the texts of the passages of the saved index at ``cfg.out`` by the records of
    ``cfg.corpus`` (or ``loaded``, as :func:`run_delete`'s; matched by title, or ``cfg.ids`` one per
    record). Nothing is written when every record equals its passage.

    Raises:
        UserError: no index at ``out``, no records, titles that match no passage or several,
            bad ids; checked before any model loads, the index untouched.
    """
    _check_paths(cfg, "update")
    if cfg.titles is not None:
        raise UserError(f"update matches its records by title, or by ids= (one per record); titles= is for delete "
                        f"(got titles={cfg.titles!r})")
    records = _corpus(cfg, "update", loaded)
    if not records:
        raise UserError("update needs corpus=PATH, the records {title, text} with the new texts (got no corpus=)")
    with IndexStore(cfg.out).writer(timeout=cfg.lock_timeout, command="hpengine update") as writer:
        _check_generation(cfg, writer)
        index = Index.load(cfg.out, device=cfg.device)  # the latest, under the lock
        graph_cfg = _as_built("graph", cfg.graph, _recorded(index.meta, "graph"))
        new, report = update_passages(index, records, ids=cfg.ids, graph_cfg=graph_cfg, progress=progress,
                                      **_models(cfg, index.meta))
        report = {"corpus": cfg.corpus, "ids": cfg.ids, **report}
        if report["updated_passages"]:
            _record(new, "update", report, cfg.out)
            new.save(cfg.out, writer=writer)
            report["generation"] = writer.previous.number
    return new, report


def _record(index: Index, command: str, report: dict, out: str) -> None:
    """The report into the index's meta; a stale-GRAG note names this index's rebuild command."""
    index.meta.setdefault("edit_reports", []).append({"command": command, **report})
    if "grag_stale" in index.meta:
        index.meta["grag_stale"] = report["grag_stale"] = index.meta["grag_stale"].replace("INDEX", out)


def format_edit_report(report: dict, out: str) -> str:
    """Human-readable report of a delete or update."""
    if report.get("already_done"):
        titles = ", ".join(repr(r["title"]) for r in report["removed_by_id"][:5])
        g = report["generation"]
        return (f"nothing to delete in {out}: generation {g} is already this delete's result (ids={report['ids']} "
                f"removed {titles}); to delete positions {report['ids']} of generation {g}, add "
                f"expect_generation={g}")
    if "updated_passages" in report and not report["updated_passages"]:
        return f"nothing to update in {out}: every record equals its passage ({report['unchanged_passages']} records)"
    done = "deleted" if "deleted_passages" in report else "updated"
    head = (f"{done} {report[done + '_passages']} passages: facts -{report['removed_facts']} "
            f"+{report['added_facts']}, entities -{report['removed_entities']} +{report['added_entities']} "
            f"({report['renamed_entities']} renamed), {report['reread_passages']} passages re-read, "
            f"{report['requeried_entities']} names searched again for synonyms")
    lines = format_report(report, out).splitlines()
    if "generation" in report:  # the generation an expect_generation= of a later edit names
        lines[0] += f" (generation {report['generation']})"
    if report.get("unchanged_passages"):
        head += f"; {report['unchanged_passages']} records equal their passages"
    stale = "" if "grag_stale" not in report else f"\n  {report['grag_stale']}"
    return "\n".join([lines[0], "  " + head, *lines[1:]]) + stale
