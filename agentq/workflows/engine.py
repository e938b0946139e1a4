"""`WorkflowEngine`: the public verbs over workflows (run, resume, cancel, status, close).

The engine keeps one run per workflow: concurrent `run` calls (and the run a `resume`
continues) share it. Each run is a task executing `Driver.drive` (``driver.py``), which claims,
attempts and records the steps one after another; a `Registry` (``registry.py``) holds the
step bodies by workflow id, since step bodies are code, not data: after a restart the program
registers its workflows again, then calls `agentq.recover`.

Every transition is an event in the store's append-only log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

from agentq.clock import Clock
from agentq.errors import AgentqError, DeadlockError, UnknownStepError, UnknownWorkflowError
from agentq.keys import validate_key
from agentq.queue import Priority, Queue
from agentq.store import DurableStore
from agentq.workflows.attempts import IN_STEP
from agentq.workflows.driver import Driver
from agentq.workflows.model import RunResult, StepStatus, Workflow
from agentq.workflows.registry import Registry
from agentq.workflows.results import status_of

__all__ = ["WorkflowEngine"]


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
        ValueError: `lease_ttl` or `poll_interval` is not a positive number, or `priority`
            is not a lane.
        TypeError: `queue` is not a `Queue`, or `store` does not implement `DurableStore`.
        InvalidKeyError: `worker_id` is empty, not UTF-8 or too long.

    The arguments are kept, read-only, as the attributes of the same names (`worker_id`
    filled in, `clock` the one in use, `poll_interval` the one computed).

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
        self._driver = Driver(
            queue,
            store,
            worker_id=worker_id,
            lease_ttl=lease_ttl,
            priority=priority,
            clock=clock,
            poll_interval=poll_interval,
        )
        self._registry = Registry()
        self._driver.on_deadline = self._time_out_later
        self._timers: dict[str, asyncio.Task[None]] = {}  # a wait's deadline, by workflow
        self._runs: dict[str, asyncio.Task[RunResult]] = {}
        self._delivering: dict[str, asyncio.Task[RunResult]] = {}

    # ----------------------------------------------------------------- settings

    @property
    def queue(self) -> Queue:
        """The queue whose lane runs the step bodies."""
        return self._driver.queue

    @property
    def store(self) -> DurableStore:
        """Where the event log and the steps projection live."""
        return self._driver.store

    @property
    def worker_id(self) -> str:
        """This worker's id, the lease holder's name."""
        return self._driver.worker_id

    @property
    def lease_ttl(self) -> float:
        """Seconds a claimed step stays leased without renewal."""
        return self._driver.lease_ttl

    @property
    def priority(self) -> Priority:
        """The lane step attempts run in."""
        return self._driver.priority

    @property
    def clock(self) -> Clock:
        """Time source for leases, backoff and polling."""
        return self._driver.clock

    @property
    def poll_interval(self) -> float:
        """Seconds between checks while another worker holds a step of a running workflow."""
        return self._driver.poll_interval

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
        self._registry.add(workflow)

    def registered(self, workflow_id: str) -> Workflow | None:
        """Return the registered workflow with this id, or None."""
        return self._registry.get(workflow_id)

    @property
    def workflow_ids(self) -> tuple[str, ...]:
        """Ids of the registered workflows, in registration order."""
        return self._registry.ids

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
        wf = self._registry.lookup(workflow)
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
                self._driver.drive(wf), name=f"agentq.run:{wf.id}"
            )
            self._runs[wf.id] = task
            task.add_done_callback(functools.partial(self._forget_run, wf.id))
        return task

    def _forget_run(self, workflow_id: str, task: asyncio.Task[RunResult]) -> None:
        if self._runs.get(workflow_id) is task:
            del self._runs[workflow_id]
        if not task.cancelled():
            task.exception()  # retrieved by the awaiting callers; avoid "never retrieved"

    async def resume(
        self, workflow_id: str, step: str | int, input: Any = None, *, key: str | None = None
    ) -> RunResult:
        """Deliver `input` to a `Waiting` step and continue the workflow.

        The step runs again with ``ctx.resume_input == input`` (and ``ctx.attempt`` counted
        from 1); `StepResumed` records the input. A step waiting in
        `StepContext.wait_for_input` gets the input as that call's return value. Of
        concurrent resumes of one wait, exactly one wins; the others raise `NotWaitingError`.

        Args:
            workflow_id: The workflow (must be registered with this engine).
            step: The waiting step's name or 0-based index.
            input: A JSON value.
            key: The key of the `wait_for_input` this answers, checked against the wait the
                step is on now; None answers whatever it waits for.

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
        wf = self._registry.lookup(workflow_id)
        try:
            index = wf.index_of(step)
        except KeyError:
            raise UnknownStepError(
                f"workflow {workflow_id!r} has no step {step!r}; its steps are "
                f"{list(wf.step_names)}"
            ) from None
        loop = asyncio.get_running_loop()
        deliver = loop.create_task(self._deliver(wf, index, input, key))
        self._delivering[wf.id] = deliver
        deliver.add_done_callback(functools.partial(self._delivered, wf.id))
        # Shielded: once called, the input is delivered and the run continues even if our
        # caller is cancelled meanwhile (as with `run`, cancelling never strands a workflow).
        return await asyncio.shield(deliver)

    async def _deliver(
        self, wf: Workflow, index: int, input: Any, key: str | None
    ) -> RunResult:
        now = self.clock.time()
        row = await self.store.get_workflow(wf.id)
        if row is not None:  # the run must be able to continue before the wait is consumed
            await self.store.start_workflow(wf.id, wf.step_names, wf.input, now)
        await self.store.resume_step(wf.id, index, input, now, key=key)
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
        if cancelled:
            self._driver.interrupt(workflow_id)
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
        for timer in self._timers.values():
            timer.cancel()
        tasks = list(self._runs.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _time_out_later(self, workflow_id: str, deadline: float) -> None:
        """Continue `workflow_id` once a wait's deadline has passed, while this engine lives."""
        old = self._timers.get(workflow_id)
        if old is not None:
            old.cancel()
        timer = asyncio.get_running_loop().create_task(
            self._time_out(workflow_id, deadline), name=f"agentq.deadline:{workflow_id}"
        )
        self._timers[workflow_id] = timer
        timer.add_done_callback(functools.partial(self._timer_done, workflow_id))

    async def _time_out(self, workflow_id: str, deadline: float) -> None:
        await self.clock.sleep(max(0.0, deadline - self.clock.time()))
        if self._registry.get(workflow_id) is not None:
            with contextlib.suppress(AgentqError):
                await self.run(workflow_id)  # the wait times out there (or was answered)

    def _timer_done(self, workflow_id: str, task: asyncio.Task[None]) -> None:
        if self._timers.get(workflow_id) is task:
            del self._timers[workflow_id]
        if not task.cancelled():
            task.exception()

    @property
    def answered_from_log(self) -> int:
        """How many durable calls and waits this engine answered from the log, not running them.

        Counted when each step attempt ends; a measure of what recovery, retries and resumes
        saved (model requests not paid twice, tool calls not sent twice).
        """
        return self._driver.answered_from_log

    def running(self, workflow_id: str) -> bool:
        """Whether this engine is running the workflow right now."""
        return workflow_id in self._runs
