"""`Sparse`: a statement whose None parameters are written into its text as ``NULL``.

Python's `sqlite3` binds an int, a float or a str at once, but hands any other value (None
included, and a `str` subclass such as a `StrEnum` member) to its adapter registry first,
which looks for an adapter and then for ``__adapt__`` / ``__conform__`` (an
``AttributeError`` raised and cleared): about ten times the cost of binding an int. A step
or call row has a dozen columns that are usually NULL, so `SqliteTx` writes them with
`Sparse`: the statement's text with ``NULL`` in place of each None parameter (one text per
pattern of Nones, kept), and only the other parameters bound. Enum members are passed as
their plain ``str`` values by the caller.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

__all__ = ["Sparse"]

_KEPT = 256
"""Texts kept per statement (patterns of Nones; a few in practice)."""


class Sparse:
    """One parameterized statement (``?`` placeholders, none inside a literal), run with
    its None parameters written as ``NULL``.

    Args:
        sql: The statement.
    """

    __slots__ = ("_parts", "_texts")

    def __init__(self, sql: str) -> None:
        self._parts = sql.split("?")
        self._texts: dict[tuple[bool, ...], str] = {}

    def execute(
        self, conn: sqlite3.Connection | sqlite3.Cursor, values: Sequence[Any]
    ) -> sqlite3.Cursor:
        """Run the statement on `conn` (a connection, or a cursor to reuse) with `values`
        (one per placeholder, in order).

        Raises:
            ValueError: `values` has not one value per placeholder.
            sqlite3.Error: As `sqlite3.Connection.execute`.
        """
        nones = tuple([v is None for v in values])
        text = self._texts.get(nones)
        if text is None:
            text = self._text(nones)
        return conn.execute(text, [v for v in values if v is not None])

    def _text(self, nones: tuple[bool, ...]) -> str:
        parts = self._parts
        if len(nones) != len(parts) - 1:
            raise ValueError(
                f"the statement has {len(parts) - 1} placeholders, got {len(nones)} values"
            )
        pieces = [parts[0]]
        for none, part in zip(nones, parts[1:], strict=True):
            pieces.append("NULL" if none else "?")
            pieces.append(part)
        text = "".join(pieces)
        if len(self._texts) < _KEPT:
            self._texts[nones] = text
        return text
