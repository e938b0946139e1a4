"""`Driver`: runs one workflow's steps, in order, to a `RunResult`; owns the engine's settings.

For each step, the loop:

1. claims it (``claim_step``, a compare-and-swap in the store): this worker gets a lease and a
   fencing token, or learns that the step completed or waits already, that the workflow
   closed, or that another worker holds it (then polls every ``poll_interval`` seconds);
2. pushes the attempt through the queue as a job in the engine's lane, so lane permits bound
   how many step bodies run at once, while a `Lease` renews the lease every ``lease_ttl / 3``
   seconds;
3. records the outcome with the fencing token: ``complete_step``, ``wait_step`` or
   ``fail_step`` (with ``retry_at`` when the retry policy allows another attempt). A worker
   whose lease was taken over meanwhile is refused (`LeaseLostError`) and claims again.

Private to `agentq.workflows.engine`, which starts one drive per workflow and shares it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agentq.clock import Clock, SystemClock
from agentq.codec import decode, encode
from agentq.errors import (
    AgentqError,
    LeaseLostError,
    PayloadError,
    QueueClosed,
    UnknownWorkflowError,
    WorkflowClosedError,
)
from agentq.keys import validate_key
from agentq.outcomes import Completed, ErrorInfo, FailureReason
from agentq.queue import Job, JobHandle, Priority, Queue
from agentq.store import (
    AlreadyCompleted,
    AlreadyWaiting,
    Claimed,
    DurableStore,
    Execution,
    HeldByOther,
    WorkflowClosed,
    WorkflowState,
)
from agentq.workflows.attempts import (
    HAND_BACK_TTL,
    Again,
    Lease,
    Retry,
    Waiting,
    job_key,
    step_call,
)
from agentq.workflows.calls import CallLog
from agentq.workflows.context import StepContext
from agentq.workflows.model import (
    NonRetryable,
    RunResult,
    RunStatus,
    StepDef,
    Workflow,
)
from agentq.workflows.results import stored_result

__all__ = ["Driver"]


def default_worker_id() -> str:
    """Return ``host:pid:random``, a worker id unique to this engine."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Driver:
    """Runs workflows' steps for one engine, with its settings (checked here).

    The arguments are `WorkflowEngine`'s; see its docstring.

    Raises:
        ValueError: `lease_ttl`, `poll_interval` or `priority` is invalid.
        TypeError: `queue` is not a `Queue` or `store` not a `DurableStore`.
        InvalidKeyError: `worker_id` is empty, not UTF-8 or too long.
    """

    def __init__(
        self,
        queue: Queue,
        store: DurableStore,
        *,
        worker_id: str | None,
        lease_ttl: float,
        priority: Priority,
        clock: Clock | None,
        poll_interval: float | None,
    ) -> None:
        if isinstance(lease_ttl, bool) or not isinstance(lease_ttl, int | float) or not (
            0 < lease_ttl < math.inf
        ):
            raise ValueError(f"lease_ttl must be a positive number of seconds, got {lease_ttl!r}")
        if poll_interval is not None and not (0 < poll_interval < math.inf):
            raise ValueError(f"poll_interval must be positive seconds, got {poll_interval!r}")
        if not isinstance(queue, Queue):
            raise TypeError(f"queue must be an agentq.Queue, got {queue!r}")
        if not isinstance(store, DurableStore):
            raise TypeError(f"store must implement agentq.DurableStore, got {store!r}")
        try:
            self.priority = Priority(priority)
        except ValueError:
            raise ValueError(
                f"priority must be one of {[p.value for p in Priority]}, got {priority!r}"
            ) from None
        self.queue = queue
        self.store = store
        self.worker_id = (
            default_worker_id() if worker_id is None else validate_key(worker_id, "worker_id")
        )
        self.lease_ttl = float(lease_ttl)
        self.clock: Clock = clock or SystemClock()
        self.poll_interval = poll_interval or min(self.lease_ttl / 4, 1.0)
        self._attempts: dict[str, JobHandle] = {}  # the attempt running now, by workflow
        self.answered_from_log = 0
        """Durable calls and waits answered from the log (not run) by this engine's attempts."""
        self.on_deadline: Callable[[str, float], None] | None = None
        """Told (workflow id, Unix seconds) when a step starts a wait that has a deadline."""

    def interrupt(self, workflow_id: str) -> None:
        """Cancel the attempt of `workflow_id` that runs now, if any (for a cancelled run)."""
        handle = self._attempts.get(workflow_id)
        if handle is not None:
            handle.cancel()

    async def drive(self, wf: Workflow) -> RunResult:
        """Run `wf`'s steps in order until it completes, waits, fails or is cancelled.

        A workflow that already ended returns its stored result and appends nothing.

        Raises:
            QueueClosed: The queue closed before or while a step ran; nothing was recorded
                for that step and its lease was handed back.
        """
        row, _ = await self.store.start_workflow(
            wf.id, wf.step_names, wf.input, self.clock.time()
        )
        if row.state.closed:
            return await stored_result(self.store, row)
        outputs: list[Any] = []
        for index, step in enumerate(wf.steps):
            result = await self._run_step(wf, index, step, outputs)
            if isinstance(result, RunResult):
                return result
            outputs.append(result.output)
        return RunResult(wf.id, RunStatus.COMPLETED, outputs=tuple(outputs))

    async def _run_step(
        self, wf: Workflow, index: int, step: StepDef, outputs: Sequence[Any]
    ) -> Completed | RunResult:
        while True:
            if self.queue.closed:  # claiming would record a StepStarted nobody runs
                raise QueueClosed(
                    f"the queue is closed: step {step.name!r} of workflow {wf.id!r} was not "
                    "started"
                )
            claim = await self.store.claim_step(
                wf.id, index, self.worker_id, self.lease_ttl, self.clock.time()
            )
            if isinstance(claim, AlreadyCompleted):
                return Completed(claim.output)
            if isinstance(claim, AlreadyWaiting):
                if await self.store.time_out_wait(wf.id, index, self.clock.time()):
                    continue  # its deadline passed: the step runs on, the wait raises
                return RunResult(
                    wf.id, RunStatus.WAITING, step.name, claim.reason, tuple(outputs)
                )
            if isinstance(claim, WorkflowClosed):
                return await self._closed_result(wf.id)
            if isinstance(claim, HeldByOther):
                await self.clock.sleep(self.poll_interval)
                continue
            assert isinstance(claim, Claimed)
            ctx = StepContext(
                workflow_id=wf.id,
                step_index=index,
                step_name=step.name,
                attempt=claim.execution.attempt,
                input=wf.input,
                outputs=tuple(outputs),
                previous=outputs[-1] if outputs else wf.input,
                resume_input=claim.resume_input,
            )
            step_result = await self._attempt(wf, step, claim.execution, ctx)
            if isinstance(step_result, Retry | Again):
                await self.clock.sleep(step_result.delay)
                continue
            return step_result

    async def _attempt(
        self, wf: Workflow, step: StepDef, execution: Execution, ctx: StepContext
    ) -> Completed | RunResult | Retry | Again:
        lease = Lease(self.store, self.clock, self.lease_ttl, execution)
        log = CallLog(
            store=self.store,
            queue=self.queue,
            clock=self.clock,
            workflow_id=wf.id,
            execution=lambda: lease.execution,
            load=functools.partial(self.store.calls, wf.id),
        )
        job = Job(
            job_key(wf.id, execution.step_index, execution.lease_token),
            step_call(step, replace(ctx, _calls=log)),
            self.priority,
            timeout=step.timeout,
        )
        renewer = asyncio.get_running_loop().create_task(
            lease.keep(), name=f"agentq.lease:{wf.id}:{execution.step_index}"
        )
        try:
            handle = await self._push(job)
            self._attempts[wf.id] = handle
            try:
                outcome = await handle
            finally:
                if self._attempts.get(wf.id) is handle:
                    del self._attempts[wf.id]
            # The next attempt must never overlap this one, even when a timeout could not
            # stop its body (a thread): wait until the body has really returned, and its
            # durable calls have been recorded.
            await handle.stopped()
            await log.settle()
        except (asyncio.CancelledError, QueueClosed):
            # This engine (or the whole program) is shutting down, or the queue closed:
            # record nothing, as a crash would, but hand the lease back at once (once the
            # durable calls already running have been recorded).
            with contextlib.suppress(Exception):
                await asyncio.shield(log.settle())
            await self._hand_back(lease.execution)
            raise
        finally:
            log.close()
            self.answered_from_log += log.answered
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        execution = lease.execution
        try:
            return await self._record(wf, step, execution, outcome, ctx)
        except LeaseLostError:
            return Again(0.0)
        except WorkflowClosedError:
            return await self._closed_result(wf.id)

    async def _push(self, job: Job) -> JobHandle:
        accepted = await self.queue.push(job)
        handle = getattr(accepted, "handle", None)
        assert isinstance(handle, JobHandle), f"step attempt keys are unique: {accepted!r}"
        return handle

    async def _record(
        self,
        wf: Workflow,
        step: StepDef,
        execution: Execution,
        outcome: Any,
        ctx: StepContext,
    ) -> Completed | RunResult | Retry:
        now = self.clock.time()
        if isinstance(outcome, Completed) and isinstance(outcome.output, Waiting):
            wait = outcome.output
            await self.store.wait_step(
                execution,
                wait.reason,
                now,
                key=wait.key,
                details=wait.details,
                deadline=wait.deadline,
            )
            if wait.deadline is not None and self.on_deadline is not None:
                self.on_deadline(wf.id, wait.deadline)
            return RunResult(wf.id, RunStatus.WAITING, step.name, wait.reason, ctx.outputs)
        if isinstance(outcome, Completed):
            try:
                # Later steps see the output exactly as a reload from the store would give it
                # (tuples as lists, float subclasses as float), live or after a restart.
                output = decode(encode(outcome.output, "output"))
                await self.store.complete_step(execution, output, now)
            except PayloadError as bad:
                reason = f"payload: {bad}"
                await self.store.fail_step(
                    execution, reason, ErrorInfo.from_exception(bad), now, None
                )
                return RunResult(wf.id, RunStatus.FAILED, step.name, reason, ctx.outputs)
            return Completed(output)
        exc = outcome.exception
        error = outcome.error
        if outcome.reason is FailureReason.CANCELLED:
            row = await self.store.get_workflow(wf.id)
            if row is not None and row.state is WorkflowState.CANCELLED:
                return await stored_result(self.store, row)
            # Not our cancel: the queue closed (or this engine is closing). Record nothing,
            # as a crash would, and hand the lease back so `recover` or `run` can continue
            # the step at once.
            await self._hand_back(execution)
            raise QueueClosed(
                f"step {step.name!r} of workflow {wf.id!r} was interrupted by the queue "
                "closing; nothing was recorded and its lease was handed back, so recover() "
                "or run() continues it"
            )
        if isinstance(exc, NonRetryable):
            await self.store.fail_step(execution, exc.reason, error, now, None)
            return RunResult(wf.id, RunStatus.FAILED, step.name, exc.reason, ctx.outputs)
        reason = str(outcome.reason) if outcome.reason is not FailureReason.ERROR else str(error)
        if step.retry.should_retry(execution.attempt):
            delay = step.retry.delay(execution.attempt)
            await self.store.fail_step(execution, reason, error, now, now + delay)
            return Retry(delay)
        await self.store.fail_step(execution, reason, error, now, None)
        return RunResult(wf.id, RunStatus.FAILED, step.name, reason, ctx.outputs)

    async def _hand_back(self, execution: Execution) -> None:
        """Shorten our lease so that another worker may take the step over at once."""
        with contextlib.suppress(AgentqError):
            await self.store.renew_lease(execution, HAND_BACK_TTL, self.clock.time())

    async def _closed_result(self, workflow_id: str) -> RunResult:
        row = await self.store.get_workflow(workflow_id)
        if row is None:
            raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
        return await stored_result(self.store, row)
