"""Shared budgets: the rate-limited lanes of a queue whose store keeps their windows.

With a store that is a `agentq.queue.rate_ledger.RateLedger` (`Queue(store=...)`), a lane
with a `LaneConfig.rate` or `LaneConfig.tokens` budget starts a job only after the store has
charged it (`RateLedger.take_budget`), so that every process on the store keeps within the
same budget. `SharedBudgets` asks the store for one start of a lane at a time, in a task of
its own (the arbiter's pump never awaits): the store's answer is either a charge, kept as the
lane's *grant* until the arbiter gives the permit that uses it, or a time to ask again, which
the arbiter's timer waits for. A pause stored by another process pauses the lane here too;
while a lane is paused it asks the store again every `PAUSE_RECHECK` seconds (once its own
pause is stored), so that a pause lifted in the store (`Queue.resume_lane`, in any process)
ends here too: a start granted then lifts the pause here (a retry already waiting out the
pause, or a start granted before it, keeps its wait).

A pause this process decides (a failure with ``Retry-After``) is written to the store
(`RateLedger.pause_lane`); a finished job's tokens, when its output reports them, settle its
charge (`RateLedger.settle_budget`). Those writes run in tasks too; a store that fails is
reported to the loop's exception handler and the lane asks again after `ERROR_BACKOFF`
seconds. Lanes without budgets never touch the store.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from typing import Any

from agentq.queue.lane import Lane
from agentq.queue.ledger import Ledger
from agentq.queue.rate_ledger import RateLedger
from agentq.queue.records import Record

ERROR_BACKOFF = 1.0
"""Seconds a lane waits before asking a store that failed again."""

PAUSE_RECHECK = 1.0
"""Seconds between the asks of a paused lane: a pause lifted in the store by another process
(`Queue.resume_lane`) ends here within about that time."""


def shares(lane: Lane[Record]) -> bool:
    """Whether `lane` has a budget (a rate or a token budget) that a store may share."""
    return lane.starts is not None or lane.token_budget is not None


class SharedBudgets:
    """The grants, pending asks and store writes of a queue's shared lanes.

    Args:
        ledger: The queue's books (lanes, clock, loop).
        store: The store that keeps the windows.
    """

    __slots__ = ("asking", "grants", "ledger", "retry_at", "store", "storing", "tasks")

    def __init__(self, ledger: Ledger, store: RateLedger) -> None:
        self.ledger = ledger
        self.store = store
        self.grants: dict[Lane[Record], int] = {}  # a charge held for the lane's next start
        self.asking: set[Lane[Record]] = set()  # a take is in flight
        self.retry_at: dict[Lane[Record], float] = {}  # ask again at this clock time
        self.tasks: set[asyncio.Task[None]] = set()
        self.storing: dict[Lane[Record], int] = {}  # pauses of this process being stored
        for lane in ledger.lanes.values():
            if shares(lane):
                lane.on_pause = self._pauser(lane)

    def ready_at(
        self, lane: Lane[Record], rec: Record, now: float, pump: Callable[[], None]
    ) -> float:
        """The clock time from which `rec` may start as far as the store goes.

        `now` (or the lane's pause) when a grant is held; else a take is asked for (unless
        one is in flight or the store said when to ask again), whose answer calls `pump`,
        and the time returned is infinite or that of the next ask.
        """
        if lane in self.grants:
            return max(now, lane.paused_until)
        if lane in self.asking:
            return math.inf
        paused = lane.paused_until
        if paused > now and self.storing.get(lane):  # ask once the store has it
            return min(paused, now + PAUSE_RECHECK)
        again = self.retry_at.get(lane, 0.0)
        if again > now:  # a paused lane asks every PAUSE_RECHECK: lifted elsewhere?
            return again
        job = rec.job
        estimate = 0 if job is None or job.tokens is None else job.tokens
        self.asking.add(lane)
        self._spawn(self._take(lane, estimate, pump), f"agentq-{lane.priority}-budget")
        return math.inf

    def consume(self, lane: Lane[Record]) -> int:
        """Take the lane's grant for the record given its permit; return the charge id."""
        return self.grants.pop(lane)

    def settle(self, charge: int, tokens: int) -> None:
        """Settle a charge by the tokens a job used (in a task)."""
        self._spawn(self.store.settle_budget(charge, tokens), "agentq-budget-settle")

    async def resume(self, lane: Lane[Record], now: float) -> bool:
        """Lift `lane`'s stored pause (`RateLedger.resume_lane`); True if it was paused.

        The store writes in flight land first (a pause being stored is lifted too), and the
        takes in flight after (an answer read before the lift brings no pause back), then
        the lane asks the store again at its next start.
        """
        await self.idle()
        lifted = await self.store.resume_lane(str(lane.priority), now)
        await self.idle()
        self.retry_at.pop(lane, None)
        return lifted

    async def idle(self) -> None:
        """Wait until no store call of these budgets is in flight (for tests and close)."""
        while self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _take(self, lane: Lane[Record], estimate: int, pump: Callable[[], None]) -> None:
        clock = self.ledger.clock
        now = clock.time()
        seen = lane.paused_until
        try:
            grant = await self.store.take_budget(
                str(lane.priority),
                rate=None if lane.starts is None else lane.starts.rate,
                tokens=None if lane.token_budget is None else lane.token_budget.rate,
                estimate=estimate,
                now=now,
            )
        except asyncio.CancelledError:
            self.asking.discard(lane)
            raise
        except Exception as exc:
            self.asking.discard(lane)
            self.retry_at[lane] = now + ERROR_BACKOFF
            self._report(exc, f"agentq: the store failed to charge a start of lane {lane.priority}")
            pump()
            return
        self.asking.discard(lane)
        if grant.paused_until > now:
            lane.pause(grant.paused_until, share=False)
        elif seen > now and lane.paused_until == seen and not self.storing.get(lane):
            lane.paused_until = 0.0  # the store has no pause any more: lifted elsewhere
        if grant.charge is not None:
            self.grants[lane] = grant.charge
        elif grant.paused_until > now:
            self.retry_at[lane] = now + min(max(grant.wait, 0.0), PAUSE_RECHECK)
        else:
            self.retry_at[lane] = now + max(grant.wait, 0.0)
        pump()

    def _pauser(self, lane: Lane[Record]) -> Callable[[float], None]:
        def share(until: float) -> None:
            self.storing[lane] = self.storing.get(lane, 0) + 1
            self._spawn(self._store_pause(lane, until), "agentq-lane-pause")

        return share

    async def _store_pause(self, lane: Lane[Record], until: float) -> None:
        try:
            await self.store.pause_lane(str(lane.priority), until)
        finally:
            self.storing[lane] -= 1

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = self.ledger.running_loop().create_task(work, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._report(exc, f"agentq: a store write of {task.get_name()} failed")

    def _report(self, exc: BaseException, message: str) -> None:
        self.ledger.running_loop().call_exception_handler({"message": message, "exception": exc})
