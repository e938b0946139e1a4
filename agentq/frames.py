"""The event log, the steps projection and the queue's lanes as pandas DataFrames.

Needs the ``notebook`` extra (``pip install 'agentq[notebook]'``); pandas is imported when a
function is first called, so ``import agentq`` never needs it.

Every function is a coroutine: in a notebook cell write ``events = await events_frame(store)``
(Jupyter runs cells on its own event loop, so top-level ``await`` works). Each frame has fixed
columns and dtypes, also when it is empty, so recipes written against a frame keep working:

- times are ``datetime64[ns, UTC]`` (rounded to the microsecond), durations ``timedelta64[ns]``;
- text is pandas' nullable ``string`` dtype (python storage, so the dtype is the same with or
  without pyarrow), missing values are ``<NA>``;
- integers that can be missing are nullable ``Int64``;
- JSON payloads (``output``, ``input``) are decoded into Python objects (``object`` dtype).

Frames are built from the store's read side (`DurableStore.event_rows` returns plain tuples,
selected in SQL by `SqliteStore`), column by column, never from `Event` objects. Recipes (retries
per step, time waiting for approval, failure reasons, per-lane throughput) are in
``docs/frames.md``.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from agentq.events import EventKind
from agentq.extras import require
from agentq.queue import LANE_ORDER, LaneStats
from agentq.store import EVENT_COLUMNS, DurableStore, StepState

if TYPE_CHECKING:
    import pandas as pd

    from agentq.queue import Queue

__all__ = [
    "EVENT_DTYPES",
    "LANE_DTYPES",
    "STEP_DTYPES",
    "events_frame",
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
}
"""Columns of `events_frame`, in order, with their dtypes (``kind``'s categories are every
`EventKind` value, in declaration order)."""

STEP_DTYPES: dict[str, str] = {
    "workflow_id": "string",
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

assert tuple(EVENT_DTYPES) == EVENT_COLUMNS

_KINDS = [kind.value for kind in EventKind]
_STATES = [state.value for state in StepState]
_NAT = -(2**63)  # the int64 that numpy reads as NaT


def _modules() -> tuple[Any, Any]:
    """Return the pandas and numpy modules (Any: the runtime modules, typed by the stubs)."""
    return require("pandas", "notebook"), require("numpy", "notebook")


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Turning a million tuples into columns allocates millions of objects; the cyclic collector
    # would walk them over and over (4x slower). Nothing built here holds a reference cycle.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_MAX_SECONDS = 9.2e9  # datetime64[ns] spans about ±9.22e9 s around 1970


def _utc(npm: Any, pdm: Any, seconds: Sequence[float | None]) -> pd.Series:
    """Unix seconds (None = missing) → a ``datetime64[ns, UTC]`` Series, microsecond-exact.

    Times outside what datetime64[ns] can hold (before 1678 or after 2261) become NaT rather
    than wrapping around.
    """
    values = npm.asarray(seconds, dtype=npm.float64) if len(seconds) else npm.empty(0)
    missing = npm.isnan(values) | (npm.abs(values) >= _MAX_SECONDS)
    micros = npm.round(npm.where(missing, 0.0, values) * 1e6).astype(npm.int64)
    nanos = micros * 1000
    nanos[missing] = _NAT
    out: pd.Series = pdm.Series(nanos.view("datetime64[ns]"), copy=False).dt.tz_localize("UTC")
    return out


def _objects(npm: Any, values: Sequence[Any]) -> Any:
    return npm.fromiter(values, dtype=object, count=len(values))


def _text(pdm: Any, npm: Any, values: Sequence[str | None]) -> pd.Series:
    array = pdm.array(_objects(npm, values), dtype=pdm.StringDtype("python"))
    out: pd.Series = pdm.Series(array, copy=False)
    return out


def _nullable_ints(pdm: Any, npm: Any, values: Sequence[int | None]) -> pd.Series:
    objects = _objects(npm, values)
    missing = npm.equal(objects, None)
    ints = npm.where(missing, 0, objects).astype(npm.int64)
    out: pd.Series = pdm.Series(pdm.arrays.IntegerArray(ints, missing), copy=False)
    return out


def _decoded(pdm: Any, npm: Any, texts: Sequence[str | None]) -> pd.Series:
    """JSON texts (None = absent) → an object Series of decoded values."""
    objects = _objects(npm, texts)
    present = ~npm.equal(objects, None)
    count = int(present.sum())
    if count:
        # One json.loads of "[t1,t2,...]" is 3-4x faster than one call per text; the count
        # check catches a text that is not exactly one JSON value.
        values: list[Any] = json.loads("[" + ",".join(objects[present]) + "]")
        if len(values) != count:
            values = [json.loads(t) for t in objects[present]]
        objects[present] = npm.fromiter(values, dtype=object, count=count)
    out: pd.Series = pdm.Series(objects, dtype=object, copy=False)
    return out


class _Codes(dict[str, int]):
    """Category codes by value; -1 (missing) for a value that is not a category."""

    def __missing__(self, key: str) -> int:
        return -1


def _categorical(pdm: Any, npm: Any, values: Sequence[str], categories: list[str]) -> pd.Series:
    codes = _Codes((c, i) for i, c in enumerate(categories))
    array = npm.fromiter(map(codes.__getitem__, values), dtype=npm.int8, count=len(values))
    out: pd.Series = pdm.Series(pdm.Categorical.from_codes(array, categories), copy=False)
    return out


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
        ``reason`` (string), ``output`` and ``input`` (decoded JSON, None when absent).

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
        ``workflow_id``, ``step_index`` (int64), ``step_name``, ``status`` (category of every
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
    with _gc_paused():
        started = _utc(npm, pdm, [r.started_at for r in rows])
        finished = _utc(npm, pdm, [r.finished_at for r in rows])
        data = {
            "workflow_id": _text(pdm, npm, [r.workflow_id for r in rows]),
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

