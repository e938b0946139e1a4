"""How the engine packages one step attempt: the job body, its lease, and the results.

Private to `agentq.workflows.engine`: the job body that turns `WaitForInput` into a value
(a wait is not a failed job), the markers the driver loop acts on, the lease renewer, and the
translation of stored rows into `RunResult` and `StepStatus`.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any

from agentq.clock import Clock
from agentq.errors import LeaseLostError, WorkflowClosedError
from agentq.store import (
    DurableStore,
    Execution,
    StepRow,
    StepState,
    WorkflowRow,
    WorkflowState,
)
from agentq.workflows.model import (
    RunResult,
    RunStatus,
    StepContext,
    StepDef,
    StepStatus,
    WaitForInput,
)

RUN_STATUS = {
    WorkflowState.COMPLETED: RunStatus.COMPLETED,
    WorkflowState.FAILED: RunStatus.FAILED,
    WorkflowState.CANCELLED: RunStatus.CANCELLED,
    WorkflowState.WAITING: RunStatus.WAITING,
}


IN_STEP: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentq_in_step", default=None
)
"""The workflow whose step body runs in this context (to refuse a step awaiting its own run)."""


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def job_key(workflow_id: str, step_index: int, lease_token: int) -> str:
    digest = hashlib.blake2b(workflow_id.encode("utf-8"), digest_size=12).hexdigest()
    return f"agentq.step:{digest}:{step_index}:{lease_token}"


class Waiting:
    """The output of an attempt that raised `WaitForInput`: a pause, not a failed job."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def step_call(step: StepDef, ctx: StepContext) -> Callable[[], Any]:
    """The job body for one attempt: `step.fn(ctx)`, with `WaitForInput` turned into a value.

    A wait is not a failure, so the queue's lane statistics do not count it as one. Async
    bodies stay async; plain ones stay plain, so the queue runs them in a worker thread.
    """
    fn = step.fn
    if step.is_async:

        async def call_async() -> Any:
            token = IN_STEP.set(ctx.workflow_id)
            try:
                return await fn(ctx)
            except WaitForInput as wait:
                return Waiting(wait.reason)
            finally:
                IN_STEP.reset(token)

        return call_async

    def call() -> Any:
        try:
            return fn(ctx)
        except WaitForInput as wait:
            return Waiting(wait.reason)

    return call


class Retry:
    """Marker: the attempt failed and another one is scheduled after `delay` seconds."""

    __slots__ = ("delay",)

    def __init__(self, delay: float) -> None:
        self.delay = delay


class Again:
    """Marker: claim the step again (the lease was lost, or another worker holds it)."""

    __slots__ = ("delay",)

    def __init__(self, delay: float) -> None:
        self.delay = delay


HAND_BACK_TTL = 1e-6
"""Seconds a handed-back lease stays live: it has expired by the next clock reading."""


class Lease:
    """Keeps one execution's lease alive while its attempt waits and runs."""

    def __init__(
        self, store: DurableStore, clock: Clock, lease_ttl: float, execution: Execution
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl = lease_ttl
        self.execution = execution
        self.lost = False

    async def keep(self) -> None:
        """Renew every ``lease_ttl / 3`` seconds until cancelled or the lease is lost."""
        while True:
            await self._clock.sleep(self._ttl / 3)
            try:
                self.execution = await self._store.renew_lease(
                    self.execution, self._ttl, self._clock.time()
                )
            except (LeaseLostError, WorkflowClosedError):
                self.lost = True
                return


def status_of(row: StepRow) -> StepStatus:
    match row.state:
        case StepState.PENDING:
            return StepStatus.Pending()
        case StepState.LEASED:
            return StepStatus.Leased(row.worker_id or "", row.lease_expires_at or 0.0)
        case StepState.COMPLETED:
            return StepStatus.Completed(row.output)
        case StepState.WAITING:
            return StepStatus.Waiting(row.reason or "")
        case _:
            return StepStatus.Failed(row.reason or "", row.attempt)


async def stored_result(store: DurableStore, row: WorkflowRow) -> RunResult:
    """The `RunResult` a stored workflow row (and its steps) stands for."""
    steps = await store.step_rows(row.workflow_id)
    outputs = tuple(s.output for s in steps if s.state is StepState.COMPLETED)
    status = RUN_STATUS.get(row.state, RunStatus.WAITING)
    focus = next(
        (s for s in steps if s.state in (StepState.FAILED, StepState.WAITING)), None
    )
    if status is RunStatus.COMPLETED:
        return RunResult(row.workflow_id, status, outputs=outputs)
    return RunResult(
        row.workflow_id,
        status,
        focus.step_name if focus else None,
        row.reason if row.reason is not None else (focus.reason if focus else None),
        outputs,
    )
