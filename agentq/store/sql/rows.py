"""How agentq's rows look in SQL: the column lists and turning a result row into a value.

`WORKFLOW_SELECT` reads a workflow row (its ``updated_at`` and ``last_seq`` come from its latest
event, one index seek); `STEP_COLUMNS`, `CALL_COLUMNS` and `EVENT_TABLE_COLUMNS` are the column
lists of the ``steps``, ``calls`` and ``events`` tables in the order `step_row`, `call_row` and
`event_of` read them. JSON columns are decoded here; the tables themselves are in the
``schema.sql`` of each SQL store (``agentq/store/sqlite/``, ``agentq/store/postgres/``),
which name them alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agentq.codec import decode
from agentq.events import Event, EventKind, utc
from agentq.outcomes import ErrorInfo
from agentq.store.contract.rows import (
    CallKind,
    CallRow,
    CallState,
    StepRow,
    StepState,
    WorkflowRow,
    WorkflowState,
)
from agentq.store.rules.projection import replay
from agentq.store.rules.tx import Tx

__all__ = [
    "rewrite_projection",
    "CALL_COLUMNS",
    "EVENT_TABLE_COLUMNS",
    "STEP_COLUMNS",
    "STEP_STATES",
    "WORKFLOW_SELECT",
    "WORKFLOW_STATES",
    "WORKFLOW_WIDTH",
    "call_row",
    "event_of",
    "step_names",
    "step_row",
    "workflow_row",
]

STEP_COLUMNS = (
    "workflow_id, step_index, step_name, state, attempt, worker_id, lease_token, "
    "lease_expires_at, output, reason, error, resume_input, resumed, retry_at, started_at, "
    "finished_at, recoveries, wait_key, wait_details, wait_deadline"
)
"""The ``steps`` columns, in `StepRow` order."""
CALL_COLUMNS = (
    "workflow_id, call_key, kind, step_index, state, fingerprint, lane, attempt, label, usage, "
    "output, reason, error, details, deadline, started_at, finished_at, duration, runs, "
    "last_seq, first_seq"
)
"""The ``calls`` columns, in `CallRow` order."""
EVENT_TABLE_COLUMNS = "seq, at, workflow_id, step_index, step_name, kind, attempt, worker_id, data"
"""The ``events`` columns that `event_of` reads."""
WORKFLOW_SELECT = (
    "SELECT w.workflow_id, w.state, w.step_names, w.input, w.reason, w.created_at, e.at, "
    "e.seq, w.definition, w.deadline FROM workflows AS w JOIN events AS e ON e.seq = "
    "(SELECT seq FROM events WHERE workflow_id = w.workflow_id ORDER BY seq DESC LIMIT 1)"
)
"""Selects workflow rows (add ``WHERE`` / ``ORDER BY``); `workflow_row` reads each."""
WORKFLOW_WIDTH = 10
"""How many columns `WORKFLOW_SELECT` reads (the columns after them are a join's)."""

WORKFLOW_STATES = {s.value: s for s in WorkflowState}
"""`WorkflowState` by its stored value."""
STEP_STATES = {s.value: s for s in StepState}
"""`StepState` by its stored value."""
_CALL_KINDS = {k.value: k for k in CallKind}
_CALL_STATES = {s.value: s for s in CallState}
_KINDS = {k.value: k for k in EventKind}
_NAMES: dict[str, tuple[str, ...]] = {}  # decoded step_names JSON, by text (few distinct)


def step_names(text: str) -> tuple[str, ...]:
    """The ``step_names`` column (JSON) as a tuple; decoded once per distinct text."""
    names = _NAMES.get(text)
    if names is None:
        names = tuple(decode(text))
        if len(_NAMES) < 1024:
            _NAMES[text] = names
    return names


def workflow_row(r: Sequence[Any]) -> WorkflowRow:
    """Build a `WorkflowRow` from a row of `WORKFLOW_SELECT`."""
    return WorkflowRow(
        r[0],
        WORKFLOW_STATES[r[1]],
        step_names(r[2]),
        None if r[3] == "null" else decode(r[3]),
        r[4],
        r[5],
        r[6],
        r[7],
        r[8],
        r[9],
    )


def _error(text: str | None) -> ErrorInfo | None:
    if text is None:
        return None
    value = decode(text)
    return ErrorInfo(value["type"], value["message"], value["traceback"])


def step_row(r: Sequence[Any]) -> StepRow:
    """Build a `StepRow` from a row of `STEP_COLUMNS`."""
    return StepRow(
        r[0],
        r[1],
        r[2],
        STEP_STATES[r[3]],
        r[4],
        r[5],
        r[6],
        r[7],
        decode(r[8]),
        r[9],
        _error(r[10]),
        decode(r[11]),
        bool(r[12]),
        r[13],
        r[14],
        r[15],
        r[16],
        r[17],
        decode(r[18]),
        r[19],
    )


def call_row(r: Sequence[Any]) -> CallRow:
    """Build a `CallRow` from a row of `CALL_COLUMNS`."""
    loads = decode  # each JSON column: NULL (None) without a call
    label, usage, output, error, details = r[8], r[9], r[10], r[12], r[13]
    return CallRow(
        r[0],
        r[1],
        _CALL_KINDS[r[2]],
        r[3],
        _CALL_STATES[r[4]],
        r[5],
        r[6],
        r[7],
        None if label is None else loads(label),
        None if usage is None else loads(usage),
        None if output is None else loads(output),
        r[11],
        None if error is None else _error(error),
        None if details is None else loads(details),
        r[14],
        r[15],
        r[16],
        r[17],
        r[18],
        r[19],
        r[20],
    )


def event_of(r: Sequence[Any]) -> Event:
    """Build an `Event` from a row of `EVENT_TABLE_COLUMNS`."""
    return Event(r[0], utc(r[1]), _KINDS[r[5]], r[2], r[3], r[4], r[6], r[7], decode(r[8]))


def rewrite_projection(execute: Callable[[str], Any], rows: Iterable[Any], tx: Tx) -> None:
    """Replace the ``workflows``, ``steps``, ``calls`` and ``messages`` tables by a replay of
    the log.

    Shared by both SQL stores, inside their transaction.

    Args:
        execute: Runs one SQL statement on the transaction's connection.
        rows: The ``events`` rows, every one, by ``seq`` (``EVENT_TABLE_COLUMNS``).
        tx: The store's `Tx`, whose ``put_*`` write the replayed rows.
    """
    rebuilt = replay(event_of(r) for r in rows)
    for table in ("messages", "calls", "steps", "workflows"):
        execute(f"DELETE FROM {table}")
    for started_seq, projected in rebuilt:
        assert projected.workflow is not None
        tx.put_workflow(projected.workflow, started_seq)
        for index in sorted(projected.steps):
            tx.put_step(projected.steps[index], True)
        for call in projected.calls.values():
            tx.put_call(call, True)
        for message in projected.messages.values():
            tx.put_message(message, True)
