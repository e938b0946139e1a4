"""The timeline model: event rows folded, incrementally, into spans per workflow step.

Pure Python (no ipywidgets, no I/O): `Timeline.apply` takes the rows `DurableStore.event_rows`
returns (tuples in `EVENT_COLUMNS` order) and updates the tracks; `timeline_html`
(`agentq.widgets.html.timeline`) renders a snapshot of them. Applying rows in ``seq`` order,
in any number of batches, gives the same tracks as applying them all at once.

Durable calls (``ctx.call``) are folded into `CallSpan` s inside their step's track, one per
run: from `CallStarted` to the `CallCompleted` or `CallFailed` with its key. A call still open
when the attempt that started it ends (its worker was lost, or the workflow closed) is *in
doubt*: its span ends there, unless an outcome for it arrives later.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agentq.events import EventKind

__all__ = ["CallSpan", "Span", "SpanKind", "StepTrack", "Timeline", "WorkflowTrack"]


class SpanKind:
    """What a span of a step's track stands for (plain strings, used in ``data-kind``)."""

    RUN = "run"
    """An attempt: from `StepStarted` to its outcome."""
    WAIT = "wait"
    """Waiting for input: from `StepWaiting` to `StepResumed` (or the workflow's end)."""
    BACKOFF = "backoff"
    """Between a failed attempt and the next one (`RetryScheduled` → `StepStarted`)."""


@dataclass(slots=True)
class Span:
    """One bar of a step's track.

    Attributes:
        kind: `SpanKind.RUN`, `WAIT` or `BACKOFF`.
        start: Unix seconds.
        end: Unix seconds, or None while open (drawn up to "now").
        outcome: For runs: running, completed, failed, timeout, waited (the attempt asked for
            input), lost (its worker vanished; `WorkerRecovered`) or cancelled. For waits:
            waiting, resumed or cancelled. For backoffs: backoff.
        attempt: The attempt number of a run, else None.
        detail: The failure or wait reason, or None.
    """

    kind: str
    start: float
    end: float | None
    outcome: str
    attempt: int | None = None
    detail: str | None = None


@dataclass(slots=True)
class CallSpan:
    """One run of a durable call, drawn inside its step's track.

    Attributes:
        key: The call's key.
        name: What to call it: the label's ``tool``, else its ``kind``, else the key.
        start: Unix seconds of its `CallStarted`.
        end: Unix seconds of its outcome (or of the end of its attempt, in doubt); None
            while running (drawn up to "now").
        outcome: running, completed, failed or in_doubt.
        attempt: The step attempt that started it.
    """

    key: str
    name: str
    start: float
    end: float | None
    outcome: str
    attempt: int | None = None


@dataclass(slots=True)
class StepTrack:
    """The spans of one workflow step, oldest first, and the runs of its durable calls."""

    step_index: int
    step_name: str
    spans: list[Span] = field(default_factory=list)
    calls: list[CallSpan] = field(default_factory=list)
    running: dict[str, CallSpan] = field(default_factory=dict)
    """The calls running now, by key."""

    def open_span(self, kind: str | None = None) -> Span | None:
        """Return the last span if it is still open (and of `kind`, when given)."""
        if self.spans and self.spans[-1].end is None:
            span = self.spans[-1]
            if kind is None or span.kind == kind:
                return span
        return None

    def end_calls(self, at: float) -> None:
        """The attempt ended: its calls still running are in doubt from here on."""
        for span in self.running.values():
            span.end, span.outcome = at, "in_doubt"
        self.running.clear()


