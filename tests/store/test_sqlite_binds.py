"""`Sparse`: None parameters written as NULL into the statement's text, the rest bound."""

from __future__ import annotations

import itertools
import sqlite3

import pytest

from agentq.store.sqlite.binds import Sparse


def test_every_pattern_of_nones_writes_the_same_row_as_plain_binding() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a, b, c)")
    insert = Sparse("INSERT INTO t (id, a, b, c) VALUES (?, ?, ?, ?)")
    update = Sparse("UPDATE t SET a = ?, b = ?, c = ? WHERE id = ?")
    values = ("x", 2, 3.5)
    patterns = list(itertools.product((False, True), repeat=3))
    for i, nones in enumerate(patterns):
        row = tuple(None if none else v for none, v in zip(nones, values, strict=True))
        insert.execute(conn, (i, *row))
        assert conn.execute("SELECT a, b, c FROM t WHERE id = ?", (i,)).fetchone() == row
        flipped = tuple(None if v is not None else "?" for v in row)  # a '?' value stays a value
        update.execute(conn, (*flipped, i))
        assert conn.execute("SELECT a, b, c FROM t WHERE id = ?", (i,)).fetchone() == flipped


def test_a_wrong_number_of_values_is_refused() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a, b)")
    insert = Sparse("INSERT INTO t (a, b) VALUES (?, ?)")
    with pytest.raises(ValueError, match="2 placeholders, got 3"):
        insert.execute(conn, (1, None, 3))
    with pytest.raises(ValueError, match="2 placeholders, got 1"):
        insert.execute(conn, (1,))
    insert.execute(conn, (1, None))
    assert conn.execute("SELECT a, b FROM t").fetchall() == [(1, None)]
