"""The event log, the steps and calls projections and the queue's lanes as DataFrames.

Needs the ``notebook`` extra (``pip install 'agentq[notebook]'``); pandas is imported when a
function is first called, so ``import agentq`` never needs it.

Every function is a coroutine: in a notebook cell write ``events = await events_frame(store)``
(Jupyter runs cells on its own event loop, so top-level ``await`` works). Each frame has fixed
columns and dtypes, also when it is empty, so recipes written against a frame keep working:

- times are ``datetime64[ns, UTC]`` (rounded to the microsecond), durations ``timedelta64[ns]``;
- text is pandas' nullable ``string`` dtype (python storage, so the dtype is the same with or
  without pyarrow), missing values are ``<NA>``;
- integers that can be missing are nullable ``Int64``;
- JSON payloads (``output``, ``input``, ``label``, ``usage``) are decoded into Python objects
  (``object`` dtype), None when absent.

Frames are built from the store's read side (`DurableStore.event_rows` returns plain tuples,
selected in SQL by `SqliteStore`), column by column, never from `Event` objects; the column
mechanism is `agentq._frame_columns`. `group_frame` (a run group's members) is built in
`agentq._group_frame`. Recipes (retries per step, time waiting for approval,
failure reasons, per-lane throughput, cost per tool, calls in doubt) are in ``docs/frames.md``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentq._frame_columns import categorical as _categorical
from agentq._frame_columns import decoded as _decoded
from agentq._frame_columns import gc_paused as _gc_paused
from agentq._frame_columns import modules as _modules
from agentq._frame_columns import nullable_ints as _nullable_ints
from agentq._frame_columns import text as _text
from agentq._frame_columns import utc as _utc
from agentq._group_frame import GROUP_DTYPES, group_frame
from agentq.events import EventKind
from agentq.queue import LANE_ORDER, LaneStats
from agentq.store import EVENT_COLUMNS, CallKind, CallRow, CallState, DurableStore, StepState

if TYPE_CHECKING:
    import pandas as pd

    from agentq.queue import Queue

__all__ = [
    "CALL_DTYPES",
    "EVENT_DTYPES",
    "GROUP_DTYPES",
    "LANE_DTYPES",
    "STEP_DTYPES",
    "calls_frame",
    "events_frame",
    "group_frame",
    "lanes_frame",
    "steps_frame",
]

_UTC = "datetime64[ns, UTC]"

EVENT_DTYPES: dict[str, str] = {
    "seq": "int64",
    "at": _UTC,
    "workflow_id": "string",
    "step_index": "Int64",
    "step_name": "string",
    "kind": "category",
    "attempt": "Int64",
    "worker_id": "string",
    "reason": "string",
    "output": "object",
    "input": "object",
    "key": "string",
    "label": "object",
    "forked_from": "string",
}
"""Columns of `events_frame`, in order, with their dtypes (``kind``'s categories are every
`EventKind` value, in declaration order)."""

STEP_DTYPES: dict[str, str] = {
    "workflow_id": "string",
    "definition": "string",
    "step_index": "int64",
    "step_name": "string",
    "status": "category",
    "attempt": "int64",
    "recoveries": "int64",
    "worker_id": "string",
    "lease_expires_at": _UTC,
    "started_at": _UTC,
    "finished_at": _UTC,
    "duration": "timedelta64[ns]",
    "reason": "string",
    "error": "string",
    "output": "object",
}
"""Columns of `steps_frame`, in order, with their dtypes (``status``'s categories are every
`StepState` value, in declaration order)."""

LANE_DTYPES: dict[str, str] = {
    "priority": "category",
    "capacity": "int64",
    "permits": "int64",
    "queued": "int64",
    "running": "int64",
    "completed": "int64",
    "failed": "int64",
    "cache_hits": "int64",
    "joins": "int64",
    "at": _UTC,
}
"""Columns of `lanes_frame`, in order, with their dtypes (``priority``'s categories are the
`Priority` values, highest first)."""

CALL_DTYPES: dict[str, str] = {
    "workflow_id": "string",
    "step_index": "int64",
    "key": "string",
    "kind": "category",
    "label": "object",
    "label_kind": "string",
    "tool": "string",
    "lane": "string",
    "attempt": "int64",
    "status": "category",
    "runs": "int64",
    "started_at": _UTC,
    "finished_at": _UTC,
    "duration": "float64",
    "usage": "object",
    "output": "object",
    "reason": "string",
    "error": "string",
    "details": "object",
    "deadline": _UTC,
}
"""Columns of `calls_frame`, in order, with their dtypes (``kind``'s categories are the
`CallKind` values, ``status``'s every `CallState` value, in declaration order)."""

assert tuple(EVENT_DTYPES) == EVENT_COLUMNS

_KINDS = [kind.value for kind in EventKind]
_STATES = [state.value for state in StepState]
def _events_from_rows(rows: Sequence[tuple[Any, ...]]) -> pd.DataFrame:
    pdm, npm = _modules()
    width = len(EVENT_COLUMNS)
    with _gc_paused():
        columns: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [()] * width
        count = len(rows)
        data = {
            "seq": pdm.Series(npm.fromiter(columns[0], dtype=npm.int64, count=count), copy=False),
            "at": _utc(npm, pdm, columns[1]),
            "workflow_id": _text(pdm, npm, columns[2]),
            "step_index": _nullable_ints(pdm, npm, columns[3]),
            "step_name": _text(pdm, npm, columns[4]),
            "kind": _categorical(pdm, npm, columns[5], _KINDS),
            "attempt": _nullable_ints(pdm, npm, columns[6]),
            "worker_id": _text(pdm, npm, columns[7]),
            "reason": _text(pdm, npm, columns[8]),
            "output": _decoded(pdm, npm, columns[9]),
            "input": _decoded(pdm, npm, columns[10]),
            "key": _text(pdm, npm, columns[11]),
            "label": _decoded(pdm, npm, columns[12]),
            "forked_from": _text(pdm, npm, columns[13]),
        }
        frame: pd.DataFrame = pdm.DataFrame(data, copy=False)
    return frame


async def events_frame(
    store: DurableStore, workflow_id: str | None = None, since: int | None = None
) -> pd.DataFrame:
    """Return the event log (of one workflow, or all) as a DataFrame, one row per event.

    Read with one `DurableStore.event_rows` call (SQL for `SqliteStore`); pass `since` to read
    only what was appended after a sequence number you saw, e.g. ``since=int(ev.seq.max())``.

    Args:
        store: Any `DurableStore`.
        workflow_id: Only this workflow's events; None for the whole log.
        since: Only events with ``seq > since``; None (or 0) for all.

    Returns:
        Rows ordered by ``seq``, columns (dtypes) as in `EVENT_DTYPES`: ``seq`` (int64),
        ``at`` (datetime64[ns, UTC]), ``workflow_id`` (string), ``step_index`` (Int64, <NA>
        for workflow events), ``step_name`` (string), ``kind`` (category of every `EventKind`
        value, so ``ev.kind == "StepFailed"`` works), ``attempt`` (Int64), ``worker_id``,
        ``reason`` (string), ``output`` and ``input`` (decoded JSON, None when absent),
        ``key`` (string: the durable call's or wait's key, for call events, `WaitTimedOut`
        and a keyed wait's `StepWaiting` / `StepResumed`) and ``label`` (the call's label,
        decoded, on its call events; None otherwise), ``forked_from`` (string: on a fork's
        `WorkflowForked` and on the copies of its parent's history, the parent's id).

    Raises:
        MissingExtraError: pandas is not installed (``pip install 'agentq[notebook]'``).
        StoreError: The store failed.
        ValueError: `since` is negative.

    Must be awaited on the event loop the store belongs to (a notebook cell's loop).

    Example:
        >>> ev = await events_frame(store)
        >>> ev[ev.kind == "StepFailed"].reason.value_counts()
    """
    _modules()  # fail before touching the store when pandas is missing
    after = 0 if since is None else int(since)
    if after < 0:
        raise ValueError(f"since must be a sequence number >= 0, got {since!r}")
    rows = await store.event_rows(workflow_id, after_seq=after)
    return _events_from_rows(rows)


async def steps_frame(store: DurableStore) -> pd.DataFrame:
    """Return the ``steps`` projection as a DataFrame, one row per workflow step.

    Args:
        store: Any `DurableStore`.

    Returns:
        Rows by workflow then step index, columns (dtypes) as in `STEP_DTYPES`:
        ``workflow_id``, ``definition`` (the name of the `WorkflowDef` the workflow was
        made from; <NA> for a plain workflow), ``step_index`` (int64), ``step_name``,
        ``status`` (category of every
        `StepState` value: pending, leased, waiting, completed, failed), ``attempt`` (int64,
        attempts since the step started or was last resumed, lost ones not counted),
        ``recoveries`` (int64, attempts lost to crashes), ``worker_id`` (the lease holder
        or last holder), ``lease_expires_at``, ``started_at`` (first attempt),
        ``finished_at`` (completion or final failure; all datetime64[ns, UTC]), ``duration``
        (``finished_at - started_at``, timedelta64[ns]; it includes time spent waiting for
        input and between retries; NaT while unfinished), ``reason`` (why it waits or
        failed), ``error`` (``"Type: message"`` of the last failed attempt) and ``output``
        (decoded JSON).

    Raises:
        MissingExtraError: pandas is not installed.
        StoreError: The store failed.
    """
    pdm, npm = _modules()
    rows = await store.step_rows()
    made_from = {w.workflow_id: w.definition for w in await store.workflows()}
    with _gc_paused():
        started = _utc(npm, pdm, [r.started_at for r in rows])
        finished = _utc(npm, pdm, [r.finished_at for r in rows])
        data = {
            "workflow_id": _text(pdm, npm, [r.workflow_id for r in rows]),
            "definition": _text(pdm, npm, [made_from.get(r.workflow_id) for r in rows]),
            "step_index": pdm.Series([r.step_index for r in rows], dtype="int64"),
            "step_name": _text(pdm, npm, [r.step_name for r in rows]),
            "status": _categorical(pdm, npm, [r.state.value for r in rows], _STATES),
            "attempt": pdm.Series([r.attempt for r in rows], dtype="int64"),
            "recoveries": pdm.Series([r.recoveries for r in rows], dtype="int64"),
            "worker_id": _text(pdm, npm, [r.worker_id for r in rows]),
            "lease_expires_at": _utc(npm, pdm, [r.lease_expires_at for r in rows]),
            "started_at": started,
            "finished_at": finished,
            "duration": finished - started,
            "reason": _text(pdm, npm, [r.reason for r in rows]),
            "error": _text(pdm, npm, [None if r.error is None else str(r.error) for r in rows]),
            "output": pdm.Series([r.output for r in rows], dtype=object),
        }
        frame: pd.DataFrame = pdm.DataFrame(data, copy=False)
    return frame


async def lanes_frame(queue: Queue) -> pd.DataFrame:
    """Return a snapshot of the queue's lanes (`Queue.stats`) as a DataFrame, one row a lane.

    A coroutine like the other frames (``await lanes_frame(queue)``), though it does not wait.
    Take two snapshots to measure throughput (see ``docs/frames.md``).

    Args:
        queue: The `Queue`.

    Returns:
        One row per lane, highest priority first; columns (dtypes) as in `LANE_DTYPES`:
        ``priority`` (category), ``capacity``, ``permits``, ``queued``, ``running``,
        ``completed``, ``failed``, ``cache_hits``, ``joins`` (int64, counted since the queue
        started) and ``at`` (when the snapshot was taken, datetime64[ns, UTC], from the
        queue's clock when it has one).

    Raises:
        MissingExtraError: pandas is not installed.
    """
    pdm, npm = _modules()
    now = queue.clock.time()
    lanes: Sequence[LaneStats] = tuple(queue.stats().lanes)
    data: dict[str, pd.Series] = {
        "priority": _categorical(
            pdm, npm, [str(lane.priority) for lane in lanes], [p.value for p in LANE_ORDER]
        )
    }
    for name in tuple(LANE_DTYPES)[1:-1]:
        data[name] = pdm.Series([int(getattr(lane, name)) for lane in lanes], dtype="int64")
    data["at"] = _utc(npm, pdm, [now] * len(lanes))
    frame: pd.DataFrame = pdm.DataFrame(data, copy=False)
    return frame


_CALL_KINDS = [kind.value for kind in CallKind]
_CALL_STATES = [state.value for state in CallState]


def _label_member(label: dict[str, Any] | None, name: str) -> str | None:
    """``label[name]`` as text (JSON for a non-string value), None when absent."""
    if not label:
        return None
    value = label.get(name)
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


async def calls_frame(store: DurableStore, workflow_id: str | None = None) -> pd.DataFrame:
    """Return the ``calls`` projection as a DataFrame: one row per durable call or wait.

    Read with one `DurableStore.calls` call. A call (``ctx.call``) has one row per key however
    often it ran (``runs`` counts its `CallStarted` events); a wait (``ctx.wait_for_input``)
    has one row per key.

    Args:
        store: Any `DurableStore`.
        workflow_id: Only this workflow's calls and waits; None for every workflow.

    Returns:
        Rows in the order their keys were first recorded, columns (dtypes) as in
        `CALL_DTYPES`: ``workflow_id``, ``step_index`` (int64: the step of its latest start
        or wait), ``key`` (string), ``kind`` (category: call, wait), ``label`` (the label
        object as given to ``ctx.call``, decoded: a dict, or None), ``label_kind`` and
        ``tool`` (string: ``label["kind"]`` and ``label["tool"]``, <NA> when absent, JSON
        text when not a string), ``lane`` (string), ``attempt`` (int64: the step attempt of
        its latest event), ``status`` (category of every `CallState` value: started,
        completed, failed for calls, waiting, answered, timed_out for waits; a call
        ``started`` and not running is *in doubt*), ``runs`` (int64), ``started_at``,
        ``finished_at`` (datetime64[ns, UTC], NaT while open), ``duration`` (float64
        seconds of the latest run, as the caller measured it, or of the wait; NaN while
        open), ``usage`` (the usage object recorded on completion, or None), ``output`` (a
        completed call's output, an answered wait's input; decoded JSON), ``reason`` (a
        failed call's reason, a wait's question), ``error`` (``"Type: message"`` of a
        failed call), ``details`` (a wait's details object) and ``deadline`` (a wait's
        deadline, datetime64[ns, UTC]).

    Raises:
        MissingExtraError: pandas is not installed (``pip install 'agentq[notebook]'``).
        InvalidKeyError: `workflow_id` is not a valid id.
        StoreError: The store failed.

    Example:
        >>> calls = await calls_frame(store)
        >>> calls[calls.status == "started"]          # calls in doubt (after a crash)
    """
    pdm, npm = _modules()  # fail before touching the store when pandas is missing
    rows: Sequence[CallRow] = await store.calls(workflow_id)
    with _gc_paused():
        data = {
            "workflow_id": _text(pdm, npm, [r.workflow_id for r in rows]),
            "step_index": pdm.Series([r.step_index for r in rows], dtype="int64"),
            "key": _text(pdm, npm, [r.key for r in rows]),
            "kind": _categorical(pdm, npm, [str(r.kind) for r in rows], _CALL_KINDS),
            "label": pdm.Series([r.label for r in rows], dtype=object),
            "label_kind": _text(pdm, npm, [_label_member(r.label, "kind") for r in rows]),
            "tool": _text(pdm, npm, [_label_member(r.label, "tool") for r in rows]),
            "lane": _text(pdm, npm, [r.lane for r in rows]),
            "attempt": pdm.Series([r.attempt for r in rows], dtype="int64"),
            "status": _categorical(pdm, npm, [str(r.state) for r in rows], _CALL_STATES),
            "runs": pdm.Series([r.runs for r in rows], dtype="int64"),
            "started_at": _utc(npm, pdm, [r.started_at for r in rows]),
            "finished_at": _utc(npm, pdm, [r.finished_at for r in rows]),
            "duration": pdm.Series(
                [npm.nan if r.duration is None else r.duration for r in rows], dtype="float64"
            ),
            "usage": pdm.Series([r.usage for r in rows], dtype=object),
            "output": pdm.Series([r.output for r in rows], dtype=object),
            "reason": _text(pdm, npm, [r.reason for r in rows]),
            "error": _text(pdm, npm, [None if r.error is None else str(r.error) for r in rows]),
            "details": pdm.Series([r.details for r in rows], dtype=object),
            "deadline": _utc(npm, pdm, [r.deadline for r in rows]),
        }
        frame: pd.DataFrame = pdm.DataFrame(data, copy=False)
    return frame
