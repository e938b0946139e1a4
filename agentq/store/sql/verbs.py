"""`SqlStore`: the read verbs of the two SQL stores, written once, over one abstract `_read`.

`SqliteStore` and `PostgresStore` answer every read verb with the same query
(`agentq.store.sql.reads`, in their `Dialect`), after checking its arguments here; they differ
in how a query reaches a connection (`_read`) and in a few store-specific pieces named by
`SqlParts`. The write verbs come from `agentq.store.rules.verbs.RuleStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple, TypeVar

import agentq.store.sql.groups as sql_groups
import agentq.store.sql.hooks as sql_hooks
import agentq.store.sql.messages as sql_messages
import agentq.store.sql.reads as q
import agentq.store.sql.schedules as sql_schedules
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
from agentq.store.contract.claims import Execution
from agentq.store.contract.groups import GroupManifest
from agentq.store.contract.hooks import HookRow
from agentq.store.contract.messages import MessageRow
from agentq.store.contract.ready import ReadyWork
from agentq.store.contract.rows import CallRow, StepRow, WorkflowRow, WorkflowState
from agentq.store.contract.schedules import ScheduleRow
from agentq.store.rules.verbs import RuleStore
from agentq.store.sql.reads import Dialect

__all__ = ["SqlParts", "SqlStore"]

T = TypeVar("T")


class SqlParts(NamedTuple):
    """What a SQL store brings to the shared verbs.

    Attributes:
        dialect: How its queries differ (`agentq.store.sql.reads.Dialect`).
        load_job: ``load_job(conn, key, now) -> StoredJob | None``, a read.
        rebuild: ``rebuild(tx) -> None``, a rule rebuilding the projection from the log.
    """

    dialect: Dialect
    load_job: Callable[[Any, str, float], StoredJob | None]
    rebuild: Callable[[Any], None]


class SqlStore(RuleStore):
    """The verbs of a SQL store: the writes of `RuleStore`, the reads as shared queries.

    A subclass implements `_write` and `_read` and sets `job_rules` and `sql`.
    """

    sql: ClassVar[SqlParts]
    """The store's dialect and store-specific pieces."""

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run the query ``fn(conn, *args)`` after every write submitted before it; return its
        result.

        Raises:
            StoreError: The store is closed or the database failed.
        """
        raise NotImplementedError

    async def rebuild_projection(self) -> None:
        """Recompute every workflow, step and call row by replaying the event log, in one
        transaction (other writers wait for it).

        Lease expiry times extended by `renew_lease` are not in the log; a rebuilt lease
        expires as of its `StepStarted` event.
        """
        await self._write(self.sql.rebuild)

    async def load_job(self, key: str, now: float) -> StoredJob | None:
        """See `JobOutcomeStore.load_job`."""
        key, now = validate_key(key), check_number(now, "now")
        return await self._read(self.sql.load_job, key, now)

    async def expired_leases(self, now: float) -> list[Execution]:
        """See `DurableStore.expired_leases`."""
        now, _ = check_now(now)
        return await self._read(q.expired_leases, self.sql.dialect, now)

    async def live_leases(self, now: float, worker_prefix: str) -> list[Execution]:
        """See `DurableStore.live_leases`."""
        now, prefix = check_now(now)[0], check_prefix(worker_prefix)
        return await self._read(q.live_leases, self.sql.dialect, now, prefix)

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        """See `DurableStore.get_workflow`."""
        workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(q.get_workflow, self.sql.dialect, workflow_id)

    async def ready_workflows(
        self, now: float, definitions: Mapping[str, Sequence[str]], limit: int
    ) -> list[ReadyWork]:
        """See `DurableStore.ready_workflows`.

        One query. On PostgreSQL it skips (``FOR UPDATE SKIP LOCKED``) the workflows whose
        row another transaction holds at that moment (a worker claiming or recording), so that
        serving engines polling together spread over the ready work instead of all reaching
        for the same workflow. Nothing is claimed: the lock ends with the statement.
        """
        at, served, most = check_ready(now, definitions, limit)
        return await self._read(q.ready_workflows, self.sql.dialect, at, served, most)

    async def workflows(self, state: WorkflowState | None = None) -> list[WorkflowRow]:
        """See `DurableStore.workflows`."""
        return await self._read(q.workflows, self.sql.dialect, check_state(state))

    async def step_rows(self, workflow_id: str | None = None) -> list[StepRow]:
        """See `DurableStore.step_rows`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(q.step_rows, self.sql.dialect, workflow_id)

    async def calls(
        self, workflow_id: str | None = None, step_index: int | None = None
    ) -> list[CallRow]:
        """See `DurableStore.calls`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        index = None if step_index is None else check_index(step_index)
        return await self._read(q.calls, self.sql.dialect, workflow_id, index)

    async def messages(self, workflow_id: str) -> list[MessageRow]:
        """See `DurableStore.messages`."""
        workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(sql_messages.messages, self.sql.dialect, workflow_id)

    async def hooks(self, workflow_id: str) -> list[HookRow]:
        """See `DurableStore.hooks`."""
        workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(sql_hooks.hooks, self.sql.dialect, workflow_id)

    async def load_events(
        self, workflow_id: str | None = None, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """See `DurableStore.load_events`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        after_seq, limit = check_seq(after_seq, limit)
        return await self._read(q.load_events, self.sql.dialect, workflow_id, after_seq, limit)

    async def event_rows(
        self, workflow_id: str | None = None, *, after_seq: int = 0
    ) -> list[tuple[Any, ...]]:
        """See `DurableStore.event_rows`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        after_seq, _ = check_seq(after_seq)
        return await self._read(q.event_rows, self.sql.dialect, workflow_id, after_seq)

    async def last_seq(self) -> int:
        """See `DurableStore.last_seq`."""
        return await self._read(q.last_seq, self.sql.dialect)

    async def load_group(self, group_id: str) -> GroupManifest | None:
        """See `DurableGroups.load_group`."""
        gid = validate_key(group_id, "group id")
        return await self._read(sql_groups.load, self.sql.dialect, gid)

    async def group_members(self, group_id: str) -> list[WorkflowRow]:
        """See `DurableGroups.group_members`."""
        gid = validate_key(group_id, "group id")
        return await self._read(sql_groups.members, self.sql.dialect, gid)
    async def schedules(self) -> list[ScheduleRow]:
        """See `DurableSchedules.schedules`."""
        return await self._read(sql_schedules.all_schedules, self.sql.dialect)
