"""Value checks shared by the config dataclasses (one-line errors that name the key)."""
from __future__ import annotations


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)} (got {value!r})")


def _check_range(name: str, value, lo=None, hi=None, lo_open=False) -> None:
    if lo is not None and (value < lo or (lo_open and value == lo)):
        op = ">" if lo_open else ">="
        raise ValueError(f"{name} must be {op} {lo} (got {value!r})")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi} (got {value!r})")