@dataclass(slots=True)
class WorkflowTrack:
    """One workflow's tracks.

    Attributes:
        workflow_id: The workflow.
        state: running, waiting, completed, failed or cancelled (as the events tell).
        start: Unix seconds of its first event.
        end: Unix seconds of its closing event, or None.
        last: Unix seconds of its latest event.
        steps: Tracks by step index.
        calls: The latest run of each durable call, by key (keys are per workflow).
    """

    workflow_id: str
    state: str
    start: float
    end: float | None = None
    last: float = 0.0
    steps: dict[int, StepTrack] = field(default_factory=dict)
    calls: dict[str, CallSpan] = field(default_factory=dict)
    whole: bool = False
    """Whether its `WorkflowStarted` was applied (else its history began before the events
    read, and `Timeline.rebuild` can fill it in)."""

    def step(self, index: int, name: str | None) -> StepTrack:
        track = self.steps.get(index)
        if track is None:
            track = self.steps[index] = StepTrack(index, name or f"#{index}")
        return track

    def close_all(self, at: float, outcome: str) -> None:
        for track in self.steps.values():
            track.end_calls(at)
            span = track.open_span()
            if span is not None:
                span.end = at
                span.outcome = outcome


_K = EventKind
_CALL_KINDS = frozenset({_K.CALL_STARTED, _K.CALL_COMPLETED, _K.CALL_FAILED})
# Workflow events; WorkflowFailed and WorkflowRetried also name a step (the one that failed, the
# one it runs again from), and are still about the workflow.
_WORKFLOW_KINDS = frozenset({
    _K.WORKFLOW_STARTED, _K.WORKFLOW_COMPLETED, _K.WORKFLOW_FAILED, _K.WORKFLOW_CANCELLED,
    _K.WORKFLOW_RETRIED,
})
# Events that end the step's attempt (a StepStarted too: a claim taking a lapsed lease over).
_ATTEMPT_ENDS = frozenset(
    {_K.STEP_STARTED, _K.STEP_COMPLETED, _K.STEP_FAILED, _K.STEP_WAITING, _K.WORKER_RECOVERED}
)


