"""`Deadlines`: the live engine's timers that continue a workflow once a wait's deadline passes.

The engine keeps two of them: one for waits' deadlines (a `StepContext.wait_for_input`
with a timeout, a `StepContext.sleep`), one for workflows' own deadlines (`WorkflowDef(...,
timeout=)`, ``engine.start(..., deadline=)``), whose timer fails the workflow and interrupts
its attempt.

A `StepContext.wait_for_input` with a timeout stores its deadline; whichever `run` or
`recover` of the workflow comes after it times the wait out. While an engine lives, it also
keeps one timer per waiting workflow (the driver reports each stored deadline through
``Driver.on_deadline``), so that the wait times out on time without anybody calling `run`.
Timers are cancelled by `WorkflowEngine.close`; a lost timer loses nothing (the deadline is
stored).

Private to `agentq.workflows.engine`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from agentq.clock import Clock

__all__ = ["Deadlines"]


class Deadlines:
    """One timer per workflow, each continuing it at its wait's deadline.

    Args:
        clock: Returns the engine's clock (read when a timer starts).
        expire: Continues a workflow once its deadline has passed (a run of it); what it
            raises is dropped, since the deadline stays stored for the next run.
    """

    def __init__(
        self,
        clock: Callable[[], Clock],
        expire: Callable[[str], Coroutine[Any, Any, None]],
    ) -> None:
        self._clock = clock
        self._expire = expire
        self._timers: dict[str, asyncio.Task[None]] = {}

    def set(self, workflow_id: str, deadline: float) -> None:
        """Continue `workflow_id` at `deadline` (Unix seconds), replacing its earlier timer."""
        old = self._timers.get(workflow_id)
        if old is not None:
            old.cancel()
        timer = asyncio.get_running_loop().create_task(
            self._fire(workflow_id, deadline), name=f"agentq.deadline:{workflow_id}"
        )
        self._timers[workflow_id] = timer
        timer.add_done_callback(functools.partial(self._done, workflow_id))

    def cancel(self, workflow_id: str) -> None:
        """Cancel the timer of `workflow_id`, if any (it ended: nothing to continue)."""
        timer = self._timers.pop(workflow_id, None)
        if timer is not None:
            timer.cancel()

    def cancel_all(self) -> None:
        """Cancel every timer (the engine closes)."""
        for timer in list(self._timers.values()):
            timer.cancel()

    async def _fire(self, workflow_id: str, deadline: float) -> None:
        clock = self._clock()
        await clock.sleep(max(0.0, deadline - clock.time()))
        await self._expire(workflow_id)

    def _done(self, workflow_id: str, task: asyncio.Task[None]) -> None:
        if self._timers.get(workflow_id) is task:
            del self._timers[workflow_id]
        if not task.cancelled():
            task.exception()  # dropped: the deadline is stored, the next run acts on it
