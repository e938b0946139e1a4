"""`WorkflowEngine`: the public verbs over workflows (run, run_soon, status, close).

Its base classes hold the other verbs: `Endings` (``endings.py``: on_end, and what the
engine does when a run or a deadline ends), which derives from `Scheduling`
(``scheduling.py``: schedule, unschedule), which derives from `Forks` (``forking.py``:
fork), which derives from `Interventions` (``interventions.py``: resume, retry, cancel),
which derives from `Registrations` (``registrations.py``: register, start, serve...).

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
from types import TracebackType

from agentq.clock import Clock
from agentq.errors import DeadlockError, UnknownWorkflowError, WorkflowMismatchError
from agentq.keys import validate_key
from agentq.queue import Priority, Queue
from agentq.retry import Backoff
from agentq.store import DurableStore, WorkflowRow
from agentq.workflows.attempts import IN_STEP
from agentq.workflows.deadlines import Deadlines
from agentq.workflows.driver import Driver
from agentq.workflows.endings import Endings
from agentq.workflows.groups import RunGroup
from agentq.workflows.hooks import DEFAULT_HOOK_BACKOFF, EndHooks
from agentq.workflows.linking import ChildLinks
from agentq.workflows.model import RunResult, StepStatus, Workflow
from agentq.workflows.results import status_of, stored_result
from agentq.workflows.runs import Runs
from agentq.workflows.serving import Server

__all__ = ["WorkflowEngine"]


class WorkflowEngine(Endings):
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
        hook_backoff: The wait before an end-of-run hook that raised is called again
            (see `on_end`); default 1 s, doubling, at most 5 minutes.

    Raises:
        ValueError: `lease_ttl` or `poll_interval` is not a positive number, or `priority`
            is not a lane.
        TypeError: `queue` is not a `Queue`, `store` does not implement `DurableStore`, or
            `hook_backoff` is not a `Backoff`.
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
        hook_backoff: Backoff = DEFAULT_HOOK_BACKOFF,
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
        self._ends = Deadlines(lambda: self.clock, self._time_out)  # workflows' deadlines
        self._driver.on_workflow_deadline = self._ends.set
        self._server = Server(self._driver, self._registry, self._runs, self._ticker)  # serve()
        self._end_hooks = EndHooks(self._driver, self._registry, hook_backoff)
        self._server.on_poll = self._end_hooks.soon
        self._links = ChildLinks(self._registry, self._runs, self._instance, self.run)
        self._driver.spawner = self._links  # runs the children that steps start (ctx.child)
        self._driver.on_child = self._links.join

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
                `StoreClosedError` (a `StoreError`): the store was closed under the run;
                its attempt's body was interrupted within a lease renewal (a background
                run stopped so is logged in one line, see `run_soon`).
        """
        stored: WorkflowRow | None = None  # the row an instance found by id was built from
        if isinstance(workflow, str):
            found, stored = await self._find_stored(workflow)
            if found is None:  # stored and ended: its stored result, nothing appended
                assert stored is not None
                self._end_hooks.soon(workflow)  # its end-of-run hooks, if still due
                return await stored_result(self.store, stored)
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
            return await self._runs.join(wf, stored if wf is workflow else None)
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
        through ``logging.getLogger("agentq")``; a run stopped because its store or its queue
        was closed under it (`StoreClosedError`, `QueueClosed`: a notebook cell closed one)
        in one line without a traceback, at WARNING for the first such run of this engine
        and at DEBUG after. `agentq.recover` starts its runs this way.

        Args:
            workflow: A `Workflow` (registered on the way), the id of a registered one, or
                (as `run` takes it) the id of a stored instance of a `WorkflowDef`
                registered here. An id that is not registered as a plain workflow is looked
                up in the store by the background run itself, since this method cannot
                wait: what that lookup raises (`UnknownWorkflowError`,
                `WorkflowMismatchError`, `StoreError`) is logged and goes to whoever joins
                the run with ``run(id)``. An instance that has ended by then (another
                process finished it) is not an error: the run ends at once with its stored
                result, said at DEBUG only.

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

    def group(self, group_id: str) -> RunGroup:
        """The run group `group_id` of this engine's store (``docs/workflows.md``, "Run
        groups"): `RunGroup.submit`, `results`, `status`, `resume`, `cancel`, `forget`.

        Nothing is read or written until one of those is awaited.

        Raises:
            InvalidKeyError / TypeError: A bad `group_id`.
            ValueError: `group_id` holds a ``/``.
            TypeError: The store keeps no run groups.
        """
        return RunGroup(self, group_id, self._runs.watch, self._runs.task_of)

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
        self._ends.cancel_all()
        await self._end_hooks.stop()
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
        if exc_type is None:
            await self._end_hooks.settle()  # the hooks of the runs that just ended
        await self.close()

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
            **self._links.sizes(),
        }
