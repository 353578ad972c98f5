"""``python -m hpengine.pipeline.grag_build INDEX [key=value ...]``: add GRAG-MH's parts (triples,
communities, summary nodes) to a saved index, atomically. Keys are
:class:`~hpengine.config.GragBuildConfig` fields (``triples=llm llm_model=PATH``,
``summarizer=MODEL``, ``louvain_seed=0`` ...)."""
from __future__ import annotations

import dataclasses
import sys


def main(argv: list | None = None) -> int:
    from hpengine.config import GragBuildConfig
    from hpengine.errors import UserError

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-") or "=" in argv[0]:
        print("usage: python -m hpengine.pipeline.grag_build INDEX [key=value ...]", file=sys.stderr)
        return 2
    fields = {f.name: f for f in dataclasses.fields(GragBuildConfig)}
    kwargs = {}
    try:
        for arg in argv[1:]:
            key, _, value = arg.partition("=")
            if key not in fields:
                raise UserError(f"unknown grag_build key {key!r}; keys: {sorted(fields)} (got {arg!r})")
            default = fields[key].default
            kwargs[key] = type(default)(value) if not isinstance(default, bool) else value.lower() == "true"
        cfg = GragBuildConfig(**kwargs)
        from hpengine.pipeline._grag_job import format_grag_report, run_grag_build

        report = run_grag_build(argv[0], cfg)
    except (UserError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(format_grag_report(report, argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