class Timeline:
    """Tracks of every workflow seen in the log, most recently active last.

    Example:
        >>> tl = Timeline()
        >>> tl.apply(await store.event_rows(after_seq=tl.last_seq))
    """

    def __init__(self) -> None:
        self._workflows: OrderedDict[str, WorkflowTrack] = OrderedDict()
        self.last_seq = 0
        """The highest ``seq`` applied so far."""

    def __len__(self) -> int:
        return len(self._workflows)

    def get(self, workflow_id: str) -> WorkflowTrack | None:
        """Return one workflow's tracks, or None."""
        return self._workflows.get(workflow_id)

    def recent(self, limit: int) -> list[WorkflowTrack]:
        """Return up to `limit` workflows, the most recently active first."""
        out: list[WorkflowTrack] = []
        it: Iterator[WorkflowTrack] = reversed(self._workflows.values())
        for track in it:
            if len(out) >= limit:
                break
            out.append(track)
        return out

    def apply(self, rows: Iterable[tuple[Any, ...]]) -> int:
        """Fold event rows (``seq``-ordered tuples in `EVENT_COLUMNS` order) into the tracks.

        Rows at or below `last_seq` are skipped, so re-reading an overlapping batch is safe.

        Returns:
            How many rows were applied.
        """
        applied = 0
        for row in rows:
            seq = row[0]
            if seq <= self.last_seq:
                continue
            self.last_seq = seq
            applied += 1
            self._apply_one(row)
        return applied

    def rebuild(self, workflow_id: str, rows: Iterable[tuple[Any, ...]]) -> None:
        """Fold a workflow's whole history again from its event `rows` (``seq`` order).

        For a workflow whose first events came before what was read: rows after `last_seq`
        are left for `apply`; the workflow keeps its place in the recency order.
        """
        order = list(self._workflows)
        self._workflows.pop(workflow_id, None)
        for row in rows:
            if row[0] <= self.last_seq:
                self._apply_one(row)
        if workflow_id in self._workflows:
            self._workflows[workflow_id].whole = True
            self._workflows = OrderedDict(
                (wf, self._workflows[wf]) for wf in order if wf in self._workflows
            )

    def _workflow(self, workflow_id: str, at: float) -> WorkflowTrack:
        track = self._workflows.get(workflow_id)
        if track is None:
            track = WorkflowTrack(workflow_id, "running", at)
            self._workflows[workflow_id] = track
        else:
            self._workflows.move_to_end(workflow_id)
        track.last = max(track.last, at)
        return track

    def _apply_one(self, row: tuple[Any, ...]) -> None:
        _, at, workflow_id, step_index, step_name, kind, attempt, _, reason = row[:9]
        wf = self._workflow(workflow_id, at)
        if step_index is None or kind in _WORKFLOW_KINDS:  # some name a step: still the workflow's
            self._apply_workflow_event(wf, kind, at)
            return
        step = wf.step(step_index, step_name)
        if kind in _CALL_KINDS:
            self._apply_call(wf, step, row)
            return
        if kind in _ATTEMPT_ENDS:
            step.end_calls(at)
        if kind == _K.STEP_STARTED:
            self._end(step, SpanKind.BACKOFF, at)
            self._end(step, SpanKind.RUN, at, "lost")  # a claim that took over a lapsed lease
            step.spans.append(Span(SpanKind.RUN, at, None, "running", attempt))
            if wf.state == "waiting":
                wf.state = "running"
        elif kind == _K.STEP_COMPLETED:
            self._end(step, SpanKind.RUN, at, "completed")
        elif kind == _K.STEP_FAILED:
            outcome = "timeout" if reason == "timeout" else "failed"
            self._end(step, SpanKind.RUN, at, outcome, reason)
        elif kind == _K.RETRY_SCHEDULED:
            step.spans.append(Span(SpanKind.BACKOFF, at, None, "backoff", attempt, reason))
        elif kind == _K.STEP_WAITING:
            self._end(step, SpanKind.RUN, at, "waited", reason)
            step.spans.append(Span(SpanKind.WAIT, at, None, "waiting", None, reason))
            wf.state = "waiting"
        elif kind == _K.STEP_RESUMED:
            self._end(step, SpanKind.WAIT, at, "resumed")
            wf.state = "running"
        elif kind == _K.WAIT_TIMED_OUT:  # a durable wait's deadline passed: the step goes on
            self._end(step, SpanKind.WAIT, at, "timeout")
            wf.state = "running"
        elif kind == _K.WORKER_RECOVERED:
            self._end(step, SpanKind.RUN, at, "lost", reason)

    @staticmethod
    def _apply_call(wf: WorkflowTrack, step: StepTrack, row: tuple[Any, ...]) -> None:
        at, kind, attempt, key = row[1], row[5], row[6], row[11]
        if key is None:
            return
        if kind == _K.CALL_STARTED:
            label = json.loads(row[12]) if row[12] else None
            name = key
            if isinstance(label, dict):
                name = str(label.get("tool") or label.get("kind") or key)
            started = CallSpan(key, name, at, None, "running", attempt)
            step.calls.append(started)
            step.running[key] = wf.calls[key] = started
            return
        span = wf.calls.get(key)
        if span is None or span.outcome not in ("running", "in_doubt"):
            return
        step.running.pop(key, None)
        span.end = at
        span.outcome = "completed" if kind == _K.CALL_COMPLETED else "failed"

    @staticmethod
    def _apply_workflow_event(wf: WorkflowTrack, kind: str, at: float) -> None:
        if kind == _K.WORKFLOW_STARTED:
            wf.start = min(wf.start, at)
            wf.whole = True
        elif kind == _K.WORKFLOW_COMPLETED:
            wf.state, wf.end = "completed", at
            wf.close_all(at, "completed")
        elif kind == _K.WORKFLOW_FAILED:
            wf.state, wf.end = "failed", at
            wf.close_all(at, "failed")
        elif kind == _K.WORKFLOW_CANCELLED:
            wf.state, wf.end = "cancelled", at
            wf.close_all(at, "cancelled")
        elif kind == _K.WORKFLOW_RETRIED:  # `retry`: it runs again, its earlier spans stay
            wf.state, wf.end = "running", None

    @staticmethod
    def _end(
        step: StepTrack, kind: str | None, at: float, outcome: str | None = None,
        detail: str | None = None,
    ) -> None:
        span = step.open_span(kind)
        if span is None:
            return
        span.end = at
        if outcome is not None:
            span.outcome = outcome
        if detail is not None:
            span.detail = detail
