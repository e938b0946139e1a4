"""One step attempt as the driver packages it: the job body, its lease, what it asks for next.

Private to `agentq.workflows.driver`: the job body that turns a wait (`WaitForInput`, also
inside an exception group: `agentq.retry.classify`) into a value, since a wait is not a failed
job, and marks the context with the workflow it runs (`IN_STEP`); the job's key and the name
messages give it; the markers the driver loop acts on (`Retry`, `Again`); and the lease
renewer (`Lease`).
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Callable
from typing import Any

from agentq.clock import Clock
from agentq.errors import LeaseLostError, WaitForInput, WorkflowClosedError
from agentq.retry import Verdict, classify
from agentq.store import DurableStore, Execution
from agentq.workflows.model import StepContext, StepDef

__all__ = [
    "HAND_BACK_TTL",
    "IN_STEP",
    "Again",
    "Lease",
    "Retry",
    "Waiting",
    "job_key",
    "step_call",
    "step_title",
]

IN_STEP: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentq_in_step", default=None
)
"""The workflow whose step body runs in this context (to refuse a step awaiting its own run)."""


def job_key(workflow_id: str, step_index: int, lease_token: int) -> str:
    """The queue key of one attempt: a new lease token (a new attempt) makes a new job."""
    digest = hashlib.blake2b(workflow_id.encode("utf-8"), digest_size=12).hexdigest()
    return f"agentq.step:{digest}:{step_index}:{lease_token}"


def step_title(workflow_id: str, step_name: str) -> str:
    """How user-facing messages name a step (never by its internal job key)."""
    return f"step {step_name!r} of workflow {workflow_id!r}"


class Waiting:
    """The output of an attempt that raised `WaitForInput`: a pause, not a failed job."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def step_call(step: StepDef, ctx: StepContext) -> Callable[[], Any]:
    """The job body for one attempt: `step.fn(ctx)`, with a wait turned into a value.

    A wait is not a failure, so the queue's lane statistics do not count it as one. A wait
    raised inside an exception group (an `asyncio.TaskGroup` of parallel calls) is a wait
    too; its reason is `agentq.retry.Classification.wait_reason`. Async bodies stay async;
    plain ones stay plain, so the queue runs them in a worker thread. Both run with `IN_STEP`
    set to the workflow's id.
    """
    fn = step.fn
    workflow_id = ctx.workflow_id
    if step.is_async:

        async def call_async() -> Any:
            token = IN_STEP.set(workflow_id)
            try:
                return await fn(ctx)
            except WaitForInput as wait:
                return Waiting(wait.reason)
            except BaseExceptionGroup as group:
                return _wait_in(group)
            finally:
                IN_STEP.reset(token)

        return call_async

    def call() -> Any:
        token = IN_STEP.set(workflow_id)
        try:
            return fn(ctx)
        except WaitForInput as wait:
            return Waiting(wait.reason)
        except BaseExceptionGroup as group:
            return _wait_in(group)
        finally:
            IN_STEP.reset(token)

    return call


def _wait_in(group: BaseExceptionGroup[Any]) -> Waiting:
    """`Waiting` if `group` holds a wait; else re-raise it (a failure for the driver)."""
    verdict = classify(group)
    if verdict.verdict is Verdict.WAIT:
        return Waiting(verdict.wait_reason)
    raise group


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
