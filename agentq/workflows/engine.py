"""`WorkflowEngine`: the public verbs over workflows (run, resume, retry, cancel, status, close).

The engine keeps one run per workflow: concurrent `run` calls (and the run a `resume` or a
`retry` continues, or `run_soon` starts in the background) share it (`Runs`, ``runs.py``).
Each run is a task executing `Driver.drive` (``driver.py``), which claims, attempts and
records the steps one after another; a `Registry` (``registry.py``) holds the step bodies by
workflow id, since step bodies are code, not data: after a restart the program registers its
workflows again, then calls `agentq.recover`.

Every transition is an event in the store's append-only log.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agentq.clock import Clock
from agentq.errors import (
    AgentqError,
    DeadlockError,
    NotRetryableError,
    UnknownStepError,
    UnknownWorkflowError,
)
from agentq.keys import validate_key
from agentq.queue import Priority, Queue
from agentq.store import DurableStore, WorkflowState
from agentq.workflows.attempts import IN_STEP
from agentq.workflows.deadlines import Deadlines
from agentq.workflows.driver import Driver
from agentq.workflows.model import RunResult, StepStatus, Workflow
from agentq.workflows.registry import Registry
from agentq.workflows.results import status_of
from agentq.workflows.runs import Runs

__all__ = ["WorkflowEngine"]


class WorkflowEngine:
    """Run workflows durably: one step after another, each attempt through the queue.

    Args:
        queue: The queue whose lane runs the step bodies (shared with other jobs).
        store: Where the event log and the steps projection live.
        worker_id: This worker's id, the lease holder's name. The default,
            ``{host}:{pid}:{8 hex digits}`` (see `agentq.workflows.workers`), lets another
            engine on this host take the lease back at once once this process is gone (after
            a crash or a kernel restart) instead of waiting for it to expire. Give each
            process (or engine) its own.
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
        self._runs = Runs(self._driver.drive)
        self._deadlines = Deadlines(lambda: self.clock, self._expire)
        self._driver.on_deadline = self._deadlines.set

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
        return await self._runs.join(wf)

    def run_soon(self, workflow: Workflow | str) -> None:
        """Start running a workflow as this engine's background task; return at once.

        Nothing changes if this engine runs it already (or a `resume` or `retry` of it is
        about to). The run goes on with nobody awaiting it: ``await engine.run(workflow)``
        joins it for its `RunResult`, `cancel` stops the workflow, `close` the run. An
        exception the run raises (a store failure) goes to whoever joins it, and is logged
        through ``logging.getLogger("agentq")``. `agentq.recover` starts its runs this way.

        Args:
            workflow: A `Workflow` (registered on the way) or the id of a registered one.

        Raises:
            UnknownWorkflowError: An id that is not registered.
            WorkflowMismatchError: The id is registered with different steps.
        """
        self._runs.start_soon(self._registry.lookup(workflow))

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
        index = self._index(wf, step)

        async def deliver() -> None:
            now = self.clock.time()
            row = await self.store.get_workflow(wf.id)
            if row is not None:  # the run must be able to continue before the wait is used
                await self.store.start_workflow(wf.id, wf.step_names, wf.input, now)
            await self.store.resume_step(wf.id, index, input, now, key=key)

        # A run that is still returning from the wait would not see the input: it ends
        # first, then a run of our own continues (claims keep each step to one run).
        return await self._runs.replace(wf, deliver, before=False)

    @staticmethod
    def _index(wf: Workflow, step: str | int) -> int:
        try:
            return wf.index_of(step)
        except KeyError:
            raise UnknownStepError(
                f"workflow {wf.id!r} has no step {step!r}; its steps are "
                f"{list(wf.step_names)}"
            ) from None

    async def retry(
        self, workflow: Workflow | str, *, from_step: str | int | None = None
    ) -> RunResult:
        """Run a failed or cancelled workflow again, and return its new `RunResult`.

        By default it continues from the step that failed (or was cancelled, or was next
        when the workflow was cancelled between steps); `from_step` runs the steps again from
        an earlier one. Steps before it keep their outputs and are not run again; the steps
        from it on start over as if never run (``ctx.attempt`` from 1, their crash budget
        whole, their earlier outputs and resume input forgotten by the projection; the log
        keeps everything and records `WorkflowRetried`). As with `resume`, cancelling the
        caller does not stop the retried run.

        Args:
            workflow: The `Workflow` (registered on the way), or the id of one registered
                with this engine.
            from_step: The step (name or 0-based index) to run again from; every step
                before it must have completed. None: the first step that did not complete.

        Returns:
            The `RunResult` of the new run.

        Raises:
            UnknownWorkflowError: An id that is not registered with this engine (step
                bodies are code: pass the `Workflow`), or a workflow that was never stored.
            UnknownStepError: No such step.
            NotRetryableError: The workflow is running, waiting or completed (the message
                names its state), or a step before `from_step` has not completed; nothing
                is recorded.
            WorkflowMismatchError: The id is stored with different steps or input.

        Example:
            >>> result = await engine.run(order)
            >>> if result.status is RunStatus.FAILED:      # fix the cause, then
            ...     result = await engine.retry(order)     # or retry(order, from_step="fetch")
        """
        if isinstance(workflow, Workflow):
            wf = self._registry.lookup(workflow)
        else:
            known = self._registry.get(validate_key(workflow, "workflow id"))
            if known is None:
                stored = await self.store.get_workflow(workflow)
                where = f"is {stored.state} in the store" if stored else "is not in the store"
                raise UnknownWorkflowError(
                    f"workflow {workflow!r} {where}, and its steps are not registered with "
                    "this engine (step bodies are code, not data): pass the Workflow, "
                    "engine.retry(workflow)"
                )
            wf = known
        index = None if from_step is None else self._index(wf, from_step)

        async def check() -> None:  # said before waiting for a run in progress to end
            row = await self.store.get_workflow(wf.id)
            if row is None:
                raise UnknownWorkflowError(
                    f"workflow {wf.id!r} is not in the store: it never ran, so there is "
                    "nothing to retry; run it"
                )
            if row.state not in (WorkflowState.FAILED, WorkflowState.CANCELLED):
                raise NotRetryableError(
                    f"cannot retry workflow {wf.id!r}: it is {row.state}; only a failed or "
                    "cancelled workflow runs again"
                )

        async def again() -> None:
            now = self.clock.time()
            await self.store.start_workflow(wf.id, wf.step_names, wf.input, now)
            await self.store.retry_workflow(wf.id, index, now)

        # The run that ended it may still be on its way out (a cancelled attempt stopping):
        # it ends before the workflow is reopened, so it never sees it running again.
        return await self._runs.replace(wf, again, before=True, check=check)

    async def cancel(self, workflow_id: str | Workflow, reason: str = "cancelled") -> bool:
        """Cancel a workflow: no further step starts and a running attempt is interrupted.

        Works on any workflow this engine knows: stored, or only registered (or given as a
        `Workflow`) and never run; the latter is stored as cancelled, so that a later `run`
        returns its cancelled result without running a step. Idempotent: `WorkflowCancelled`
        is recorded once; cancelling a workflow that already ended records nothing. A
        cancelled workflow can run again with `retry`.

        Args:
            workflow_id: The workflow's id (or the `Workflow` itself).
            reason: Recorded with `WorkflowCancelled`, returned as `RunResult.reason`.

        Returns:
            True if this call cancelled it, False if it had already ended.

        Raises:
            UnknownWorkflowError: The workflow is neither stored nor registered.
            WorkflowMismatchError: The `Workflow` given (or registered under this id) is
                stored with other steps or input; nothing is recorded.
        """
        wf = workflow_id if isinstance(workflow_id, Workflow) else None
        wid = validate_key(wf.id if wf else workflow_id, "workflow id")
        wf = wf or self._registry.get(wid)
        now = self.clock.time()
        if wf is not None:  # stored as it is registered, if it never ran: then cancelled
            await self.store.start_workflow(wf.id, wf.step_names, wf.input, now)
        elif await self.store.get_workflow(wid) is None:
            raise UnknownWorkflowError(
                f"workflow {wid!r} is neither registered with this engine nor in the store"
            )
        cancelled = await self.store.cancel_workflow(wid, reason, now)
        if cancelled:
            self._driver.interrupt(wid)
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
        self._deadlines.cancel_all()
        tasks = self._runs.tasks()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _expire(self, workflow_id: str) -> None:
        """A wait's deadline passed: run the workflow (the wait times out, or was answered)."""
        if self._registry.get(workflow_id) is not None:
            with contextlib.suppress(AgentqError):
                await self.run(workflow_id)

    @property
    def answered_from_log(self) -> int:
        """How many durable calls and waits this engine answered from the log, not running them.

        Counted when each step attempt ends; a measure of what recovery, retries and resumes
        saved (model requests not paid twice, tool calls not sent twice).
        """
        return self._driver.answered_from_log

    def running(self, workflow_id: str) -> bool:
        """Whether this engine is running the workflow right now."""
        return self._runs.running(workflow_id)
