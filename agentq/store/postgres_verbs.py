"""The verbs of `PostgresStore`, each a few lines over its dispatch: a rule in a transaction
(`_write`), a function in a transaction (`_transact`) or a query (`_read`).

`PostgresVerbs` holds every `DurableStore` and `JobOutcomeStore` verb of `PostgresStore`; the
store (`agentq.store.postgres`) supplies the three dispatch coroutines: connections, worker
threads and the order of reads after writes are its job. Arguments of the reads are checked
here, before anything is sent; the rules check their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import agentq.store.postgres_jobs as postgres_jobs
import agentq.store.postgres_reads as postgres_reads
import agentq.store.rules_attempt as rules_attempt
import agentq.store.rules_calls as rules_calls
import agentq.store.rules_lease as rules_lease
import agentq.store.rules_workflow as rules_workflow
from agentq.events import Event
from agentq.keys import validate_key
from agentq.outcomes import ErrorInfo
from agentq.queue import StoredJob
from agentq.store.checks import (
    check_index,
    check_now,
    check_number,
    check_ready,
    check_seq,
    check_state,
)
from agentq.store.claims import ClaimResult, Execution
from agentq.store.postgres_tx import rebuild
from agentq.store.ready import ReadyWork
from agentq.store.rows import CallRow, StepRow, WorkflowRow, WorkflowState

__all__ = ["PostgresVerbs"]

T = TypeVar("T")


class PostgresVerbs:
    """The verbs of `PostgresStore` over its three dispatch coroutines."""

    async def _write(self, rule: Callable[..., T], *args: Any) -> T:
        """Run ``rule(PostgresTx, *args)`` in one transaction; return its result."""
        raise NotImplementedError

    async def _transact(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction; return its result."""
        raise NotImplementedError

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run the query ``fn(conn, *args)``; return its result."""
        raise NotImplementedError

    # ------------------------------------------------------------ writes

    async def start_workflow(
        self,
        workflow_id: str,
        step_names: Sequence[str],
        input: Any,
        now: float,
        *,
        definition: str | None = None,
        trace: Mapping[str, str] | None = None,
    ) -> tuple[WorkflowRow, bool]:
        """See `DurableStore.start_workflow`."""
        return await self._write(
            rules_workflow.start_workflow, workflow_id, step_names, input, now, definition,
            trace,
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
    ) -> WorkflowRow:
        """See `DurableStore.wait_step`."""
        return await self._write(
            rules_attempt.wait_step, execution, reason, now, key, details, deadline
        )

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

    async def save_job(
        self,
        key: str,
        *,
        fingerprint: str,
        output: Any,
        completed_at: float,
        expires_at: float | None,
    ) -> bool:
        """See `JobOutcomeStore.save_job`."""
        return await self._transact(
            postgres_jobs.save, key, fingerprint, output, completed_at, expires_at
        )

    async def forget_job(self, key: str) -> bool:
        """See `JobOutcomeStore.forget_job`."""
        return await self._transact(postgres_jobs.forget, validate_key(key))

    async def rebuild_projection(self) -> None:
        """Recompute every workflow, step and call row by replaying the event log, in one
        transaction (other writers wait for it).

        Lease expiry times extended by `renew_lease` are not in the log; a rebuilt lease
        expires as of its `StepStarted` event.
        """
        await self._write(rebuild)

    # ------------------------------------------------------------ reads

    async def load_job(self, key: str, now: float) -> StoredJob | None:
        """See `JobOutcomeStore.load_job`."""
        key, now = validate_key(key), check_number(now, "now")
        return await self._read(postgres_jobs.load, key, now)

    async def expired_leases(self, now: float) -> list[Execution]:
        """See `DurableStore.expired_leases`."""
        now, _ = check_now(now)
        return await self._read(postgres_reads.expired_leases, now)

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        """See `DurableStore.get_workflow`."""
        workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(postgres_reads.get_workflow, workflow_id)

    async def ready_workflows(
        self, now: float, definitions: Iterable[str], limit: int
    ) -> list[ReadyWork]:
        """See `DurableStore.ready_workflows`.

        One query; it skips (``FOR UPDATE SKIP LOCKED``) the workflows whose row another
        transaction holds at that moment (a worker claiming or recording), so that serving
        engines polling together spread over the ready work instead of all reaching for the
        same workflow. Nothing is claimed: the lock ends with the statement.
        """
        at, names, most = check_ready(now, definitions, limit)
        return await self._read(postgres_reads.ready_workflows, at, names, most)

    async def workflows(self, state: WorkflowState | None = None) -> list[WorkflowRow]:
        """See `DurableStore.workflows`."""
        return await self._read(postgres_reads.workflows, check_state(state))

    async def step_rows(self, workflow_id: str | None = None) -> list[StepRow]:
        """See `DurableStore.step_rows`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(postgres_reads.step_rows, workflow_id)

    async def calls(
        self, workflow_id: str | None = None, step_index: int | None = None
    ) -> list[CallRow]:
        """See `DurableStore.calls`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        index = None if step_index is None else check_index(step_index)
        return await self._read(postgres_reads.calls, workflow_id, index)

    async def load_events(
        self, workflow_id: str | None = None, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """See `DurableStore.load_events`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        after_seq, limit = check_seq(after_seq, limit)
        return await self._read(postgres_reads.load_events, workflow_id, after_seq, limit)

    async def event_rows(
        self, workflow_id: str | None = None, *, after_seq: int = 0
    ) -> list[tuple[Any, ...]]:
        """See `DurableStore.event_rows`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        after_seq, _ = check_seq(after_seq)
        return await self._read(postgres_reads.event_rows, workflow_id, after_seq)

    async def last_seq(self) -> int:
        """See `DurableStore.last_seq`."""
        return await self._read(postgres_reads.last_seq)
