"""What each configuration key means, read from the dataclasses themselves: a field's doc is its
``#:`` comment (the lines right above the field, or the rest of its own line), the convention
Sphinx's autodoc reads too. The command line's ``--help`` and the generated reference pages
(docs/reference/) both come from here, so a key's description has one source.

Reads the config modules' source text (``tokenize``); imports neither torch nor Hydra.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import re
import sys
import tokenize
from typing import NamedTuple


class Key(NamedTuple):
    """One command-line key: its dotted ``name``, ``default`` (as the dataclass holds it), the
    ``owner`` class and its ``doc`` (the field's ``#:`` comment, empty when it has none)."""

    name: str
    default: object
    owner: type
    doc: str


@functools.lru_cache(maxsize=None)
def _module_comments(module: str) -> tuple:
    """``(lines, {line number: doc comment text})`` of a module's ``#:`` comments."""
    path = getattr(sys.modules[module], "__file__", None)
    if not path:
        return (), {}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    docs = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT and tok.string.startswith("#:"):
            docs[tok.start[0]] = tok.string[2:].strip()
    return tuple(text.splitlines()), docs


_FIELD = re.compile(r"^\s+(?P<name>[A-Za-z_]\w*)\s*:")


@functools.lru_cache(maxsize=None)
def _own_docs(cls: type) -> dict:
    """``{field: doc}`` for the fields ``cls`` itself declares (not its bases')."""
    lines, docs = _module_comments(cls.__module__)
    own = set(vars(cls).get("__annotations__", {}))
    start = next((i for i, ln in enumerate(lines) if re.match(rf"class {cls.__name__}\b", ln)), None)
    if start is None:
        return {}
    found = {}
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line and not line[0].isspace() and not line.startswith("#"):
            break  # the end of the class body
        m = _FIELD.match(line)
        if not m or m.group("name") not in own or m.group("name") in found:
            continue
        above, k = [], i  # line numbers in ``docs`` count from 1: line i + 1 is this field's
        while k >= 1 and k in docs and lines[k - 1].lstrip().startswith("#:"):
            above.insert(0, docs[k])
            k -= 1
        end = i + 1
        while end not in docs and end < len(lines) and lines[end - 1].rstrip().endswith(("(", ",", "[")):
            end += 1  # a field whose default spans lines: its doc may close the statement
        trailing = [docs[end]] if end in docs and not lines[end - 1].lstrip().startswith("#:") else []
        found[m.group("name")] = " ".join(above + trailing)
    return found


def field_doc(cls: type, name: str) -> str:
    """The doc of field ``name`` of dataclass ``cls`` (declared by it or a base), ``""`` if none."""
    for klass in cls.__mro__:
        if name in vars(klass).get("__annotations__", {}):
            return _own_docs(klass).get(name, "")
    return ""


def doc_summary(doc: str) -> str:
    """The first sentence of a doc: what ``--help`` prints on one line."""
    m = re.search(r"(?<!\be\.g)(?<!\bi\.e)\.(\s|$)", doc)
    return doc[: m.start()] if m else doc


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def config_keys(cls: type, prefix: str = "", nested: dict | None = None, value=None) -> list:
    """Every key of dataclass ``cls`` as a flat list of :class:`Key`, nested dataclasses walked
    (``encoder.dtype``); ``nested`` maps a dotted field name to the class used in its place (the
    ``engine`` field of a job takes the chosen method's class); ``value`` is an instance whose
    values are the defaults (else the class's own defaults)."""
    nested = nested or {}
    keys = []
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        default = getattr(value, f.name) if value is not None else _default(f)
        if name in nested:
            default = nested[name]()
        if dataclasses.is_dataclass(default):
            keys += config_keys(type(default), name + ".", nested, default)
        else:
            keys.append(Key(name, default, cls, field_doc(cls, f.name)))
    return keys


def format_value(value) -> str:
    """A default as the command line writes it (``true``, ``null``, ``[2,5]``, ``''``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, str):
        return value if value and not re.search(r"[\s,\[\]{}'\"=]", value) else repr(value)
    return str(value)
