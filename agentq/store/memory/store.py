"""`MemoryStore`: the reference `DurableStore`, kept in dicts; the test double for users.

It runs the same transition rules (`agentq.store.rules`: `workflow`, `lease`, `attempt`,
`calls`), through the same verbs (`rules.verbs.RuleStore`), as every other store, over its
own `Tx` (staged writes, applied on commit), so it accepts, refuses and records exactly
what `SqliteStore` does; only durability differs (nothing outlives the process). It is a
`JobOutcomeStore` too, keeping job outcomes in a dict (with a heap of expiry times for the
purge of `save_job`).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from agentq.errors import StoreError
from agentq.events import Event
from agentq.keys import call_queue_key, validate_key
from agentq.queue import StoredJob
from agentq.store.contract.checks import (
    check_index,
    check_job_save,
    check_now,
    check_number,
    check_prefix,
    check_ready,
    check_seq,
    check_state,
)
from agentq.store.contract.claims import Execution, execution_of, is_expired
from agentq.store.contract.groups import GroupItem, GroupManifest
from agentq.store.contract.hooks import HookRow
from agentq.store.contract.messages import MessageRow
from agentq.store.contract.ready import ReadyWork, current_step, is_ready
from agentq.store.contract.rows import (
    CallKind,
    CallRow,
    StepRow,
    StepState,
    WorkflowRow,
    WorkflowState,
    event_row,
)
from agentq.store.contract.schedules import ScheduleRow
from agentq.store.contract.sweep import SweepReport
from agentq.store.memory.detach import detached
from agentq.store.memory.rates import RateBook
from agentq.store.memory.staging import Outbox, StagedKept
from agentq.store.rules.projection import replay
from agentq.store.rules.sweep import (
    Candidate,
    SweepBatch,
    Sweeper,
    chosen,
    group_member,
    hook_holds,
    recorded_child,
)
from agentq.store.rules.tx import Draft
from agentq.store.rules.verbs import GroupRules, JobRules, RateRules, RuleStore

__all__ = ["MemoryStore"]

T = TypeVar("T")


class _Tx(StagedKept):
    """A transaction over the store's dicts: writes are staged, applied only on `commit`
    (messages and end-hook outbox rows by `StagedKept`)."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__()
        self._store: MemoryStore = store
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

    def append(self, draft: Draft) -> Event:
        event = draft.event(self._store._last_seq + len(self.new_events) + 1)
        self.new_events.append(event)
        return event

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


def _save_job(
    tx: _Tx,
    key: str,
    fingerprint: str,
    output: Any,
    completed_at: float,
    expires_at: float | None,
) -> bool:
    """`JobOutcomeStore.save_job` over the store's dict (with a heap of expiry times)."""
    key, fingerprint, value, _, done, expires = check_job_save(
        key, fingerprint, output, completed_at, expires_at
    )
    store = tx._store
    jobs, heap = store._jobs, store._job_expiry
    while heap and heap[0][0] <= done:  # the purge of outcomes expired by now
        _, old_key = heapq.heappop(heap)
        old = jobs.get(old_key)
        if old is not None and old.expires_at is not None and old.expires_at <= done:
            del jobs[old_key]
    if key in jobs:
        return False  # live: it survived the purge
    jobs[key] = StoredJob(key, fingerprint, value, done, expires)
    if expires is not None:
        heapq.heappush(heap, (expires, key))
    return True


def _forget_job(tx: _Tx, key: str) -> bool:
    """`JobOutcomeStore.forget_job` over the store's dict."""
    return tx._store._jobs.pop(key, None) is not None


def _record_group(
    tx: _Tx, group_id: str, items: list[GroupItem], now: float
) -> tuple[GroupManifest, bool]:
    """`DurableGroups.record_group` over the store's dict."""
    found = tx._store._groups.get(group_id)
    if found is not None:
        return found, False
    manifest = GroupManifest(
        group_id, {i.key: i.definition for i in items}, {i.key: i.input for i in items}, now
    )
    tx._store._groups[group_id] = manifest
    return manifest, True


def _forget_group(tx: _Tx, group_id: str) -> bool:
    """`DurableGroups.forget_group` over the store's dict."""
    return tx._store._groups.pop(group_id, None) is not None
def _sweep(tx: _Tx, cutoff: float, state: str, after: int, limit: int) -> SweepBatch:
    """One transaction of a sweep (`agentq.store.rules.sweep.Sweeper.batch`) over the dicts."""
    store = tx._store
    candidates: list[Candidate] = []
    for wid, wf in store._workflows.items():  # in start order
        if len(candidates) == limit:
            break
        started = store._started[wid]
        if started > after and wf.state == state:
            fences = [s.lease_expires_at for s in store._steps[wid] if s.lease_expires_at]
            fence = max(fences) if fences else None
            candidates.append(Candidate(wid, started, wf.updated_at, fence))

    def has_wait(parent_id: str, wait_key: str) -> bool:
        return wait_key in store._calls.get(parent_id, {})

    def has_item(group_id: str, key: str) -> bool:
        manifest = store._groups.get(group_id)
        return manifest is not None and key in manifest.items

    hooked = {r.workflow_id for r in store._hooks.rows.values() if hook_holds(r)}
    ids, skipped = chosen(
        candidates,
        cutoff,
        lambda wid: recorded_child(wid, has_wait),
        lambda wid: wid in hooked or group_member(wid, has_item) is not None,
    )
    cursor = candidates[-1].started_seq if len(candidates) == limit else None
    calls = 0
    for wid in ids:
        del store._workflows[wid], store._steps[wid], store._started[wid]
        store._messages.pop(wid, None)
        rows = store._calls.pop(wid, {})
        calls += len(rows)
        for key, row in rows.items():
            if row.kind is CallKind.CALL:
                store._jobs.pop(call_queue_key(wid, key), None)
    gone = set(ids)
    if gone:
        hooks = store._hooks.rows
        store._hooks.rows = {s: r for s, r in hooks.items() if r.workflow_id not in gone}
    kept = [e for e in store._events if e.workflow_id not in gone] if gone else store._events
    events, store._events = len(store._events) - len(kept), kept
    return SweepBatch(SweepReport(len(ids), events, calls), cursor, skipped)


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

    job_rules = JobRules(_save_job, _forget_job)
    group_rules = GroupRules(_record_group, _forget_group)
    sweeper = Sweeper(_sweep)
    rate_rules = RateRules(
        lambda tx, *args: tx._store._rates.take(*args),
        lambda tx, *args: tx._store._rates.settle(*args),
        lambda tx, *args: tx._store._rates.pause(*args),
    )

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
            raise StoreError("the MemoryStore is closed")

    async def _write(self, rule: Callable[..., T], *args: Any) -> T:
        """Run ``rule(_Tx, *args)``: staged, committed only if it returns; a detached copy of
        its result."""
        self._check()
        tx = _Tx(self)
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
            r for steps in self._steps.values() for r in steps
            if r.state is StepState.LEASED and r.lease_expires_at is not None
            and now <= r.lease_expires_at and (r.worker_id or "").startswith(prefix)
        ]
        rows.sort(key=lambda r: (r.lease_expires_at, r.workflow_id, r.step_index))
        return [execution_of(r) for r in rows]

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
