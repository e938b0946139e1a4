"""`RuleStore`: every write verb of the stores, written once, over one abstract `_write`.

Each `DurableStore` write verb is a transition rule (`workflow`, `lease`, `attempt`,
`calls` of `agentq.store.rules`) run in one transaction; only how a store runs a transaction
differs. `RuleStore` holds each verb's signature, docstring and rule call once; a store
supplies `_write` (run ``rule(tx, *args)`` in one transaction, return its result) and, for the
verbs of the rows it keeps its own way (job outcomes, run groups, rate windows, a sweep's
transaction), its `JobRules`, `GroupRules`, `RateRules` and `Sweeper`
(`agentq.store.rules.own_verbs.OwnVerbs`, the base of `RuleStore`, re-exported here).
`MemoryStore`, `SqliteStore` and `PostgresStore` derive from it (the two SQL stores through
`agentq.store.sql.verbs.SqlStore`, which adds the reads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import agentq.store.rules.advance as rules_advance
import agentq.store.rules.attempt as rules_attempt
import agentq.store.rules.calls as rules_calls
import agentq.store.rules.children as rules_children
import agentq.store.rules.fork as rules_fork
import agentq.store.rules.hooks as rules_hooks
import agentq.store.rules.lease as rules_lease
import agentq.store.rules.messages as rules_messages
import agentq.store.rules.schedules as rules_schedules
import agentq.store.rules.workflow as rules_workflow
from agentq.outcomes import ErrorInfo
from agentq.store.contract.children import ChildStart
from agentq.store.contract.claims import ClaimResult, Execution
from agentq.store.contract.hooks import HookRow
from agentq.store.contract.messages import Sent
from agentq.store.contract.rows import CallRow, WorkflowRow
from agentq.store.contract.schedules import ScheduleRow
from agentq.store.rules.own_verbs import GroupRules, JobRules, OwnVerbs, RateRules

__all__ = ["GroupRules", "JobRules", "RateRules", "RuleStore"]

class RuleStore(OwnVerbs):
    """The write verbs of a `DurableStore` (and those of `OwnVerbs`), each one call of
    `_write` (or `_write_job`).

    A subclass implements `_write` and sets `job_rules`, `group_rules`, `sweeper` and
    `rate_rules`; it keeps its connection, transactions, reads and lifecycle.
    """

    async def start_workflow(
        self,
        workflow_id: str,
        step_names: Sequence[str],
        input: Any,
        now: float,
        *,
        definition: str | None = None,
        trace: Mapping[str, str] | None = None,
        run_at: float | None = None,
        deadline: float | None = None,
    ) -> tuple[WorkflowRow, bool]:
        """See `DurableStore.start_workflow`."""
        return await self._write(
            rules_workflow.start_workflow, workflow_id, step_names, input, now, definition,
            trace, run_at, deadline,
        )

    async def claim_step(
        self,
        workflow_id: str,
        step_index: int,
        worker_id: str,
        lease_ttl: float,
        now: float,
        *,
        max_recoveries: int = 3,
    ) -> ClaimResult:
        """See `DurableStore.claim_step`."""
        return await self._write(
            rules_lease.claim_step, workflow_id, step_index, worker_id, lease_ttl, now,
            max_recoveries,
        )

    async def renew_lease(self, execution: Execution, lease_ttl: float, now: float) -> Execution:
        """See `DurableStore.renew_lease`."""
        return await self._write(rules_lease.renew_lease, execution, lease_ttl, now)

    async def complete_step(self, execution: Execution, output: Any, now: float) -> WorkflowRow:
        """See `DurableStore.complete_step`."""
        return await self._write(rules_attempt.complete_step, execution, output, now)

    async def advance_step(
        self,
        execution: Execution,
        output: Any,
        now: float,
        *,
        lease_ttl: float,
        max_recoveries: int = 3,
    ) -> tuple[WorkflowRow, ClaimResult | None]:
        """See `DurableStore.advance_step`."""
        return await self._write(
            rules_advance.advance_step, execution, output, now, lease_ttl, max_recoveries
        )

    async def fail_step(
        self,
        execution: Execution,
        reason: str,
        error: ErrorInfo | None,
        now: float,
        retry_at: float | None,
    ) -> WorkflowRow:
        """See `DurableStore.fail_step`."""
        return await self._write(rules_attempt.fail_step, execution, reason, error, now, retry_at)

    async def wait_step(
        self,
        execution: Execution,
        reason: str,
        now: float,
        *,
        key: str | None = None,
        details: dict[str, Any] | None = None,
        deadline: float | None = None,
        topic: str | None = None,
    ) -> WorkflowRow:
        """See `DurableStore.wait_step`."""
        return await self._write(
            rules_attempt.wait_step, execution, reason, now, key, details, deadline, topic
        )

    async def send_message(
        self, workflow_id: str, topic: str, payload: Any, now: float, *, key: str | None = None
    ) -> Sent:
        """See `DurableStore.send_message`."""
        return await self._write(rules_messages.send_message, workflow_id, topic, payload, now, key)

    async def claim_hooks(
        self,
        worker_id: str,
        now: float,
        lease_ttl: float,
        *,
        definitions: Sequence[str] = (),
        plain: bool = False,
        workflow_id: str | None = None,
        limit: int = 16,
    ) -> list[HookRow]:
        """See `DurableStore.claim_hooks`."""
        return await self._write(
            rules_hooks.claim_hooks, worker_id, now, lease_ttl, definitions, plain, workflow_id,
            limit,
        )

    async def renew_hook(self, seq: int, worker_id: str, now: float, lease_ttl: float) -> bool:
        """See `DurableStore.renew_hook`."""
        return await self._write(rules_hooks.renew_hook, seq, worker_id, now, lease_ttl)

    async def finish_hook(self, seq: int, now: float) -> bool:
        """See `DurableStore.finish_hook`."""
        return await self._write(rules_hooks.finish_hook, seq, now)

    async def retry_hook(
        self, seq: int, worker_id: str, due_at: float, error: str, now: float
    ) -> bool:
        """See `DurableStore.retry_hook`."""
        return await self._write(rules_hooks.retry_hook, seq, worker_id, due_at, error, now)

    async def release_hook(self, seq: int, worker_id: str, now: float) -> bool:
        """See `DurableStore.release_hook`."""
        return await self._write(rules_hooks.release_hook, seq, worker_id, now)

    async def resume_step(
        self,
        workflow_id: str,
        step_index: int,
        input: Any,
        now: float,
        *,
        key: str | None = None,
    ) -> WorkflowRow:
        """See `DurableStore.resume_step`."""
        return await self._write(
            rules_workflow.resume_step, workflow_id, step_index, input, now, key
        )

    async def time_out_wait(self, workflow_id: str, step_index: int, now: float) -> bool:
        """See `DurableStore.time_out_wait`."""
        return await self._write(rules_workflow.time_out_wait, workflow_id, step_index, now)

    async def start_call(
        self,
        execution: Execution,
        key: str,
        *,
        fingerprint: str | None,
        lane: str | None,
        label: dict[str, Any] | None,
        now: float,
    ) -> CallRow:
        """See `DurableStore.start_call`."""
        return await self._write(
            rules_calls.start_call, execution, key, fingerprint, lane, label, now
        )

    async def complete_call(
        self,
        execution: Execution,
        key: str,
        *,
        output: Any,
        usage: dict[str, Any] | None,
        duration: float,
        now: float,
    ) -> CallRow:
        """See `DurableStore.complete_call`."""
        return await self._write(
            rules_calls.complete_call, execution, key, output, usage, duration, now
        )

    async def fail_call(
        self,
        execution: Execution,
        key: str,
        *,
        reason: str,
        error: ErrorInfo | None,
        duration: float,
        now: float,
    ) -> CallRow:
        """See `DurableStore.fail_call`."""
        return await self._write(
            rules_calls.fail_call, execution, key, reason, error, duration, now
        )

    async def time_out_workflow(self, workflow_id: str, now: float) -> bool:
        """See `DurableStore.time_out_workflow`."""
        return await self._write(rules_workflow.time_out_workflow, workflow_id, now)

    async def start_child(
        self,
        execution: Execution,
        key: str,
        *,
        definition: str,
        step_names: Sequence[str],
        input: Any,
        now: float,
        trace: Mapping[str, str] | None = None,
    ) -> ChildStart:
        """See `DurableStore.start_child`."""
        return await self._write(
            rules_children.start_child, execution, key, definition, step_names, input, now,
            trace,
        )

    async def cancel_workflow(self, workflow_id: str, reason: str, now: float) -> bool:
        """See `DurableStore.cancel_workflow`."""
        return await self._write(rules_workflow.cancel_workflow, workflow_id, reason, now)

    async def release_expired(self, execution: Execution, now: float) -> bool:
        """See `DurableStore.release_expired`."""
        return await self._write(rules_lease.release_expired, execution, now)

    async def release_dead(self, execution: Execution, now: float, reason: str) -> bool:
        """See `DurableStore.release_dead`."""
        return await self._write(rules_lease.release_dead, execution, now, reason)

    async def retry_workflow(
        self, workflow_id: str, from_step: int | None, now: float
    ) -> WorkflowRow:
        """See `DurableStore.retry_workflow`."""
        return await self._write(rules_workflow.retry_workflow, workflow_id, from_step, now)

    async def fork_workflow(
        self,
        workflow_id: str,
        new_workflow_id: str,
        *,
        step: int,
        key: str | None = None,
        replace: Mapping[str, Any] | None = None,
        now: float,
    ) -> WorkflowRow:
        """See `DurableStore.fork_workflow`."""
        return await self._write(
            rules_fork.fork_workflow, workflow_id, new_workflow_id, step, key, replace, now
        )

    async def put_schedule(
        self,
        name: str,
        definition: str,
        *,
        cron: str | None,
        every: float | None,
        input: Any,
        next_tick: float,
        now: float,
    ) -> tuple[ScheduleRow, bool]:
        """See `DurableSchedules.put_schedule`."""
        return await self._write(
            rules_schedules.put_schedule, name, definition, cron, every, input, next_tick, now
        )

    async def delete_schedule(self, name: str) -> bool:
        """See `DurableSchedules.delete_schedule`."""
        return await self._write(rules_schedules.delete_schedule, name)

    async def fire_schedule(
        self,
        row: ScheduleRow,
        *,
        tick: float,
        next_tick: float,
        step_names: Sequence[str],
        now: float,
        deadline: float | None = None,
    ) -> str | None:
        """See `DurableSchedules.fire_schedule`."""
        return await self._write(
            rules_schedules.fire_schedule, row, tick, next_tick, step_names, now, deadline
        )

