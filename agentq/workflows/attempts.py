"""One step attempt as the driver packages it: the job body, its lease, what it asks for next.

Used by `agentq.workflows.driver` (and `IN_STEP` by the engine): the job body that turns
`WaitForInput` into a value (a wait is not a failed job) and marks the context with the
workflow it runs (`IN_STEP`), the job's key, the markers the driver loop acts on (`Retry`,
`Again`), and the lease renewer (`Lease`).
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Callable
from typing import Any

from agentq.clock import Clock
from agentq.errors import LeaseLostError, WorkflowClosedError
from agentq.store import DurableStore, Execution
from agentq.workflows.context import StepContext
from agentq.workflows.model import StepDef, WaitForInput

__all__ = [
    "HAND_BACK_TTL",
    "IN_STEP",
    "Again",
    "Lease",
    "Retry",
    "Waiting",
    "job_key",
    "step_call",
]

IN_STEP: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentq_in_step", default=None
)
"""The workflow whose step body runs in this context (to refuse a step awaiting its own run)."""


def job_key(workflow_id: str, step_index: int, lease_token: int) -> str:
    """The queue key of one attempt: a new lease token (a new attempt) makes a new job."""
    digest = hashlib.blake2b(workflow_id.encode("utf-8"), digest_size=12).hexdigest()
    return f"agentq.step:{digest}:{step_index}:{lease_token}"


class Waiting:
    """The output of an attempt that raised `WaitForInput`: a pause, not a failed job.

    A wait raised by `StepContext.wait_for_input` carries its key, details and deadline; a
    step-level ``raise WaitForInput(reason)`` has none.
    """

    __slots__ = ("deadline", "details", "key", "reason")

    def __init__(self, wait: WaitForInput) -> None:
        self.reason = wait.reason
        self.key: str | None = getattr(wait, "key", None)
        self.details: dict[str, Any] | None = getattr(wait, "details", None)
        self.deadline: float | None = getattr(wait, "deadline", None)


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
                return Waiting(wait)
            finally:
                IN_STEP.reset(token)

        return call_async

    def call() -> Any:
        try:
            return fn(ctx)
        except WaitForInput as wait:
            return Waiting(wait)

    return call


class Retry:
    """Marker: the attempt failed and another one is scheduled after `delay` seconds.

    The store keeps the time (``retry_at``): the next claim answers `NotBefore` until then.
    """

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
