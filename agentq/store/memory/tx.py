"""`MemoryTx`: one transaction of a `MemoryStore` over its dicts (the `Tx` of the rules).

Writes are staged on the transaction and applied to the store's dicts only by `commit`, so a
rule that raises leaves the store as it was. `Tables` names what a transaction reads and
writes of the store (its dicts and counters), so that this module needs no `MemoryStore`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from agentq.events import Event
from agentq.queue import StoredJob
from agentq.store.contract.groups import GroupManifest
from agentq.store.contract.messages import MessageRow
from agentq.store.contract.rows import CallRow, StepRow, WorkflowRow
from agentq.store.contract.schedules import ScheduleRow
from agentq.store.memory.rates import RateBook
from agentq.store.memory.staging import Outbox, StagedKept
from agentq.store.rules.fence import CallFence, fence_of
from agentq.store.rules.tx import Draft

__all__ = ["MemoryTx", "Tables"]


class Tables(Protocol):
    """The state of a `MemoryStore` a transaction and the store's own verbs work on.

    Attributes:
        _events: The log, in seq order (a sweep leaves gaps).
        _last_seq: The highest seq handed out (never handed out again).
        _started: The seq of each workflow's ``WorkflowStarted``.
        _workflows: The workflow rows, in start order.
        _steps: The step rows of each workflow, by index.
        _calls: The call rows of each workflow, by key, in ``first_seq`` order.
        _messages: The messages of each workflow, by seq.
        _hooks: The end-of-run hook outbox.
        _jobs: The job outcomes, by key.
        _job_expiry: A heap of ``(expires_at, key)`` of the job outcomes.
        _groups: The run group manifests, by id.
        _schedules: The schedules, by name.
        _rates: The shared rate windows.
    """

    _events: list[Event]
    _last_seq: int
    _started: dict[str, int]
    _workflows: dict[str, WorkflowRow]
    _steps: dict[str, list[StepRow]]
    _calls: dict[str, dict[str, CallRow]]
    _messages: dict[str, dict[int, MessageRow]]
    _hooks: Outbox
    _jobs: dict[str, StoredJob]
    _job_expiry: list[tuple[float, str]]
    _groups: dict[str, GroupManifest]
    _schedules: dict[str, ScheduleRow]
    _rates: RateBook


class MemoryTx(StagedKept):
    """A transaction over the store's dicts: writes are staged, applied only on `commit`
    (messages and end-hook outbox rows by `StagedKept`)."""

    def __init__(self, store: Tables) -> None:
        super().__init__()
        self._store: Tables = store
        self.new_events: list[Event] = []
        self.new_workflows: dict[str, tuple[WorkflowRow, int | None]] = {}
        self.new_steps: dict[tuple[str, int], StepRow] = {}
        self.new_calls: dict[tuple[str, str], CallRow] = {}
        self.new_schedules: dict[str, ScheduleRow | None] = {}  # None: deleted

    def load(
        self, workflow_id: str, first: int = 0, last: int = -1
    ) -> tuple[WorkflowRow | None, dict[int, StepRow]]:
        staged = self.new_workflows.get(workflow_id)
        wf = staged[0] if staged else self._store._workflows.get(workflow_id)
        rows = self._store._steps.get(workflow_id, [])
        count = 0 if wf is None else len(wf.step_names)
        steps = {}
        for index in range(max(first, 0), min(last, count - 1) + 1):
            staged_step = self.new_steps.get((workflow_id, index))
            steps[index] = staged_step if staged_step is not None else rows[index]
        return wf, steps

    def append(self, draft: Draft) -> int:
        event = draft.event(self._store._last_seq + len(self.new_events) + 1)
        self.new_events.append(event)
        return event.seq

    def put_workflow(self, row: WorkflowRow, started_seq: int | None) -> None:
        staged = self.new_workflows.get(row.workflow_id)
        if started_seq is None and staged is not None:  # created in this transaction
            started_seq = staged[1]
        self.new_workflows[row.workflow_id] = (row, started_seq)

    def put_step(self, row: StepRow, new: bool) -> None:
        self.new_steps[(row.workflow_id, row.step_index)] = row

    def load_call(self, workflow_id: str, key: str) -> CallRow | None:
        staged = self.new_calls.get((workflow_id, key))
        return staged if staged is not None else self._store._calls.get(workflow_id, {}).get(key)

    def put_call(self, row: CallRow, new: bool) -> None:
        self.new_calls[(row.workflow_id, row.key)] = row

    def load_fence(self, workflow_id: str, index: int, key: str) -> CallFence | None:
        wf, steps = self.load(workflow_id, index, index)
        return fence_of(wf, steps, index, self.load_call(workflow_id, key))

    def touch_workflow(self, workflow_id: str, at: float, seq: int) -> None:
        wf, _ = self.load(workflow_id)
        assert wf is not None
        self.put_workflow(replace(wf, updated_at=at, last_seq=seq), None)

    def load_calls(self, workflow_id: str) -> list[CallRow]:
        rows = dict(self._store._calls.get(workflow_id, {}))
        rows.update({k: r for (w, k), r in self.new_calls.items() if w == workflow_id})
        return sorted(rows.values(), key=lambda r: r.first_seq)

    def load_schedule(self, name: str) -> ScheduleRow | None:
        if name in self.new_schedules:
            return self.new_schedules[name]
        return self._store._schedules.get(name)

    def put_schedule(self, row: ScheduleRow) -> None:
        self.new_schedules[row.name] = row

    def delete_schedule(self, name: str) -> bool:
        found = self.load_schedule(name) is not None
        self.new_schedules[name] = None
        return found

    def commit(self) -> None:
        store = self._store
        for name, schedule in self.new_schedules.items():
            if schedule is None:
                store._schedules.pop(name, None)
            else:
                store._schedules[name] = schedule
        store._events.extend(self.new_events)
        store._last_seq += len(self.new_events)
        self.commit_kept()
        for (workflow_id, key), call in self.new_calls.items():  # staged in first_seq order
            store._calls.setdefault(workflow_id, {})[key] = call
        for workflow_id, (row, started) in self.new_workflows.items():
            store._workflows[workflow_id] = row
            if started is not None:
                store._steps[workflow_id] = []
                store._started[workflow_id] = started
        for (workflow_id, index), step in sorted(self.new_steps.items(), key=lambda kv: kv[0][1]):
            rows = store._steps[workflow_id]
            if index == len(rows):
                rows.append(step)
            else:
                rows[index] = step

