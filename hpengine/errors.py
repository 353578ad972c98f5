"""The project's error for bad user input.

A :class:`UserError` is a problem with what the user gave (a file, a record, a config value, a
path, a missing argument), not a bug: the command line prints it as one line
``hpengine: error: ...`` and exits non-zero without a traceback (``HPENGINE_DEBUG=1`` or
``debug=true`` shows it). It subclasses ``ValueError`` so library callers that catch
``ValueError`` keep working.
"""
from __future__ import annotations

__all__ = ["UserError"]


class UserError(ValueError):
    """Bad user input; the message names the file, record, field or key, and what was found."""


class InputNotFoundError(UserError, FileNotFoundError):
    """An input file or folder the user named does not exist (also a ``FileNotFoundError``)."""


class OutputExistsError(UserError, FileExistsError):
    """An output path the user named is taken by something a job must not replace (also a
    ``FileExistsError``)."""


def utf8_error(source: str, data: bytes, exc: UnicodeDecodeError, line_offset: int = 0) -> UserError:
    """A :class:`UserError` naming ``source`` and the line of the first byte that is not UTF-8.

    Args:
        source: the file name to report.
        data: the bytes that failed to decode (the whole file or one line).
        exc: the decoding error raised for ``data``.
        line_offset: lines before ``data`` in the file (0 when ``data`` is the whole file).
    """
    line = line_offset + data[: exc.start].count(b"\n") + 1
    return UserError(f"{source}:{line}: not valid UTF-8 at line {line} (got byte "
                     f"{data[exc.start:exc.start + 1]!r}); save the file as UTF-8")


__all__ += ["InputNotFoundError", "OutputExistsError", "utf8_error"]
