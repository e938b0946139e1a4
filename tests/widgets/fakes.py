"""Small stand-ins for the widget tests: a read-side store with call counts, a queue's stats,
an engine; and an agent workflow with durable calls and a keyed wait for the real engine."""

from __future__ import annotations

import functools
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from agentq.events import EventKind
from agentq.queue import Job, Priority
from agentq.retry import RetryPolicy
from agentq.store import StepRow, StepState, WorkflowRow, WorkflowState
from agentq.workflows import StepContext, StepDef, Workflow

T0 = 1_767_225_600.0
K = EventKind


class ReadStore:
    """The read side of a `DurableStore` over plain lists, counting every call.

    `event` appends an event row; `step` sets a projection row. Only what the notebook layer
    reads is implemented.
    """

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.steps: dict[tuple[str, int], StepRow] = {}
        self.calls: Counter[str] = Counter()
        self.schedule_rows: list[Any] = []  # ScheduleRow: what schedules() answers
        self.after: list[int] = []  # after_seq of every event_rows call
        self.fail_with: Exception | None = None
        self.definitions: dict[str, str | None] = {}  # workflow id -> its definition's name

    def event(
        self,
        kind: EventKind,
        workflow_id: str,
        step: tuple[int, str] | None = None,
        *,
        at: float | None = None,
        attempt: int | None = None,
        worker_id: str | None = None,
        reason: str | None = None,
        output: Any = None,
        input: Any = None,
        key: str | None = None,
        label: dict[str, Any] | None = None,
    ) -> int:
        seq = len(self.events) + 1
        index, name = step if step is not None else (None, None)
        self.events.append(
            (
                seq,
                T0 + seq if at is None else at,
                workflow_id,
                index,
                name,
                kind.value,
                attempt,
                worker_id,
                reason,
                None if output is None else json.dumps(output),
                None if input is None else json.dumps(input),
                key,
                None if label is None else json.dumps(label),
                None,  # forked_from
            )
        )
        return seq

    def step(self, workflow_id: str, index: int, name: str, state: StepState, **kw: Any) -> None:
        self.steps[(workflow_id, index)] = StepRow(workflow_id, index, name, state, **kw)

    def _check(self, name: str) -> None:
        self.calls[name] += 1
        if self.fail_with is not None:
            raise self.fail_with

    async def last_seq(self) -> int:
        self._check("last_seq")
        return len(self.events)

    async def schedules(self) -> list[Any]:
        self._check("schedules")
        return list(self.schedule_rows)

    async def event_rows(
        self, workflow_id: str | None = None, *, after_seq: int = 0
    ) -> list[tuple[Any, ...]]:
        self._check("event_rows")
        self.after.append(after_seq)
        return [
            r for r in self.events[after_seq:] if workflow_id is None or r[2] == workflow_id
        ]

    def _workflow_row(self, workflow_id: str) -> WorkflowRow | None:
        events = [e for e in self.events if e[2] == workflow_id]
        steps = sorted(
            (r for r in self.steps.values() if r.workflow_id == workflow_id),
            key=lambda r: r.step_index,
        )
        if not events and not steps and workflow_id not in self.definitions:
            return None
        closing = {K.WORKFLOW_COMPLETED.value: WorkflowState.COMPLETED,
                   K.WORKFLOW_FAILED.value: WorkflowState.FAILED,
                   K.WORKFLOW_CANCELLED.value: WorkflowState.CANCELLED}
        state = WorkflowState.RUNNING
        for e in events:
            state = closing.get(e[5], state)
        if state is WorkflowState.RUNNING and any(r.state is StepState.WAITING for r in steps):
            state = WorkflowState.WAITING
        first = events[0][1] if events else T0
        last = events[-1] if events else (0, T0)
        return WorkflowRow(workflow_id, state, tuple(r.step_name for r in steps), None, None,
                           first, last[1], last[0], self.definitions.get(workflow_id))

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        self._check("get_workflow")
        return self._workflow_row(workflow_id)

    async def workflows(self, state: WorkflowState | None = None) -> list[WorkflowRow]:
        """Rows of every workflow with events, steps or a definition (`definitions`)."""
        self._check("workflows")
        ids = dict.fromkeys(
            [e[2] for e in self.events] + [k[0] for k in self.steps] + list(self.definitions)
        )
        rows = [r for r in map(self._workflow_row, ids) if r is not None]
        return [r for r in rows if state is None or r.state is state]

    async def step_rows(self, workflow_id: str | None = None) -> list[StepRow]:
        self._check("step_rows" if workflow_id is None else "step_rows(wf)")
        rows = sorted(self.steps.values(), key=lambda r: (r.workflow_id, r.step_index))
        return [r for r in rows if workflow_id is None or r.workflow_id == workflow_id]


@dataclass(frozen=True)
class Lane:
    priority: str
    capacity: int = 100
    permits: int = 5
    queued: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    cache_hits: int = 0
    joins: int = 0


@dataclass(frozen=True)
class Stats:
    lanes: tuple[Lane, ...]


class StatsQueue:
    """Just `stats()`, returning whatever `lanes` holds."""

    def __init__(self) -> None:
        self.lanes = (Lane("high"), Lane("medium"), Lane("low"))
        self.calls = 0

    def stats(self) -> Stats:
        self.calls += 1
        return Stats(self.lanes)


class FakeEngine:
    """`store`, `queue`, `clock`, `answered_from_log`, and a `resume` that records its calls
    (and the wait keys given in `keys`) and waits for `gate`."""

    def __init__(self, store: ReadStore, clock: Any) -> None:
        import asyncio

        self.store = store
        self.queue = StatsQueue()
        self.clock = clock
        self.resumes: list[tuple[str, Any, Any]] = []
        self.keys: list[str | None] = []
        self.answered_from_log = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.called = asyncio.Event()
        self.error: Exception | None = None

    async def resume(
        self, workflow_id: str, step: Any, input: Any, *, key: str | None = None
    ) -> Any:
        from agentq.workflows import RunResult, RunStatus

        self.resumes.append((workflow_id, step, input))
        self.keys.append(key)
        self.called.set()
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        return RunResult(workflow_id, RunStatus.COMPLETED, outputs=("done",))


class Tools:
    """The outside world of an agent: records every call that really ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def model(self, prompt: str) -> dict[str, Any]:
        self.ran.append("model")
        return {"text": f"plan for {prompt}", "usage": {"tokens": 100}}

    async def tool(self, name: str, i: int) -> dict[str, Any]:
        self.ran.append(f"{name}:{i}")
        if name == "book" and self.ran.count(f"{name}:{i}") == 1:
            raise ConnectionError("booking service down")
        return {"tool": name, "i": i}


def agent_workflow(tools: Tools, workflow_id: str = "trip") -> Workflow:
    """A step that asks a model, runs three tools (one fails once), then waits for approval."""

    async def agent(ctx: StepContext) -> Any:
        await ctx.call(Job("plan", functools.partial(tools.model, "trip")),
                       label={"kind": "model"}, usage=lambda out: out["usage"])
        for i, name in enumerate(["search", "search", "book"]):
            job = Job(f"tool:{i}", functools.partial(tools.tool, name, i), Priority.HIGH)
            await ctx.call(job, label={"kind": "tool", "tool": name},
                           usage={"tokens": 10 * (i + 1)})
        return await ctx.wait_for_input(
            "approve", "book it?", details={"tool": "book", "args": {"to": "<script>"}},
            timeout=60,
        )

    return Workflow(workflow_id, [StepDef("agent", agent, retry=RetryPolicy(2))])
