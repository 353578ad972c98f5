"""Compact read-only string columns for a loaded index's passages, facts and entity names.

A million-passage index holds ~9M strings; as Python objects (a list of ``str``, a ``Passage`` per
passage) they take 2.5 GB, about twice their UTF-8 bytes. A :class:`TextColumn` keeps one UTF-8
buffer and int64 offsets and decodes an item when it is read, so the texts of a loaded index cost
their bytes plus 8 per string. Both columns are immutable sequences: code that grows an index builds
lists (``list(column) + new``, or ``column + new``, which gives a list).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from hpengine.graph._corpus import Passage

#: offsets converted to Python ints at a time while iterating (bounds a temporary list)
_ITER_BLOCK = 1 << 16


class _ListLike(Sequence):
    """A read-only sequence that compares and concatenates like a list: equal to any sequence (not
    a ``str``) of equal items in order, unhashable, and ``+`` with a sequence gives a list."""

    __slots__ = ()

    def _same(self, other) -> bool | None:
        """A faster answer for ``self == other`` (same column type), None to compare item by item."""
        return None

    def __eq__(self, other) -> bool:
        fast = self._same(other)
        if fast is not None:
            return fast
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # list semantics: equal to lists, so not hashable

    def __add__(self, other) -> list:
        return list(self) + list(other)

    def __radd__(self, other) -> list:
        return list(other) + list(self)


class TextColumn(_ListLike):
    """``n`` strings as one UTF-8 buffer and int64 offsets ``[n + 1]``.

    Indexing with an int decodes one string; a slice gives a list. Equal to any sequence (not a
    ``str``) of the same strings in the same order.

    Example:
        >>> col = TextColumn.from_strings(["Paris", "Zürich", ""])
        >>> len(col), col[1], col[-1], col[:2], col == ["Paris", "Zürich", ""]
        (3, 'Zürich', '', ['Paris', 'Zürich'], True)
    """

    __slots__ = ("_data", "_offsets")

    def __init__(self, data: bytes, offsets: np.ndarray):
        if offsets.ndim != 1 or offsets.shape[0] < 1 or int(offsets[0]) != 0 or int(offsets[-1]) != len(data):
            raise ValueError(f"offsets must be [n + 1], from 0 to len(data) = {len(data)}")
        self._data = data
        self._offsets = offsets

    @classmethod
    def from_strings(cls, strings: Iterable[str]) -> "TextColumn":
        """A column of ``strings`` (each must be a ``str``)."""
        encoded = list(map(str.encode, strings))
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
        return cls(b"".join(encoded), offsets)

    @classmethod
    def concat(cls, columns: Sequence["TextColumn"]) -> "TextColumn":
        """The strings of ``columns``, one after the other."""
        if len(columns) == 1:
            return columns[0]
        shifts = np.cumsum([0] + [len(c._data) for c in columns[:-1]])
        offsets = np.concatenate([columns[0]._offsets[:1]] + [c._offsets[1:] + s for c, s in zip(columns, shifts)])
        return cls(b"".join(c._data for c in columns), offsets)

    @property
    def nbytes(self) -> int:
        """Bytes held: the UTF-8 buffer and the offsets."""
        return len(self._data) + self._offsets.nbytes

    def __len__(self) -> int:
        return self._offsets.shape[0] - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._item(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        j = int(i)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"TextColumn index {i} out of range for {n} strings")
        return self._item(j)

    def _item(self, j: int) -> str:
        return self._data[int(self._offsets[j]):int(self._offsets[j + 1])].decode()

    def __iter__(self) -> Iterator[str]:
        data = self._data
        for lo in range(0, len(self), _ITER_BLOCK):
            bounds = self._offsets[lo:lo + _ITER_BLOCK + 1].tolist()
            for a, b in zip(bounds[:-1], bounds[1:]):
                yield data[a:b].decode()

    def _same(self, other) -> bool | None:
        if isinstance(other, TextColumn):
            return bool(np.array_equal(self._offsets, other._offsets)) and self._data == other._data
        return None

    def __repr__(self) -> str:
        return f"TextColumn({len(self)} strings, {len(self._data):,} bytes)"


class PassageColumn(_ListLike):
    """Passages as two :class:`TextColumn` (titles, texts); items are :class:`~hpengine.graph.Passage`.

    Example:
        >>> col = PassageColumn.from_passages([Passage("A", "a text"), Passage("B", "b text")])
        >>> col[1], len(col), col == [Passage("A", "a text"), Passage("B", "b text")]
        (Passage(title='B', text='b text'), 2, True)
    """

    __slots__ = ("titles", "texts")

    def __init__(self, titles: TextColumn, texts: TextColumn):
        if len(titles) != len(texts):
            raise ValueError(f"{len(titles)} titles but {len(texts)} texts")
        self.titles = titles
        self.texts = texts

    @classmethod
    def from_passages(cls, passages: Iterable[Passage]) -> "PassageColumn":
        passages = list(passages)
        return cls(TextColumn.from_strings(p.title for p in passages),
                   TextColumn.from_strings(p.text for p in passages))

    @classmethod
    def concat(cls, columns: Sequence["PassageColumn"]) -> "PassageColumn":
        return cls(TextColumn.concat([c.titles for c in columns]), TextColumn.concat([c.texts for c in columns]))

    @property
    def nbytes(self) -> int:
        return self.titles.nbytes + self.texts.nbytes

    def __len__(self) -> int:
        return len(self.titles)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [Passage(t, x) for t, x in zip(self.titles[i], self.texts[i])]
        return Passage(self.titles[i], self.texts[i])

    def __iter__(self) -> Iterator[Passage]:
        return (Passage(t, x) for t, x in zip(self.titles, self.texts))

    def _same(self, other) -> bool | None:
        if isinstance(other, PassageColumn):
            return self.titles == other.titles and self.texts == other.texts
        return None

    def __repr__(self) -> str:
        return f"PassageColumn({len(self)} passages, {self.nbytes:,} bytes)"


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``; nothing elsewhere).

    Reading ``texts.json`` makes millions of short-lived Python strings; once they are packed into
    columns and freed, glibc keeps most of their pages (1 GB at a million passages) unless asked.
    """
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl): nothing to ask
            pass


__all__ = ["PassageColumn", "TextColumn", "release_freed_memory"]
