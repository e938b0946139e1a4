"""`WorkflowEngine`: drives workflows step by step through a `Queue` and a `DurableStore`.

How one step runs:

1. ``claim_step`` (compare-and-swap in the store) gives this worker a lease and a fencing token.
2. The attempt is pushed through the queue as a job in the engine's lane, so lane permits bound
   how many step bodies run at once; the lease is renewed every ``lease_ttl / 3`` seconds
   while the attempt waits for a permit and runs.
3. The outcome is written with the fencing token: ``complete_step``, ``wait_step`` or
   ``fail_step`` (with ``retry_at`` when the retry policy allows another attempt). A worker
   whose lease was taken over meanwhile is refused (`LeaseLostError`) and records nothing.

Every transition is an event in the store's append-only log. Step bodies are code, not data:
after a restart the program registers its workflows again, then calls `agentq.recover`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Sequence
from typing import Any

from agentq.clock import Clock, SystemClock
from agentq.codec import decode, encode
from agentq.errors import (
    AgentqError,
    DeadlockError,
    LeaseLostError,
    PayloadError,
    QueueClosed,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowClosedError,
    WorkflowMismatchError,
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
    IN_STEP,
    Again,
    Lease,
    Retry,
    Waiting,
    default_worker_id,
    job_key,
    status_of,
    step_call,
    stored_result,
)
from agentq.workflows.model import (
    NonRetryable,
    RunResult,
    RunStatus,
    StepContext,
    StepDef,
    StepStatus,
    Workflow,
)

__all__ = ["WorkflowEngine"]

def _same_json(a: Any, b: Any) -> bool:
    """Whether two workflow inputs are the same value once stored (as the store compares)."""
    try:
        return bool(decode(encode(a, "input")) == decode(encode(b, "input")))
    except PayloadError:
        return bool(a == b)  # the store refuses such an input anyway


class WorkflowEngine:
    """Run workflows durably: one step after another, each attempt through the queue.

    Args:
        queue: The queue whose lane runs the step bodies (shared with other jobs).
        store: Where the event log and the steps projection live.
        worker_id: This worker's id, the lease holder's name; default ``host:pid:random``.
            Give each process (or engine) its own.
        lease_ttl: Seconds a claimed step stays leased without renewal (> 0). Renewed every
            ``lease_ttl / 3`` seconds while the body runs; a crashed worker's steps can be
            recovered once it has expired.
        priority: The lane step attempts run in.
        clock: Time source for leases, backoff and polling; default the system clock.
        poll_interval: Seconds between checks while another worker holds a step of a
            workflow this engine runs; default ``min(lease_ttl / 4, 1.0)``.

    Raises:
        ValueError: `lease_ttl` or `poll_interval` is not a positive number.

    The engine belongs to the event loop it is first used on; it is not thread-safe.

    Example:
        >>> async with Queue() as queue:
        ...     engine = WorkflowEngine(queue, MemoryStore())
        ...     result = await engine.run(Workflow("w1", [StepDef("hello", lambda ctx: "hi")]))
        ...     result.status
        <RunStatus.COMPLETED: 'completed'>
    """

    def __init__(
        self,
        queue: Queue,
        store: DurableStore,
        *,
        worker_id: str | None = None,
        lease_ttl: float = 30.0,
        priority: Priority = Priority.MEDIUM,
        clock: Clock | None = None,
        poll_interval: float | None = None,
    ) -> None:
        if isinstance(lease_ttl, bool) or not isinstance(lease_ttl, int | float) or not (
            0 < lease_ttl < float("inf")
        ):
            raise ValueError(f"lease_ttl must be a positive number of seconds, got {lease_ttl!r}")
        if poll_interval is not None and not (0 < poll_interval < float("inf")):
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
        self._workflows: dict[str, Workflow] = {}
        self._runs: dict[str, asyncio.Task[RunResult]] = {}
        self._delivering: dict[str, asyncio.Task[RunResult]] = {}
        self._attempts: dict[str, JobHandle] = {}

    # ----------------------------------------------------------------- registry

    def register_workflow(self, workflow: Workflow) -> None:
        """Make `workflow`'s step bodies known to this engine (needed by `resume`, `recover`).

        Registering the same id again replaces the bodies (a notebook cell run twice), as
        long as the step names and the input are the same.

        Raises:
            TypeError: `workflow` is not a `Workflow`.
            WorkflowMismatchError: The id is registered with different step names or another
                input (nothing is replaced).
        """
        if not isinstance(workflow, Workflow):
            raise TypeError(f"expected a Workflow, got {workflow!r}")
        known = self._workflows.get(workflow.id)
        if known is not None and known.step_names != workflow.step_names:
            raise WorkflowMismatchError(
                f"workflow {workflow.id!r} is registered with steps {list(known.step_names)}, "
                f"not {list(workflow.step_names)}"
            )
        if known is not None and not _same_json(known.input, workflow.input):
            raise WorkflowMismatchError(
                f"workflow {workflow.id!r} is registered with another input; a workflow id "
                "names one run: use a new id for new input"
            )
        self._workflows[workflow.id] = workflow

    def registered(self, workflow_id: str) -> Workflow | None:
        """Return the registered workflow with this id, or None."""
        return self._workflows.get(workflow_id)

    @property
    def workflow_ids(self) -> tuple[str, ...]:
        """Ids of the registered workflows, in registration order."""
        return tuple(self._workflows)

    def _lookup(self, workflow: Workflow | str) -> Workflow:
        if isinstance(workflow, Workflow):
            self.register_workflow(workflow)
            return workflow
        found = self._workflows.get(workflow)
        if found is None:
            raise UnknownWorkflowError(
                f"workflow {workflow!r} is not registered with this engine; pass the Workflow "
                "or call register_workflow() first"
            )
        return found

    # ----------------------------------------------------------------- public verbs

    async def run(self, workflow: Workflow | str) -> RunResult:
        """Run a workflow until it completes, waits, fails or is cancelled.

        Steps that completed earlier are never run again; a workflow that already ended
        returns its stored result and appends nothing. Concurrent calls for one workflow in
        this engine share one run (each step executes once). Cancelling the caller does not
        stop the run: use `cancel` for that.

        Args:
            workflow: A `Workflow` (registered on the way) or the id of a registered one.

        Returns:
            A `RunResult` with status completed, waiting, failed or cancelled.

        Raises:
            UnknownWorkflowError: An id that is not registered.
            WorkflowMismatchError: The id is stored (or registered) with different steps.
            PayloadError: The workflow input is not JSON or too large.
            StoreError: The store failed; the run can be retried (or recovered) later.
        """
        wf = self._lookup(workflow)
        if IN_STEP.get() == wf.id:
            raise DeadlockError(
                f"a step of workflow {wf.id!r} awaits a run of its own workflow, which waits "
                "for that step: this wait could never end"
            )
        delivering = self._delivering.get(wf.id)
        if delivering is not None:  # a resume in flight continues the workflow: join it
            await asyncio.wait({delivering})
        return await asyncio.shield(self._start(wf))

    def _start(self, wf: Workflow) -> asyncio.Task[RunResult]:
        """Return this engine's run of `wf`, starting one if none is in progress."""
        task = self._runs.get(wf.id)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._drive(wf), name=f"agentq.run:{wf.id}"
            )
            self._runs[wf.id] = task
            task.add_done_callback(functools.partial(self._forget_run, wf.id))
        return task

    async def resume(self, workflow_id: str, step: str | int, input: Any = None) -> RunResult:
        """Deliver `input` to a `Waiting` step and continue the workflow.

        The step runs again with ``ctx.resume_input == input`` (and ``ctx.attempt`` counted
        from 1); `StepResumed` records the input. Of concurrent resumes of one wait, exactly
        one wins; the others raise `NotWaitingError`.

        Args:
            workflow_id: The workflow (must be registered with this engine).
            step: The waiting step's name or 0-based index.
            input: A JSON value.

        Returns:
            The `RunResult` of the continued run.

        Raises:
            UnknownWorkflowError: Not registered or not stored.
            UnknownStepError: No such step.
            NotWaitingError: The step is not waiting (the message names its status); nothing
                is recorded, and a step that will wait later can still be resumed then.
            WorkflowClosedError: The workflow is cancelled, failed or completed.
            PayloadError: `input` is not JSON or too large; nothing is recorded.
        """
        wf = self._lookup(workflow_id)
        try:
            index = wf.index_of(step)
        except KeyError:
            raise UnknownStepError(
                f"workflow {workflow_id!r} has no step {step!r}; its steps are "
                f"{list(wf.step_names)}"
            ) from None
        loop = asyncio.get_running_loop()
        deliver = loop.create_task(self._deliver(wf, index, input))
        self._delivering[wf.id] = deliver
        deliver.add_done_callback(functools.partial(self._delivered, wf.id))
        # Shielded: once called, the input is delivered and the run continues even if our
        # caller is cancelled meanwhile (as with `run`, cancelling never strands a workflow).
        return await asyncio.shield(deliver)

    async def _deliver(self, wf: Workflow, index: int, input: Any) -> RunResult:
        now = self.clock.time()
        row = await self.store.get_workflow(wf.id)
        if row is not None:  # the run must be able to continue before the wait is consumed
            await self.store.start_workflow(wf.id, wf.step_names, wf.input, now)
        await self.store.resume_step(wf.id, index, input, now)
        previous = self._runs.get(wf.id)
        if previous is not None:
            # A run that is still returning from the wait would not see the input: let it
            # end, then continue with a run of our own (claims keep each step to one run).
            await asyncio.wait({previous})
            if self._runs.get(wf.id) is previous:
                del self._runs[wf.id]
        return await asyncio.shield(self._start(wf))

    def _delivered(self, workflow_id: str, task: asyncio.Task[RunResult]) -> None:
        if self._delivering.get(workflow_id) is task:
            del self._delivering[workflow_id]
        if not task.cancelled():
            task.exception()  # retrieved by the awaiting caller; avoid "never retrieved"

    async def cancel(self, workflow_id: str, reason: str = "cancelled") -> bool:
        """Cancel a workflow: no further step starts and a running attempt is interrupted.

        Idempotent: `WorkflowCancelled` is recorded once; cancelling a workflow that already
        ended records nothing.

        Returns:
            True if this call cancelled it, False if it had already ended.

        Raises:
            UnknownWorkflowError: The workflow is not stored.
        """
        cancelled = await self.store.cancel_workflow(workflow_id, reason, self.clock.time())
        handle = self._attempts.get(workflow_id)
        if cancelled and handle is not None:
            handle.cancel()
        return cancelled

    async def status(self, workflow_id: str) -> list[StepStatus]:
        """Return each step's status, in step order.

        Raises:
            UnknownWorkflowError: The workflow is not stored.
            InvalidKeyError / TypeError: `workflow_id` is not a valid id.
        """
        rows = await self.store.step_rows(validate_key(workflow_id, "workflow id"))
        if not rows:
            raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
        return [status_of(row) for row in rows]

    async def close(self) -> None:
        """Cancel this engine's runs in progress and wait for them to stop.

        Their leases are left to expire, so another worker's `recover` can take them over.
        """
        tasks = list(self._runs.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def running(self, workflow_id: str) -> bool:
        """Whether this engine is running the workflow right now."""
        return workflow_id in self._runs

    # ----------------------------------------------------------------- the driver

    def _forget_run(self, workflow_id: str, task: asyncio.Task[RunResult]) -> None:
        if self._runs.get(workflow_id) is task:
            del self._runs[workflow_id]
        if not task.cancelled():
            task.exception()  # retrieved by the awaiting callers; avoid "never retrieved"

    async def _drive(self, wf: Workflow) -> RunResult:
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
        job = Job(
            job_key(wf.id, execution.step_index, execution.lease_token),
            step_call(step, ctx),
            self.priority,
            timeout=step.timeout,
        )
        lease = Lease(self.store, self.clock, self.lease_ttl, execution)
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
            # stop its body (a thread): wait until the body has really returned.
            await handle.stopped()
        except (asyncio.CancelledError, QueueClosed):
            # This engine (or the whole program) is shutting down, or the queue closed:
            # record nothing, as a crash would, but hand the lease back at once.
            await self._hand_back(lease.execution)
            raise
        finally:
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
            reason = outcome.output.reason
            await self.store.wait_step(execution, reason, now)
            return RunResult(wf.id, RunStatus.WAITING, step.name, reason, ctx.outputs)
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

    # ----------------------------------------------------------------- results

    async def _closed_result(self, workflow_id: str) -> RunResult:
        row = await self.store.get_workflow(workflow_id)
        if row is None:
            raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
        return await stored_result(self.store, row)
