"""`Endings`: what an engine does when a run, a workflow's deadline or a wait's deadline ends.

`WorkflowEngine` (``engine.py``) derives from this class, as this class derives from
`Scheduling` (``scheduling.py``). It holds the engine's reactions, which the engine wires
into its parts: a run that ended drops its registration, continues its parent, cancels its
deadline and delivers its end-of-run hooks (`_drop_if_ended`, given to `Runs`); a
workflow's deadline fails it and interrupts its attempts (`_time_out`, a `Deadlines`
timer); a wait's deadline runs the workflow again (`_expire`); and the end-of-run hooks of
this engine (`on_end`, through `EndHooks`).
"""

from __future__ import annotations

import asyncio
import contextlib

from agentq.errors import AgentqError
from agentq.workflows.deadlines import Deadlines
from agentq.workflows.hooks import EndHook, EndHooks
from agentq.workflows.linking import ChildLinks
from agentq.workflows.model import RunResult, RunStatus, Workflow
from agentq.workflows.scheduling import Scheduling

__all__ = ["Endings"]

_ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
"""Run statuses after which a workflow's registration is dropped."""


class Endings(Scheduling):
    """The engine's reactions to ends, and `on_end` (a subclass provides `run` and the
    parts below, besides what `Scheduling` asks for; `WorkflowEngine` does)."""

    _links: ChildLinks
    """Runs the children that steps start and continues their parents (made by the engine)."""

    _ends: Deadlines
    """The timers of the workflows' own deadlines (made by the engine)."""

    _end_hooks: EndHooks
    """The end-of-run hooks and their delivery (made by the engine)."""

    async def run(self, workflow: Workflow | str) -> RunResult:
        """Run a workflow (provided by the engine)."""
        raise NotImplementedError

    def _drop_if_ended(self, workflow_id: str, task: asyncio.Task[RunResult]) -> None:
        """Drop the registration once a run (or continuation) ended it, if nothing else runs;
        continue the parent of a child run that ended."""
        if task.cancelled() or task.exception() is not None:  # retrieved: never "unretrieved"
            return
        self._links.ended(workflow_id, task)
        if task.result().status in _ENDED:
            self._ends.cancel(workflow_id)  # its deadline no longer matters
            self._end_hooks.soon(workflow_id)
        if task.result().status in _ENDED and not self._runs.busy(workflow_id):
            self._registry.remove(workflow_id)  # the store keeps the record

    async def _time_out(self, workflow_id: str) -> None:
        """A workflow's deadline passed: fail it in the store (``WorkflowTimedOut``, which
        cancels its child runs) and interrupt its attempt and its children's here, as a
        cancel does (its run then returns ``failed``)."""
        if not await self.store.time_out_workflow(workflow_id, self.clock.time()):
            row = await self.store.get_workflow(workflow_id)  # failed elsewhere first?
            if row is None or not row.state.closed:
                return
        self._end_hooks.soon(workflow_id)
        for other in [workflow_id, *self._runs.ids_in_progress()]:
            if other == workflow_id or other.startswith(workflow_id + "/"):
                self._driver.interrupt(other)

    async def _expire(self, workflow_id: str) -> None:
        """A wait's deadline passed: run the workflow (the wait times out, or was answered)."""
        with contextlib.suppress(AgentqError):  # not runnable here (any more): left stored
            await self.run(workflow_id)

    def on_end(self, fn: EndHook) -> None:
        """Call `fn(result)` (sync, on the engine's loop, or async) with the final `RunResult`
        of every workflow that ends, at least once, after its definition's ``on_end``.

        With hooks of its own, this engine delivers the ends of every definition it
        registered and of plain workflows; an end another engine delivers gets that
        engine's hooks (give every serving engine the same). See docs/workflows.md.

        Raises:
            TypeError: `fn` is not callable.
        """
        self._end_hooks.add(fn)

    def _ended_here(self, workflow_id: str) -> None:
        self._end_hooks.soon(workflow_id)
