"""`MemoryStore`: the reference `DurableStore`, kept in dicts; the test double for users.

It runs the same transition rules (`agentq.store.rules`: `workflow`, `lease`, `attempt`,
`calls`), through the same verbs (`rules.verbs.RuleStore`), as every other store, over its
own `Tx` (`memory.tx.MemoryTx`: staged writes, applied on commit), so it accepts, refuses
and records exactly what `SqliteStore` does; only durability differs (nothing outlives the
process). It is a `JobOutcomeStore` and a `RateLedger` too; the families it keeps its own
way (job outcomes, run groups, rate windows, a sweep's transaction) are in `memory.verbs`.
This module holds the dicts, runs the verbs and answers the reads.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from agentq.errors import StoreClosedError
from agentq.events import Event
from agentq.keys import validate_key
from agentq.queue import StoredJob
from agentq.store.contract.checks import (
    check_index,
    check_now,
    check_number,
    check_prefix,
    check_ready,
    check_seq,
    check_state,
)
from agentq.store.contract.claims import Execution, execution_of, is_expired, lease_of
from agentq.store.contract.groups import GroupManifest
from agentq.store.contract.hooks import HookRow
from agentq.store.contract.messages import MessageRow
from agentq.store.contract.ready import ReadyWork, current_step, is_ready
from agentq.store.contract.rows import (
    CallRow,
    StepRow,
    StepState,
    WorkflowRow,
    WorkflowState,
    event_row,
)
from agentq.store.contract.schedules import ScheduleRow
from agentq.store.memory.detach import detached
from agentq.store.memory.rates import RateBook
from agentq.store.memory.staging import Outbox
from agentq.store.memory.tx import MemoryTx
from agentq.store.memory.verbs import GROUP_RULES, JOB_RULES, RATE_RULES, SWEEPER
from agentq.store.rules.projection import replay
from agentq.store.rules.verbs import RuleStore

__all__ = ["MemoryStore"]

T = TypeVar("T")


class MemoryStore(RuleStore):
    """A `DurableStore`, `JobOutcomeStore` and `RateLedger` in memory: the reference
    implementation and a test double.

    Every verb is applied all-or-nothing (staged, then committed only if the rule succeeded)
    and returns copies (`agentq.store.memory.detach.detached`: dicts and lists are copied,
    immutable values shared), so callers never share mutable values with the store. Values read
    back are exactly what `SqliteStore` returns (JSON: tuples come back as lists).

    Example:
        >>> store = MemoryStore()
        >>> engine = WorkflowEngine(queue, store)
    """

    job_rules = JOB_RULES
    group_rules = GROUP_RULES
    sweeper = SWEEPER
    rate_rules = RATE_RULES

    def __init__(self) -> None:
        self._events: list[Event] = []  # in seq order; a sweep leaves gaps
        self._last_seq = 0  # the highest seq handed out (never handed out again)
        self._started: dict[str, int] = {}  # the seq of each workflow's WorkflowStarted
        self._workflows: dict[str, WorkflowRow] = {}  # in start order
        self._steps: dict[str, list[StepRow]] = {}
        self._calls: dict[str, dict[str, CallRow]] = {}  # by key, in first_seq order
        self._messages: dict[str, dict[int, MessageRow]] = {}  # by seq
        self._hooks = Outbox()  # end-of-run hooks to deliver, by seq
        self._jobs: dict[str, StoredJob] = {}
        self._job_expiry: list[tuple[float, str]] = []  # a heap of (expires_at, key)
        self._groups: dict[str, GroupManifest] = {}
        self._schedules: dict[str, ScheduleRow] = {}
        self._rates = RateBook()  # the shared rate windows of `Queue(store=...)`
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._workflows)} workflows"
        return f"MemoryStore({state}, {len(self._events)} events)"

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError("the MemoryStore is closed")

    async def _write(self, rule: Callable[..., T], *args: Any) -> T:
        """Run ``rule(MemoryTx, *args)``: staged, committed only if it returns; a detached copy of
        its result."""
        self._check()
        tx = MemoryTx(self)
        result = rule(tx, *args)
        tx.commit()
        return detached(result)

    # ------------------------------------------------------------ writes

    async def rebuild_projection(self) -> None:
        """Recompute every workflow, step and call row by replaying the event log.

        Lease expiry times extended by `renew_lease` are not in the log; a rebuilt lease
        expires as of its `StepStarted` event.
        """
        self._check()
        rebuilt = replay(self._events)
        self._workflows = {}
        self._steps = {}
        self._calls = {}
        self._started = {}
        self._messages = {}
        for started, rows in rebuilt:
            assert rows.workflow is not None
            wid = rows.workflow.workflow_id
            self._workflows[wid] = rows.workflow
            self._started[wid] = started
            self._steps[wid] = [rows.steps[i] for i in sorted(rows.steps)]
            if rows.calls:
                self._calls[wid] = dict(rows.calls)
            if rows.messages:
                self._messages[wid] = dict(rows.messages)

    # ------------------------------------------------------------ reads

    async def load_job(self, key: str, now: float) -> StoredJob | None:
        """See `JobOutcomeStore.load_job`."""
        self._check()
        key, now = validate_key(key), check_number(now, "now")
        job = self._jobs.get(key)
        if job is None or (job.expires_at is not None and job.expires_at <= now):
            return None
        return detached(job)

    async def load_group(self, group_id: str) -> GroupManifest | None:
        """See `DurableGroups.load_group`."""
        self._check()
        return detached(self._groups.get(validate_key(group_id, "group id")))

    async def group_members(self, group_id: str) -> list[WorkflowRow]:
        """See `DurableGroups.group_members`."""
        self._check()
        prefix = validate_key(group_id, "group id") + "/"
        found = [row for wid, row in self._workflows.items() if wid.startswith(prefix)]
        return detached(sorted(found, key=lambda row: row.workflow_id.encode("utf-8")))

    async def expired_leases(self, now: float) -> list[Execution]:
        """See `DurableStore.expired_leases`."""
        self._check()
        now, _ = check_now(now)
        rows = [r for steps in self._steps.values() for r in steps if is_expired(r, now)]
        rows.sort(key=lambda r: (r.lease_expires_at, r.workflow_id, r.step_index))
        return [execution_of(r) for r in rows]

    async def live_leases(self, now: float, worker_prefix: str) -> list[Execution]:
        """See `DurableStore.live_leases`."""
        self._check()
        now, prefix = check_now(now)[0], check_prefix(worker_prefix)
        rows = [
            r for wid, steps in self._steps.items() for r in steps
            if r.lease_expires_at is not None and now <= r.lease_expires_at
            and (r.worker_id or "").startswith(prefix)
            and (r.state is StepState.LEASED or (  # or the fence of a revoked lease
                r.state is StepState.PENDING
                and self._workflows[wid].state is WorkflowState.RUNNING
            ))
        ]
        rows.sort(key=lambda r: (r.lease_expires_at, r.workflow_id, r.step_index))
        return [lease_of(r) for r in rows]

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        """See `DurableStore.get_workflow`."""
        self._check()
        return detached(self._workflows.get(validate_key(workflow_id, "workflow id")))

    async def ready_workflows(
        self, now: float, definitions: Mapping[str, Sequence[str]], limit: int
    ) -> list[ReadyWork]:
        """See `DurableStore.ready_workflows`."""
        self._check()
        at, served, most = check_ready(now, definitions, limit)
        found: list[ReadyWork] = []
        for wf in self._workflows.values():  # in start order
            if len(found) == most:
                break
            if wf.definition is None or served.get(wf.definition) != wf.step_names:
                continue
            if wf.state.closed:
                continue
            step = current_step(self._steps.get(wf.workflow_id, ()))
            if step is not None and is_ready(wf, step, at):
                found.append(ReadyWork(wf, step.step_index, step.state))
        return detached(found)

    async def workflows(self, state: WorkflowState | None = None) -> list[WorkflowRow]:
        """See `DurableStore.workflows`."""
        self._check()
        wanted = check_state(state)
        rows = [r for r in self._workflows.values() if wanted is None or r.state is wanted]
        return detached(rows)

    async def step_rows(self, workflow_id: str | None = None) -> list[StepRow]:
        """See `DurableStore.step_rows`."""
        self._check()
        if workflow_id is None:
            return detached([r for rows in self._steps.values() for r in rows])
        return detached(self._steps.get(validate_key(workflow_id, "workflow id"), []))

    async def calls(
        self, workflow_id: str | None = None, step_index: int | None = None
    ) -> list[CallRow]:
        """See `DurableStore.calls`."""
        self._check()
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        index = None if step_index is None else check_index(step_index)
        if workflow_id is None:
            rows = sorted(
                (r for calls in self._calls.values() for r in calls.values()),
                key=lambda r: r.first_seq,
            )
        else:
            rows = list(self._calls.get(workflow_id, {}).values())
        if index is not None:
            rows = [r for r in rows if r.step_index == index]
        return detached(rows)

    async def messages(self, workflow_id: str) -> list[MessageRow]:
        """See `DurableStore.messages`."""
        self._check()
        kept = self._messages.get(validate_key(workflow_id, "workflow id"), {})
        return detached([kept[seq] for seq in sorted(kept)])

    async def hooks(self, workflow_id: str) -> list[HookRow]:
        """See `DurableStore.hooks`."""
        self._check()
        return detached(self._hooks.of(validate_key(workflow_id, "workflow id")))

    def _select(self, workflow_id: str | None, after_seq: int) -> list[Event]:
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        first = bisect.bisect_right(self._events, after_seq, key=lambda e: e.seq)
        return [
            e
            for e in self._events[first:]
            if workflow_id is None or e.workflow_id == workflow_id
        ]

    async def load_events(
        self, workflow_id: str | None = None, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """See `DurableStore.load_events`."""
        self._check()
        after_seq, limit = check_seq(after_seq, limit)
        events = self._select(workflow_id, after_seq)
        return detached(events if limit is None else events[:limit])

    async def event_rows(
        self, workflow_id: str | None = None, *, after_seq: int = 0
    ) -> list[tuple[Any, ...]]:
        """See `DurableStore.event_rows`."""
        self._check()
        after_seq, _ = check_seq(after_seq)
        return [event_row(e) for e in self._select(workflow_id, after_seq)]

    async def last_seq(self) -> int:
        """See `DurableStore.last_seq`."""
        self._check()
        return self._last_seq

    async def schedules(self) -> list[ScheduleRow]:
        """See `DurableSchedules.schedules`."""
        self._check()
        return detached([self._schedules[name] for name in sorted(self._schedules)])

    async def close(self) -> None:
        """Mark the store closed: further calls raise `StoreError`. Idempotent."""
        self._closed = True
