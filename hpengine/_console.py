"""How every front door speaks: a user error is one line ``hpengine: error: ...`` on stderr and
exit status 2 (``HPENGINE_DEBUG=1`` or ``debug=true`` shows the traceback instead). Imports
nothing heavy, so ``--help`` and errors found before any work stay fast."""
from __future__ import annotations

import os
import re
import sys

DEBUG_ENV = "HPENGINE_DEBUG"
TRUE, FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}
#: lines of Hydra/OmegaConf messages that say nothing about the problem (or mislead: ``+key`` does
#: not add keys to a schema)
_NOISE = ("full_key:", "object_type=", "reference_type=", "Config search path", "provider=",
          "To append to your config use")


def read_switch(key: str, value: str) -> bool:
    """The value of a ``key=`` switch: true / 1 / yes / on or false / 0 / no / off, in any case and
    with outer spaces (``bool("false")`` is True, so never the type's own conversion).

    Raises:
        UserError: any other word, in one line naming ``key``.
    """
    word = value.strip().lower()
    if word not in TRUE | FALSE:
        from hpengine.errors import UserError

        raise UserError(f"{key}= must be true or false (got {value!r})")
    return word in TRUE


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` (and of a Hydra/OmegaConf cause) on one line, without OmegaConf's
    ``full_key`` / ``object_type`` trailer lines."""
    parts = []
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        lines = [ln.strip() for ln in str(exc).splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith(_NOISE) and not re.fullmatch(r"base_\w+", ln)]
        text = "; ".join(lines).replace(":;", ":")
        if text and not any(text in p for p in parts):
            parts.append(text)
        exc = exc.__cause__
    return re.sub(r"\s+", " ", ": ".join(parts)).strip() or "error"


def warn(text: str) -> None:
    """One line ``hpengine: warning: ...`` on stderr."""
    print(f"hpengine: warning: {text}", file=sys.stderr)


def fail(exc: BaseException, debug: bool) -> None:
    if debug:
        raise exc
    print(f"hpengine: error: {one_line(exc)}", file=sys.stderr)
    raise SystemExit(2)


def debug_from_env() -> bool:
    """``HPENGINE_DEBUG`` asks for tracebacks."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() in TRUE
