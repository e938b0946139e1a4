"""Durable call counts per step, folded incrementally from the event log's call events.

Pure Python (no ipywidgets, no I/O): `CallTally.apply` takes the rows `DurableStore.event_rows`
returns (tuples in `EVENT_COLUMNS` order, with the call's ``key``) and keeps, per workflow step
and in total, how many calls there are and where each stands. The step table and the dashboard
render from it, so counting calls costs no query of its own: it reads the rows the widgets
already read. Applying rows in ``seq`` order, in any number of batches, gives the same counts
as applying them all at once.

A call is *running* while the step attempt that started it runs, and *in doubt* once that
attempt ended (the step completed, failed or waited, its worker was declared lost, another
worker took the step over, or the workflow closed) with no outcome recorded for it: it may
have reached the outside world. A worker killed without anyone noticing yet leaves its calls
running until recovery records `WorkerRecovered`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentq.events import EventKind

__all__ = ["CallCounts", "CallTally"]

StepKey = tuple[str, int]
_K = EventKind
_ATTEMPT_ENDS = frozenset({_K.STEP_COMPLETED, _K.STEP_FAILED, _K.STEP_WAITING, _K.WORKER_RECOVERED})
_WORKFLOW_ENDS = frozenset({_K.WORKFLOW_COMPLETED, _K.WORKFLOW_FAILED, _K.WORKFLOW_CANCELLED})
_KEY = 11  # the ``key`` column of an event row


@dataclass(slots=True)
class CallCounts:
    """Durable calls of one step (or of every step seen), as the events tell.

    ``completed + failed + running + in_doubt == calls``.

    Attributes:
        calls: Distinct call keys (of a step: the calls whose latest start it made).
        runs: `CallStarted` events: a call that ran again (after a failure or a crash)
            counts once more.
        completed: Calls whose latest run completed.
        failed: Calls whose latest run failed (a later run may still succeed).
        running: Calls started by an attempt that is still running.
        in_doubt: Calls started by an attempt that ended without their outcome.
        failed_runs: `CallFailed` events.
    """

    calls: int = 0
    runs: int = 0
    completed: int = 0
    failed: int = 0
    running: int = 0
    in_doubt: int = 0
    failed_runs: int = 0


@dataclass(slots=True)
class _Call:
    step: StepKey
    status: str  # a CallCounts attribute: running, completed, failed or in_doubt


class CallTally:
    """Call counts per workflow step and in total, from the event rows applied so far.

    Attributes:
        steps: `CallCounts` by ``(workflow_id, step_index)``, for the steps that made calls.
        totals: The counts over every step.
        last_seq: The highest ``seq`` applied.

    Example:
        >>> tally = CallTally()
        >>> tally.apply(await store.event_rows())
        >>> tally.steps[("order-1", 0)].in_doubt
    """

    def __init__(self) -> None:
        self.steps: dict[StepKey, CallCounts] = {}
        self.totals = CallCounts()
        self.last_seq = 0
        self._calls: dict[tuple[str, str], _Call] = {}
        self._attempt: dict[StepKey, int | None] = {}  # the running attempt of each step
        self._running: dict[StepKey, set[str]] = {}  # keys running in each step

    def apply(self, rows: Iterable[tuple[Any, ...]]) -> int:
        """Fold event rows (``seq``-ordered tuples in `EVENT_COLUMNS` order) into the counts.

        Rows at or below `last_seq` are skipped, so re-reading an overlapping batch is safe.

        Returns:
            How many rows were applied.
        """
        applied = 0
        for row in rows:
            if row[0] <= self.last_seq:
                continue
            self.last_seq = row[0]
            applied += 1
            self._apply_one(row)
        return applied

    def _apply_one(self, row: tuple[Any, ...]) -> None:
        workflow_id, index, kind, attempt, key = row[2], row[3], row[5], row[6], row[_KEY]
        if index is None or kind in _WORKFLOW_ENDS:  # WorkflowFailed names its step
            if kind in _WORKFLOW_ENDS:
                for step in [s for s in self._running if s[0] == workflow_id]:
                    self._end_attempt(step)
            return
        step = (workflow_id, index)
        if kind == _K.STEP_STARTED:
            self._end_attempt(step)  # a claim that took over a lapsed lease
            self._attempt[step] = attempt
        elif kind in _ATTEMPT_ENDS:
            self._end_attempt(step)
        elif key is None:
            return
        elif kind == _K.CALL_STARTED:
            running = self._attempt.get(step, attempt) == attempt
            self._set(step, key, "running" if running else "in_doubt", moves=True)
            self.steps[step].runs += 1
            self.totals.runs += 1
            if running:
                self._running.setdefault(step, set()).add(key)
        elif kind == _K.CALL_COMPLETED:
            self._set(step, key, "completed")
        elif kind == _K.CALL_FAILED:
            call = self._set(step, key, "failed")
            self.steps[call.step].failed_runs += 1
            self.totals.failed_runs += 1

    def _set(self, step: StepKey, key: str, status: str, *, moves: bool = False) -> _Call:
        """Give call `key` of `step`'s workflow a new status.

        A call stays counted in the step of its latest start: `moves` (a `CallStarted`) moves
        it to `step`; an outcome leaves it where it is.
        """
        call = self._calls.get((step[0], key))
        if call is None:  # first seen (an outcome whose start came before what was applied)
            call = self._calls[(step[0], key)] = _Call(step, status)
        else:
            self._running.get(call.step, set()).discard(key)
            self._count(call, -1)
            call.status = status
            if moves:
                call.step = step
        self._count(call, +1)
        return call

    def _count(self, call: _Call, delta: int) -> None:
        counts = self.steps.get(call.step)
        if counts is None:
            counts = self.steps[call.step] = CallCounts()
        for c in (counts, self.totals):
            c.calls += delta
            setattr(c, call.status, getattr(c, call.status) + delta)

    def _end_attempt(self, step: StepKey) -> None:
        self._attempt[step] = None
        for key in self._running.pop(step, ()):
            self._set(step, key, "in_doubt")
