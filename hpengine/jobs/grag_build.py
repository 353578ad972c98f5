"""``hpengine grag-build INDEX [key=value ...]``: add GRAG-MH's parts (triples, communities,
summary nodes) to a saved index, atomically. Keys are :class:`~hpengine.config.GragBuildConfig`
fields (``triples=llm llm_model=PATH``, ``summarizer=MODEL``, ``louvain_seed=0`` ...).
``python -m hpengine.jobs.grag_build`` is an alias."""
from __future__ import annotations

import dataclasses
import sys


def main(argv: list | None = None) -> int:
    """Returns the exit status: 0 done, 2 a user error (one line ``hpengine: error: ...``, no
    traceback; ``HPENGINE_DEBUG=1`` shows it), 130 interrupted."""
    import os

    from hpengine._console import read_switch
    from hpengine.config import GragBuildConfig
    from hpengine.errors import UserError

    argv = sys.argv[1:] if argv is None else argv
    debug = os.environ.get("HPENGINE_DEBUG", "").strip().lower() in {"1", "true", "yes", "on"}
    fields = {f.name: f for f in dataclasses.fields(GragBuildConfig)}
    try:
        if not argv or argv[0].startswith("-") or "=" in argv[0]:
            raise UserError("grag-build takes the index folder first: hpengine grag-build INDEX "
                            f"[key=value ...] (got {' '.join(argv) or 'no arguments'})")
        kwargs, lock_timeout = {}, None
        for arg in argv[1:]:
            key, eq, value = arg.partition("=")
            if key == "lock_timeout" and eq:
                lock_timeout = _number(key, value, float)
                continue
            if key not in fields or not eq:
                raise UserError(f"unknown grag-build key {key!r}; keys: {sorted([*fields, 'lock_timeout'])} "
                                f"(got {arg!r})")
            default = fields[key].default
            if isinstance(default, bool):
                kwargs[key] = read_switch(key, value)
            else:
                kwargs[key] = _number(key, value, type(default)) if isinstance(default, (int, float)) else value
        try:
            cfg = GragBuildConfig(**kwargs)
        except (TypeError, ValueError) as exc:
            raise UserError(str(exc)) from exc
        from hpengine.graph import DEFAULT_LOCK_TIMEOUT
        from hpengine.jobs._grag_build import format_grag_report, run_grag_build

        report = run_grag_build(argv[0], cfg, lock_timeout=DEFAULT_LOCK_TIMEOUT if lock_timeout is None
                                else lock_timeout)
    except UserError as exc:
        if debug:
            raise
        print(f"hpengine: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print("hpengine: interrupted; the index is as it was (a GRAG build commits only when complete)",
              file=sys.stderr)
        return 130
    print(format_grag_report(report, argv[0]))
    return 0


def _number(key: str, value: str, kind):
    import math

    from hpengine.errors import UserError

    try:
        number = kind(value)
    except ValueError:
        raise UserError(f"{key}= must be {'an int' if kind is int else 'a number'} (got {value!r})") from None
    if kind is float and not math.isfinite(number):
        raise UserError(f"{key}= must be a finite number (got {value!r})")
    if key == "lock_timeout" and number < 0:
        raise UserError(f"{key}= must be >= 0 seconds (got {value!r})")
    return number


if __name__ == "__main__":
    sys.exit(main())
