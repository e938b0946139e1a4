"""`WorkflowEngine`: the public verbs over workflows (run, resume, cancel, status, close).

The engine keeps one run per workflow: concurrent `run` calls (and the run a `resume`
continues) share it. Each run is a task executing `Driver.drive` (``driver.py``), which claims,
attempts and records the steps one after another; a `Registry` (``registry.py``) holds the
step bodies by workflow id, since step bodies are code, not data: after a restart the program
registers its workflows again, then calls `agentq.recover`.

A long-lived engine keeps only what it still needs: a registration is dropped once its run
has ended completed, failed or cancelled (the store keeps the record, and `run`, `resume` and
`status` of such an id still answer from it); waiting workflows stay registered, since
`resume` needs their bodies. Runs, attempts and wake-ups are forgotten as they end.

Every transition is an event in the store's append-only log.
"""

from __future__ import annotations

import asyncio
import functools
from types import TracebackType
from typing import Any

from agentq.clock import Clock
from agentq.errors import DeadlockError, UnknownWorkflowError
from agentq.keys import validate_key
from agentq.queue import Priority, Queue
from agentq.store import DurableStore
from agentq.workflows.attempts import IN_STEP
from agentq.workflows.driver import Driver
from agentq.workflows.model import RunResult, RunStatus, StepStatus, Workflow
from agentq.workflows.registry import Registry, step_index
from agentq.workflows.results import ended_result, refuse_resume, status_of

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
        self._registry = Registry()
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

    def unregister(self, name: str) -> bool:
        """Forget the workflow registered under `name` (a workflow id).

        The store keeps its record; only the step bodies are forgotten, so `resume` and
        `recover` can no longer continue it here until it is registered again. A run in
        progress goes on (it holds its bodies). Registrations of workflows whose run ended
        completed, failed or cancelled are dropped without this call.

        Args:
            name: A workflow id (named definitions will be accepted here too).

        Returns:
            True if something was registered under `name`, else False.

        Raises:
            TypeError: `name` is not a str.
        """
        if not isinstance(name, str):
            raise TypeError(f"unregister() expects a workflow id (str), got {name!r}")
        return self._registry.remove(name)

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
        returns its stored result and appends nothing (given by id, also once its
        registration was dropped). Concurrent calls for one workflow in this engine share one
        run (each step executes once). Cancelling the caller does not stop the run: use
        `cancel` for that. The registration is dropped when the run ends completed, failed
        or cancelled.

        Args:
            workflow: A `Workflow` (registered on the way), the id of a registered one, or
                the id of a stored workflow that has ended.

        Returns:
            A `RunResult` with status completed, waiting, failed or cancelled.

        Raises:
            UnknownWorkflowError: An id that is neither registered nor a stored workflow that
                has ended.
            WorkflowMismatchError: The id is stored (or registered) with different steps.
            PayloadError: The workflow input is not JSON or too large.
            QueueClosed: The queue closed before or while a step ran (see `close`).
            StoreError: The store failed; the run can be retried (or recovered) later.
        """
        if isinstance(workflow, str) and self._registry.get(workflow) is None:
            ended = await ended_result(self.store, workflow)
            if ended is not None:
                return ended
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
        self._drop_if_ended(workflow_id, task)

    def _drop_if_ended(self, workflow_id: str, task: asyncio.Task[RunResult]) -> None:
        """Drop the registration once a run (or delivery) ended it, if nothing else runs."""
        if task.cancelled() or task.exception() is not None:  # retrieved: never "unretrieved"
            return
        if task.result().status in _ENDED and not self._busy(workflow_id):
            self._registry.remove(workflow_id)  # the store keeps the record

    def _busy(self, workflow_id: str) -> bool:
        return workflow_id in self._runs or workflow_id in self._delivering

    async def resume(self, workflow_id: str, step: str | int, input: Any) -> RunResult:
        """Deliver `input` to a `Waiting` step and continue the workflow.

        The step runs again with ``ctx.resumed`` true, ``ctx.resume_input == input`` (None
        included) and ``ctx.attempt`` counted from 1; `StepResumed` records the input. Of
        concurrent resumes of one wait, exactly one wins; the others raise `NotWaitingError`.
        `input` is required: None is an answer too, so it must be given on purpose.

        Args:
            workflow_id: The workflow (registered with this engine, or stored and ended:
                then the refusal says why).
            step: The waiting step's name or 0-based index.
            input: A JSON value (None included).

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
        wf = self._registry.get(workflow_id) if isinstance(workflow_id, str) else None
        if wf is None:  # never recorded here: the store refuses an ended workflow's resume
            if await ended_result(self.store, workflow_id) is None:
                self._registry.lookup(workflow_id)  # raises UnknownWorkflowError
            await refuse_resume(self.store, self.clock.time(), workflow_id, step, input)
        index = step_index(workflow_id, wf.step_names, step)
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
        self._drop_if_ended(workflow_id, task)

    async def cancel(self, workflow_id: str, reason: str = "cancelled") -> bool:
        """Cancel a workflow: no further step starts and a running attempt is interrupted.

        Idempotent: `WorkflowCancelled` is recorded once; cancelling a workflow that already
        ended records nothing. Its registration is dropped (at once, or when its run in
        progress returns).

        Returns:
            True if this call cancelled it, False if it had already ended.

        Raises:
            UnknownWorkflowError: The workflow is not stored.
        """
        cancelled = await self.store.cancel_workflow(workflow_id, reason, self.clock.time())
        if cancelled:
            self._driver.interrupt(workflow_id)
        if not self._busy(workflow_id):
            self._registry.remove(workflow_id)
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
        `asyncio.CancelledError`. The engine can be used again afterwards.

        Raises:
            DeadlockError: Called from inside a step body of one of these runs, which close
                would wait for; schedule it instead
                (``asyncio.get_running_loop().create_task(engine.close())``).
        """
        inside = IN_STEP.get()
        if inside is not None and inside in self._runs:
            raise DeadlockError(
                f"close() called from inside a step of workflow {inside!r} would wait for "
                "that step to stop; schedule it instead "
                "(asyncio.get_running_loop().create_task(engine.close()))"
            )
        while tasks := self._in_progress():
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)

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
        while exc_type is None and (pending := self._in_progress()):
            await asyncio.wait(pending)
        await self.close()

    def _in_progress(self) -> list[asyncio.Task[RunResult]]:
        return [t for t in (*self._runs.values(), *self._delivering.values()) if not t.done()]

    def running(self, workflow_id: str) -> bool:
        """Whether this engine is running the workflow right now."""
        return workflow_id in self._runs

    def tables(self) -> dict[str, int]:
        """How many entries each per-workflow table holds: registrations, runs, deliveries
        and the driver's (attempts, wake-ups, bodies left running). For tests and leaks."""
        return {
            "registered": len(self._registry),
            "runs": len(self._runs),
            "delivering": len(self._delivering),
            **self._driver.tables(),
        }


_ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
"""Run statuses after which a workflow's registration is dropped."""
