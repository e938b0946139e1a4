"""`Runs`: an engine's runs in progress, one per workflow, and what replaces them.

A run is a task executing ``Driver.drive`` for one workflow. Concurrent `run` calls share it;
`run_soon` (and `recover`) start it in the background. A `resume` or a `retry` changes the
stored workflow, then replaces the run in progress with a new one (a run returning from a
wait, or stopping after a cancel, would not see the change): a *continuation*, which a `run`
called meanwhile joins. Every task is shielded from its callers: cancelling a caller never
stops a run nor a continuation whose change was asked for.

Private to `agentq.workflows.engine`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agentq.errors import AgentqError, QueueClosed, StoreClosedError
from agentq.store import WorkflowRow
from agentq.workflows.model import RunResult, Workflow
from agentq.workflows.workers import LOGGER

__all__ = ["Runs"]


class Runs:
    """The runs of one engine, by workflow id, and the continuations in flight.

    Args:
        drive: Runs one workflow to its `RunResult` (the driver's ``drive``), given the
            workflow's stored row when it was read just before (else None).
        ended: Told (workflow id, task) when a run or a continuation has ended, after it was
            forgotten (the engine drops the registration of a workflow that has ended).
    """

    def __init__(
        self,
        drive: Callable[[Workflow, WorkflowRow | None], Coroutine[Any, Any, RunResult]],
        ended: Callable[[str, asyncio.Task[RunResult]], None] | None = None,
    ) -> None:
        self._drive = drive
        self._ended = ended
        self._runs: dict[str, asyncio.Task[RunResult]] = {}
        self._continuing: dict[str, asyncio.Task[RunResult]] = {}
        self._watchers: list[Callable[[str, asyncio.Task[RunResult]], None]] = []
        self._told: set[type[AgentqError]] = set()  # causes of stopped runs logged already

    def watch(self, told: Callable[[str, asyncio.Task[RunResult]], None]) -> Callable[[], None]:
        """Tell `told` the workflow id and task of each run that ends from now on (after the
        store holds what it recorded); return the function that stops telling.

        Runs only: a resume's or a retry's continuation changes the store only through the
        run it starts, whose end is told."""
        self._watchers.append(told)

        def unwatch() -> None:
            with contextlib.suppress(ValueError):
                self._watchers.remove(told)

        return unwatch

    def running(self, workflow_id: str) -> bool:
        """Whether a run of the workflow is in progress."""
        return workflow_id in self._runs

    def busy(self, workflow_id: str) -> bool:
        """Whether a run of the workflow, or a resume or retry continuing it, is in progress."""
        return workflow_id in self._runs or workflow_id in self._continuing

    def ids_in_progress(self) -> list[str]:
        """Ids of the workflows whose run or continuation has not ended yet, sorted."""
        items = (*self._runs.items(), *self._continuing.items())
        return sorted({wid for wid, task in items if not task.done()})

    def tasks(self) -> list[asyncio.Task[RunResult]]:
        """The runs in progress."""
        return list(self._runs.values())

    def task_of(self, workflow_id: str) -> asyncio.Task[RunResult] | None:
        """The run (or continuation) of the workflow in progress, or None."""
        task = self._runs.get(workflow_id) or self._continuing.get(workflow_id)
        return None if task is None or task.done() else task

    def in_progress(self) -> list[asyncio.Task[RunResult]]:
        """The runs and continuations that have not ended yet."""
        return [t for t in (*self._runs.values(), *self._continuing.values()) if not t.done()]

    def sizes(self) -> dict[str, int]:
        """How many runs and continuations are in progress, and how many watchers are told
        of their ends (for tests and leaks)."""
        return {
            "runs": len(self._runs),
            "delivering": len(self._continuing),
            "watchers": len(self._watchers),
        }

    def start(self, wf: Workflow, row: WorkflowRow | None = None) -> asyncio.Task[RunResult]:
        """Return the run of `wf` in progress, starting one if there is none (given `row`,
        `wf`'s stored row read just before, if any: see `Driver.drive`)."""
        task = self._runs.get(wf.id)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._drive(wf, row), name=f"agentq.run:{wf.id}"
            )
            self._runs[wf.id] = task
            task.add_done_callback(functools.partial(self._forget, wf.id))
        return task

    def _forget(self, workflow_id: str, task: asyncio.Task[RunResult]) -> None:
        if self._runs.get(workflow_id) is task:
            del self._runs[workflow_id]
        if not task.cancelled():
            task.exception()  # retrieved by the awaiting callers; avoid "never retrieved"
        if self._ended is not None:
            self._ended(workflow_id, task)
        for told in list(self._watchers):
            told(workflow_id, task)

    def start_soon(self, wf: Workflow) -> asyncio.Task[RunResult] | None:
        """Start a run of `wf` in the background, unless one is in progress or about to be.

        An exception the run raises is logged (its joiners get it too).

        Returns:
            The new run, or None if none was started.
        """
        if wf.id in self._runs or wf.id in self._continuing:
            return None
        task = self.start(wf)
        task.add_done_callback(self._log_failure)
        return task

    def start_soon_by(
        self,
        workflow_id: str,
        resolve: Callable[[], Awaitable[tuple[Workflow, WorkflowRow | None] | RunResult]],
    ) -> asyncio.Task[RunResult] | None:
        """`start_soon` for a workflow known only by id: the run first awaits `resolve` for
        it (a store read: the workflow and the stored row it was built from, or None), then
        drives it; a `RunResult` resolved (the workflow has ended, say in another process) is
        the run's result, quietly. `join` of that id shares the run meanwhile.

        Returns:
            The new run, or None if one is in progress or about to be.
        """
        if workflow_id in self._runs or workflow_id in self._continuing:
            return None

        async def resolved() -> RunResult:
            found = await resolve()
            if isinstance(found, RunResult):
                return found
            wf, row = found
            return await self._drive(wf, row)

        task = asyncio.get_running_loop().create_task(resolved(), name=f"agentq.run:{workflow_id}")
        self._runs[workflow_id] = task
        task.add_done_callback(functools.partial(self._forget, workflow_id))
        task.add_done_callback(self._log_failure)
        return task

    async def join(self, wf: Workflow, row: WorkflowRow | None = None) -> RunResult:
        """Wait for the run of `wf`, starting one if needed (after a continuation in flight).

        `row`: `wf`'s stored row, read just before by the caller (the run then does not
        store `wf` again), or None.
        """
        continuing = self._continuing.get(wf.id)
        if continuing is not None:  # a resume or retry in flight continues it: join that
            await asyncio.wait({continuing})
            row = None  # the continuation changed the stored workflow
        return await asyncio.shield(self.start(wf, row))

    async def replace(
        self,
        wf: Workflow,
        change: Callable[[], Awaitable[None]],
        *,
        before: bool,
        check: Callable[[], Awaitable[None]] | None = None,
        row: WorkflowRow | None = None,
    ) -> RunResult:
        """Store `change`, then replace the run of `wf` in progress with a new one.

        A `join` of `wf` waits for this from the moment it is called.

        Args:
            wf: The workflow.
            change: Makes the stored change (resume a step, reopen the workflow); raising
                leaves the runs as they are.
            before: Let the run in progress end before the change is made (else after).
            check: Run first (before any wait); raising refuses the whole replacement.
            row: `wf`'s stored row, read just before and `wf` built from it (see `start`),
                or None: the new run then does not store `wf` again.

        Returns:
            The new run's `RunResult`. Shielded: once called, the change is made and the run
            continues even if the caller is cancelled meanwhile.
        """

        async def continuation() -> RunResult:
            if check is not None:
                await check()
            if not before:
                await change()
            previous = self._runs.get(wf.id)
            if previous is not None:
                await asyncio.wait({previous})
                if self._runs.get(wf.id) is previous:
                    del self._runs[wf.id]
            if before:
                await change()
            return await asyncio.shield(self.start(wf, row))

        task = asyncio.get_running_loop().create_task(
            continuation(), name=f"agentq.continue:{wf.id}"
        )
        self._continuing[wf.id] = task
        task.add_done_callback(functools.partial(self._continued, wf.id))
        return await asyncio.shield(task)

    def _log_failure(self, task: asyncio.Task[RunResult]) -> None:
        """Log what a background run raised. A run stopped because its store or its queue was
        closed under it (`StoreClosedError`, `QueueClosed`: an engine used without ``async
        with``, its store or queue closed in a notebook cell) is said in one line, without a
        traceback: at WARNING the first time for each cause, at DEBUG after."""
        if task.cancelled() or (exc := task.exception()) is None:
            return
        cause = next((c for c in _STOPPED if isinstance(exc, c)), None)
        if cause is None:
            LOGGER.warning("the background run %s raised", task.get_name(), exc_info=exc)
            return
        first = cause not in self._told
        self._told.add(cause)
        LOGGER.log(
            logging.WARNING if first else logging.DEBUG,
            "the background run %s stopped: %s (%s). %s%s",
            task.get_name(), *_STOPPED[cause][:1], exc, _STOPPED[cause][1],
            " Other runs it stops are logged at DEBUG." if first else "",
        )

    def _continued(self, workflow_id: str, task: asyncio.Task[RunResult]) -> None:
        if self._continuing.get(workflow_id) is task:
            del self._continuing[workflow_id]
        if not task.cancelled():
            task.exception()  # retrieved by the awaiting caller; avoid "never retrieved"
        if self._ended is not None:
            self._ended(workflow_id, task)


_STOPPED: dict[type[AgentqError], tuple[str, str]] = {
    StoreClosedError: (
        "its store was closed under it",
        "What it recorded is kept and nothing more is; a step it held stays leased until its "
        "lease expires, then recover() or run() with an open store continues it. Close the "
        "engine before its store (await engine.close()) to hand its leases back at once.",
    ),
    QueueClosed: (
        "its queue was closed under it",
        "Nothing more was recorded, and the lease of the step it ran was handed back: "
        "recover() or run() on an engine with an open queue continues it.",
    ),
}
"""Why a background run stopped, by the error it ended with: what happened, what now."""
