"""A group-commit batch's transaction: its verbs in one ``BEGIN IMMEDIATE … COMMIT``.

Synchronous, on whichever thread runs the batch (`agentq.store.sqlite.batch`): `transact` on
the connection's thread, waiting for the write lock; `try_transact` on the event loop's
thread (`agentq.store.sqlite.inline`), only if the lock is free at once. Either way a verb
that raises is rolled back alone and gets its exception, and the others commit together.
`read` runs a read queued in a batch after its transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Literal

from agentq.errors import StoreError
from agentq.store.sqlite.tx import SqliteTx, begin, rollback

__all__ = ["Outcome", "read", "store_error", "transact", "try_transact"]

Outcome = tuple[bool, Any]
"""``(True, result)`` or ``(False, exception)`` for one verb of a batch."""

Verb = Callable[[SqliteTx], Any]


def store_error(exc: BaseException) -> BaseException:
    """Wrap a sqlite3 error in `StoreError` (``__cause__`` set); return others unchanged."""
    if isinstance(exc, sqlite3.Error):
        wrapped = StoreError(f"SQLite failed: {exc}")
        wrapped.__cause__ = exc
        return wrapped
    return exc


def transact(
    conn: sqlite3.Connection, fns: Sequence[Verb], savepoints: bool = False
) -> list[Outcome]:
    """Run a batch of verbs in one ``BEGIN IMMEDIATE … COMMIT``; one outcome per verb.

    A verb that raises is rolled back alone and gets its exception; the others commit
    together. If the transaction itself fails (BEGIN, COMMIT), no verb is committed and each
    gets a `StoreError`, except those already refused, whose refusal stands.

    Savepoints only when needed: a rule refuses before it writes (see
    `agentq.store.rules.tx`), so a verb that raised without changing a row (``total_changes``
    unchanged) has nothing to roll back. Only if a verb of a batch raised after writing is
    the transaction rolled back and the batch run again with a SAVEPOINT around each verb
    (rules are functions of the transaction's rows and their arguments: running one again
    gives the same result); `savepoints` starts with that run (the batch ran once already).
    """
    outcomes = None if savepoints else _run(conn, fns, savepoints=False)
    if outcomes is None:
        outcomes = _run(conn, fns, savepoints=True)
        assert outcomes is not None  # with savepoints, a verb is rolled back alone
    return outcomes


def try_transact(
    conn: sqlite3.Connection, fns: Sequence[Verb]
) -> list[Outcome] | Literal["busy", "savepoints"]:
    """`transact` without waiting for the lock: ``BEGIN IMMEDIATE`` is tried once (`conn`
    has a busy timeout of zero).

    Returns:
        One outcome per verb; or, nothing committed, ``"busy"`` if another connection holds
        the write lock (nothing ran), ``"savepoints"`` if a verb raised after writing (rolled
        back: run the batch again with ``transact(conn, fns, savepoints=True)``).
    """
    cur = conn.cursor()  # one for the batch's own statements and its verbs' (`SqliteTx`)
    try:
        began = begin(cur, wait=False)
    except sqlite3.Error as exc:
        return _failed(conn, [], len(fns), exc)
    if not began:
        return "busy"
    outcomes = _run(conn, fns, savepoints=False, begun=cur)
    return "savepoints" if outcomes is None else outcomes


def _run(
    conn: sqlite3.Connection,
    fns: Sequence[Verb],
    savepoints: bool,
    begun: sqlite3.Cursor | None = None,
) -> list[Outcome] | None:
    """`transact` with or without a SAVEPOINT per verb, the transaction begun already (on
    the cursor `begun`) or not; None (rolled back) when, without savepoints, a verb of a
    batch raised after writing. One cursor runs the batch's statements and its verbs'."""
    outcomes: list[Outcome] = []
    single = len(fns) == 1
    cur = conn.cursor() if begun is None else begun
    try:
        if begun is None:
            begin(cur)
        for fn in fns:
            tx = SqliteTx(conn, cur)
            if savepoints:
                cur.execute("SAVEPOINT agentq_verb")
            changes = conn.total_changes
            try:
                value = fn(tx)
            except Exception as exc:
                if single:
                    rollback(conn)
                    return [(False, store_error(exc))]
                if savepoints:
                    cur.execute("ROLLBACK TO agentq_verb")
                elif conn.total_changes != changes:
                    rollback(conn)
                    return None
                outcomes.append((False, store_error(exc)))
            else:
                outcomes.append((True, value))
            if savepoints:
                cur.execute("RELEASE agentq_verb")
        cur.execute("COMMIT")
        return outcomes
    except BaseException as exc:
        return _failed(conn, outcomes, len(fns), exc)


def _failed(
    conn: sqlite3.Connection, outcomes: list[Outcome], count: int, exc: BaseException
) -> list[Outcome]:
    """The outcomes of a batch whose transaction failed: refusals stand, the rest fail."""
    rollback(conn)
    failed = []
    for i in range(count):
        ok, value = outcomes[i] if i < len(outcomes) else (True, None)
        refused = not ok and not isinstance(value, StoreError)
        failed.append((False, value if refused else store_error(exc)))
    return failed


def read(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any]) -> Outcome:
    """Run a read queued in a batch (after its transaction); errors become outcomes."""
    try:
        return True, fn(conn)
    except Exception as exc:
        return False, store_error(exc)
