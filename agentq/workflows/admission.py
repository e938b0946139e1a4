"""`Admission`: an engine claims a step only when its lane can start the step's body.

A run claims its step (taking the lease) before the attempt's job waits in the lane for a
permit and, in a rate-limited lane, for room in the rate window. Without a bound, an engine
given many runs at once (a run group's members, `recover`, many ``run_soon``) would claim
every one of them at once and hold all those leases while the jobs wait, so that another
engine serving the same store (another process) finds nothing ready. `Admission` bounds
the steps an engine has claimed and not yet finished to its lane's permits: a run waits
here, holding nothing, until one of those slots is free, then claims; the other runs'
steps stay ready in the store, for this engine's next slot or for any other engine.

A slot is taken just before the claim and given back when the claim answers anything but
`Claimed` (done, waiting, closed, held by another, a retry time to come) or, for a claimed
step, once the attempt has ended (its body stopped, its outcome recorded or its lease handed
back). Slots are handed on first come, first served. A claim made for a run by ``serve``
(which claims only what its free permits can start) takes its slot at once (`take`). Child
runs wait for slots as any run (``linking`` starts them outside the parent's body, which
parks and so gives its slot back). A run started from inside a step body (``IN_STEP`` set:
a body that awaits ``engine.run`` of another workflow) takes no slot: its attempts run
inline on the waiting body's permit, and waiting for a slot that body holds would never end.

The workflow's waker cuts a wait short (a cancel): the run then claims without a slot, and
finds the workflow closed. Private to `agentq.workflows.driver`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from agentq.store import Claimed, ClaimResult
from agentq.workflows.attempts import IN_STEP
from agentq.workflows.waits import until

__all__ = ["Admission"]


class Admission:
    """The claim slots of one engine (see the module docstring).

    Args:
        slots: How many steps the engine may hold claimed at once (its lane's permits).
        halted: Whether the engine stopped taking work (serve's graceful stop).
        park: Waits until the engine closes (the driver's ``park``); a run admitted while
            halted gives its slot back and parks instead of claiming.

    Use it on the engine's event loop.
    """

    def __init__(
        self, slots: int, halted: Callable[[], bool], park: Callable[[], Awaitable[None]]
    ) -> None:
        self.slots = slots
        self._halted = halted
        self._park = park
        self.held: set[str] = set()
        """The workflows whose run holds a slot (claiming, or running a claimed attempt)."""
        self._waiting: deque[tuple[str, asyncio.Future[None]]] = deque()

    def waiting(self) -> int:
        """How many runs wait for a slot now (those cut short may count until passed by)."""
        self._prune()
        return len(self._waiting)

    async def claim(
        self,
        workflow_id: str,
        waker: asyncio.Future[None],
        claim: Callable[[], Awaitable[ClaimResult]],
    ) -> ClaimResult:
        """Wait for a slot (unless cut short by `waker`), then `claim`; keep the slot only if
        the answer is `Claimed` (`leave` gives it back after the attempt).

        Raises:
            Whatever `claim` raises (the slot is given back); `asyncio.CancelledError`.
        """
        await self._enter(workflow_id, waker)
        if self._halted():  # stopped while waiting: no more work
            self.leave(workflow_id)
            await self._park()
        try:
            result = await claim()
        except BaseException:
            self.leave(workflow_id)
            raise
        if not isinstance(result, Claimed):
            self.leave(workflow_id)
        return result

    def take(self, workflow_id: str) -> None:
        """Hold a slot for a step claimed already (by ``serve``), free or not."""
        if IN_STEP.get() is None:
            self.held.add(workflow_id)

    def leave(self, workflow_id: str) -> None:
        """Give the workflow's slot back, if it holds one, to the first run waiting."""
        if workflow_id not in self.held:
            return
        self.held.discard(workflow_id)
        self._hand_on()

    async def _enter(self, workflow_id: str, waker: asyncio.Future[None]) -> None:
        if IN_STEP.get() is not None or workflow_id in self.held:
            return  # nested in a step body (no slot), or holding one already
        if len(self.held) < self.slots and not self.waiting():  # first come, first served
            self.held.add(workflow_id)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((workflow_id, fut))
        try:
            await until(waker, fut)  # False: a cancel, the run claims without a slot
        except BaseException:
            if fut.done() and not fut.cancelled():  # handed a slot just now: pass it on
                self.leave(workflow_id)
            raise
        finally:
            fut.cancel()  # no-op when handed a slot; else _hand_on skips it

    def _prune(self) -> None:
        waiting = self._waiting
        while waiting and waiting[0][1].done():  # waits cut short, at the head
            waiting.popleft()

    def _hand_on(self) -> None:
        waiting = self._waiting
        while waiting and len(self.held) < self.slots:
            workflow_id, fut = waiting.popleft()
            if not fut.done():
                self.held.add(workflow_id)
                fut.set_result(None)
