"""`WorkflowEngine`: the public verbs over workflows (run, resume, retry, cancel, status, close).

The engine keeps one run per workflow: concurrent `run` calls (and the run a `resume` or a
`retry` continues, or `run_soon` starts in the background) share it (`Runs`, ``runs.py``).
Each run is a task executing `Driver.drive` (``driver.py``), which claims, attempts and
records the steps one after another; a `Registry` (``registry.py``) holds the step bodies by
workflow id, since step bodies are code, not data: after a restart the program registers its
workflows again, then calls `agentq.recover`.

A long-lived engine keeps only what it still needs: a registration is dropped once its run
has ended completed, failed or cancelled (the store keeps the record, and `run`, `resume` and
`status` of such an id still answer from it); waiting workflows stay registered, since
`resume` needs their bodies. Runs, attempts and wake-ups are forgotten as they end.

Every transition is an event in the store's append-only log.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Any

from agentq.clock import Clock
from agentq.errors import (
    AgentqError,
    DeadlockError,
    NotWaitingError,
    UnknownWorkflowError,
    WorkflowMismatchError,
)
from agentq.keys import validate_key
from agentq.queue import Priority, Queue
from agentq.store import DurableStore, WorkflowRow, WorkflowState
from agentq.workflows.attempts import IN_STEP
from agentq.workflows.changes import (
    resume_change,
    resume_elsewhere,
    retry_change,
    retry_check,
    retry_elsewhere,
    unregistered_retry,
)
from agentq.workflows.deadlines import Deadlines
from agentq.workflows.driver import Driver
from agentq.workflows.model import Recorded, RunResult, RunStatus, StepStatus, Workflow
from agentq.workflows.registrations import Registrations
from agentq.workflows.registry import step_index
from agentq.workflows.results import refuse_resume, status_of, stored_result
from agentq.workflows.runs import Runs
from agentq.workflows.serving import Server

__all__ = ["WorkflowEngine"]


class WorkflowEngine(Registrations):
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
            recovered once it has expired. A renewal that finds the lease gone (the
            workflow cancelled from another process, or the step taken over) interrupts
            the body: ``lease_ttl / 3`` bounds how long a cancel from elsewhere takes.
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

    The engine belongs to the event loop it is first used on; it is not thread-safe. Use it
    as ``async with WorkflowEngine(queue, store) as engine:`` inside the blocks of the queue
    and the store: leaving the block closes the engine first (see `close`), so that the
    leases of interrupted steps are handed back while the store is still open.

    Example:
        >>> async with Queue() as queue, WorkflowEngine(queue, MemoryStore()) as engine:
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
        super().__init__()
        self._runs = Runs(self._driver.drive, self._drop_if_ended)
        self._deadlines = Deadlines(lambda: self.clock, self._expire)
        self._driver.on_deadline = self._deadlines.set
        self._server = Server(self._driver, self._registry, self._runs)  # for serve()

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

    # ----------------------------------------------------------------- public verbs

    async def run(self, workflow: Workflow | str) -> RunResult:
        """Run a workflow until it completes, waits, fails or is cancelled.

        Steps that completed earlier are never run again; a workflow that already ended
        returns its stored result and appends nothing (given by id, also once its
        registration was dropped). Concurrent calls for one workflow in this engine share one
        run (each step executes once). Cancelling the caller does not stop the run: use
        `cancel` for that. The registration is dropped when the run ends completed, failed
        or cancelled.

        Args:
            workflow: A `Workflow` (registered on the way), the id of a registered one, the
                id of a stored instance of a `WorkflowDef` registered here (built from it,
                with its stored input), or the id of a stored workflow that has ended.

        Returns:
            A `RunResult` with status completed, waiting, failed or cancelled.

        Raises:
            UnknownWorkflowError: An id that is neither registered nor a stored workflow that
                has ended, or an instance of a definition not registered here (the message
                names it).
            WorkflowMismatchError: The id is stored (or registered) with different steps,
                or its registered definition has other step names than the stored ones.
                Nothing changes: a `Workflow` given here is not left registered.
            PayloadError: The workflow input is not JSON or too large.
            QueueClosed: The queue closed before or while a step ran (see `close`).
            StoreError: The store failed; the run can be retried (or recovered) later.
        """
        if isinstance(workflow, str):
            found = await self._find(workflow)
            if found is None:  # stored and ended: its stored result, nothing appended
                row = await self.store.get_workflow(workflow)
                assert row is not None
                return await stored_result(self.store, row)
            if isinstance(found, WorkflowRow):  # raises: its definition is not registered
                found = self._registry.resolve(workflow, found)
            workflow = found
        fresh = isinstance(workflow, Workflow) and self._registry.get(workflow.id) is None
        wf = self._registry.lookup(workflow)
        try:
            if IN_STEP.get() == wf.id:
                raise DeadlockError(
                    f"a step of workflow {wf.id!r} awaits a run of its own workflow, which "
                    "waits for that step: this wait could never end"
                )
            return await self._runs.join(wf)
        except (WorkflowMismatchError, DeadlockError):
            # Refused (the store holds this id with other steps, input or definition):
            # a Workflow registered on the way is forgotten again, so that the refusal
            # changes nothing (run(id) still runs what the store and registry hold).
            if fresh and self._registry.get(wf.id) is wf and not self._runs.busy(wf.id):
                self._registry.remove(wf.id)
            raise

    def run_soon(self, workflow: Workflow | str) -> None:
        """Start running a workflow as this engine's background task; return at once.

        Nothing changes if this engine runs it already (or a `resume` or `retry` of it is
        about to). The run goes on with nobody awaiting it: ``await engine.run(workflow)``
        joins it for its `RunResult`, `cancel` stops the workflow, `close` the run. An
        exception the run raises (a store failure) goes to whoever joins it, and is logged
        through ``logging.getLogger("agentq")``. `agentq.recover` starts its runs this way.

        Args:
            workflow: A `Workflow` (registered on the way), the id of a registered one, or
                (as `run` takes it) the id of a stored instance of a `WorkflowDef`
                registered here. An id that is not registered as a plain workflow is looked
                up in the store by the background run itself, since this method cannot
                wait: what that lookup raises (`UnknownWorkflowError`,
                `WorkflowMismatchError`, `StoreError`) is logged and goes to whoever joins
                the run with ``run(id)``.

        Raises:
            UnknownWorkflowError: An id that is not registered, while no definition is
                registered here either (then it cannot be an instance run here).
            WorkflowMismatchError: The id is registered with different steps.
        """
        if isinstance(workflow, str) and self._registry.get(workflow) is None:
            workflow_id = validate_key(workflow, "workflow id")
            if not self._registry.names:
                self._registry.lookup(workflow_id)  # raises: nothing could run it
            self._runs.start_soon_by(workflow_id, lambda: self._instance(workflow_id))
            return
        self._runs.start_soon(self._registry.lookup(workflow))

    async def resume(
        self, workflow_id: str, step: str | int, input: Any, *, key: str | None = None
    ) -> RunResult | Recorded:
        """Deliver `input` to a `Waiting` step and continue the workflow.

        The step runs again with ``ctx.resumed`` true, ``ctx.resume_input == input`` (None
        included) and ``ctx.attempt`` counted from 1; `StepResumed` records the input. A step
        waiting in `StepContext.wait_for_input` gets the input as that call's return value.
        Of concurrent resumes of one wait, exactly one wins; the others raise
        `NotWaitingError`. `input` is required: None is an answer too, so it must be given on
        purpose.

        An instance of a `WorkflowDef` that this engine has not registered is resumed all
        the same: the input is recorded at once (checked by the store as always) and
        `Recorded` is returned; a serving engine that holds the definition (`serve`) runs
        the step on. A plain workflow is tied to the engine that registered it.

        Args:
            workflow_id: The workflow (registered with this engine, an instance of a
                definition, or stored and ended: then the refusal says why).
            step: The waiting step's name or 0-based index.
            input: A JSON value (None included).
            key: The key of the `wait_for_input` this answers, checked against the wait the
                step is on now; None answers whatever it waits for.

        Returns:
            The `RunResult` of the continued run; `Recorded` when the definition is not
            registered here.

        Raises:
            UnknownWorkflowError: Not registered or not stored.
            UnknownStepError: No such step.
            NotWaitingError: The step is not waiting (the message names its status); nothing
                is recorded, and a step that will wait later can still be resumed then. Also
                a resume after the wait's deadline, whether or not the wait was timed out
                yet (the message says it timed out at its deadline, UTC): the wait is then
                timed out (``WaitTimedOut``) and the step continues with `InputTimeout`.
            WorkflowClosedError: The workflow is cancelled, failed or completed.
            PayloadError: `input` is not JSON or too large; nothing is recorded.
        """
        wf = await self._find(workflow_id)
        if wf is None:  # stored and ended: the store refuses the resume, saying why
            await refuse_resume(self.store, self.clock.time(), workflow_id, step, input, key)
        if isinstance(wf, WorkflowRow):  # its definition is elsewhere: record, serve runs it
            return await resume_elsewhere(self.store, self.clock, wf, step, input, key)
        index = step_index(wf.id, wf.step_names, step)

        deliver = resume_change(self.store, self.clock, wf, index, input, key)
        # A run that is still returning from the wait would not see the input: it ends
        # first, then a run of our own continues (claims keep each step to one run).
        try:
            return await self._runs.replace(wf, deliver, before=False)
        except NotWaitingError:
            # Refused; if because the wait's deadline passed (no timer fired: a restart),
            # the wait times out now and the step continues, as the timer would have done.
            if await self.store.time_out_wait(wf.id, index, self.clock.time()):
                self._runs.start_soon(wf)
            raise

    async def retry(
        self, workflow: Workflow | str, *, from_step: str | int | None = None
    ) -> RunResult | Recorded:
        """Run a failed or cancelled workflow again, and return its new `RunResult`.

        By default it continues from the step that failed (or was cancelled, or was next
        when the workflow was cancelled between steps); `from_step` runs the steps again from
        an earlier one. Steps before it keep their outputs and are not run again; the steps
        from it on start over as if never run (``ctx.attempt`` from 1, their crash budget
        whole, their earlier outputs and resume input forgotten by the projection; the log
        keeps everything and records `WorkflowRetried`). As with `resume`, cancelling the
        caller does not stop the retried run.

        Args:
            workflow: The `Workflow` (registered on the way), the id of one registered
                with this engine, or the id of a stored instance of a `WorkflowDef`.
            from_step: The step (name or 0-based index) to run again from; every step
                before it must have completed. None: the first step that did not complete.

        An instance of a `WorkflowDef` not registered here is retried all the same: the
        retry is recorded at once (`WorkflowRetried`, checked by the store as always) and
        `Recorded` is returned; a serving engine that holds the definition runs it.

        Returns:
            The `RunResult` of the new run; `Recorded` when the definition is not registered
            here.

        Raises:
            UnknownWorkflowError: An id that is not registered with this engine (step
                bodies are code, and a registration is dropped once its run ended failed or
                cancelled: pass the `Workflow`), or a workflow that was never stored.
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
                row = await self.store.get_workflow(workflow)
                if row is None or row.definition is None or row.state is WorkflowState.COMPLETED:
                    await unregistered_retry(self.store, workflow)
                if self._registry.definition(row.definition) is None:  # record, serve runs it
                    return await retry_elsewhere(self.store, self.clock, row, from_step)
                known = self._registry.resolve(workflow, row)
            wf = known
        index = None if from_step is None else step_index(wf.id, wf.step_names, from_step)

        check = retry_check(self.store, wf)  # said before waiting for a run in progress
        again = retry_change(self.store, self.clock, wf, index)
        # The run that ended it may still be on its way out (a cancelled attempt stopping):
        # it ends before the workflow is reopened, so it never sees it running again.
        return await self._runs.replace(wf, again, before=True, check=check)

    async def cancel(self, workflow_id: str | Workflow, reason: str = "cancelled") -> bool:
        """Cancel a workflow: no further step starts and a running attempt is interrupted.

        An attempt this engine runs is interrupted at once; one that another engine runs
        (another process) is interrupted at that engine's next lease renewal, within its
        ``lease_ttl / 3`` seconds. A body in a worker thread cannot be interrupted: it is no
        longer waited for, and what it returns is refused.

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
            await self.store.start_workflow(
                wf.id, wf.step_names, wf.input, now, definition=wf.definition
            )
        elif await self.store.get_workflow(wid) is None:
            raise UnknownWorkflowError(
                f"workflow {wid!r} is neither registered with this engine nor in the store"
            )
        cancelled = await self.store.cancel_workflow(wid, reason, now)
        if cancelled:
            self._driver.interrupt(wid)
        if not self._runs.busy(wid):  # else dropped when its run in progress returns
            self._registry.remove(wid)
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
        """Interrupt this engine's runs in progress; return once their step bodies stopped.

        Each step attempt that runs is interrupted (its job cancelled) and recorded as
        nothing, as a crash would be; its lease is kept alive until the body has really
        returned (a thread, or a body that ignores cancellation, is waited for, however long
        it takes), then handed back, so that another engine can continue the step at once
        and never runs it beside the old body. Callers awaiting those runs get
        `asyncio.CancelledError`. A body that a workflow cancel left running (a thread, a
        body that ignores cancellation) and the durable calls of cancelled attempts are
        waited for too, so that every call that started has its outcome recorded before the
        store can close. The engine can be used again afterwards.

        Raises:
            DeadlockError: Called from inside a step body of one of these runs, which close
                would wait for; schedule it instead
                (``asyncio.get_running_loop().create_task(engine.close())``).
        """
        inside = IN_STEP.get()
        if inside is not None and self._runs.busy(inside):
            raise DeadlockError(
                f"close() called from inside a step of workflow {inside!r} would wait for "
                "that step to stop; schedule it instead "
                "(asyncio.get_running_loop().create_task(engine.close()))"
            )
        self._deadlines.cancel_all()
        while tasks := self._runs.in_progress():
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
        await self._driver.drain()

    async def __aenter__(self) -> WorkflowEngine:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Leave ``async with``: let the runs in progress end, or, if the block raised,
        interrupt them; then `close`."""
        while exc_type is None and (pending := self._runs.in_progress()):
            await asyncio.wait(pending)
        await self.close()

    def _drop_if_ended(self, workflow_id: str, task: asyncio.Task[RunResult]) -> None:
        """Drop the registration once a run (or continuation) ended it, if nothing else runs."""
        if task.cancelled() or task.exception() is not None:  # retrieved: never "unretrieved"
            return
        if task.result().status in _ENDED and not self._runs.busy(workflow_id):
            self._registry.remove(workflow_id)  # the store keeps the record

    async def _expire(self, workflow_id: str) -> None:
        """A wait's deadline passed: run the workflow (the wait times out, or was answered)."""
        with contextlib.suppress(AgentqError):  # not runnable here (any more): left stored
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

    def tables(self) -> dict[str, int]:
        """How many entries each per-workflow table holds: registrations, runs, deliveries
        and the driver's (attempts, wake-ups, bodies left running). For tests and leaks."""
        return {
            "registered": len(self._registry),
            **self._runs.sizes(),
            **self._driver.tables(),
        }


_ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
"""Run statuses after which a workflow's registration is dropped."""
