"""Arbitration: which waiting job of which gated lane gets the next permit, and when.

A lane is *gated* when it has a budget (`LaneConfig.rate`, `LaneConfig.tokens`), when a
failure paused it (`agentq.queue.rates.retry_after`), or always when the queue shares
``total_permits`` between its lanes. A gated lane never passes a permit on by itself: every
time a record is admitted to it or a permit of it is released, the dispatcher calls
`Arbiter.pump`, which starts records while it can:

- a lane is a candidate when it has a free permit of its own (``running < permits``), a
  waiting record, is not paused, and its budgets have room for that record now (one start in
  `LaneConfig.rate`, the job's estimate in `LaneConfig.tokens`);
- with ``total_permits``, nothing starts while the lanes together hold that many permits;
- among the candidates' first records, one that has waited ``aging`` seconds or more goes
  first (the oldest of those), else the one of the highest priority. A Low job under any
  load of High jobs so gets the first permit freed after it has waited ``aging`` seconds.

When a candidate is held back only by time (a window full, a pause), the arbiter sleeps on
the queue's clock until the earliest such time and pumps again: one timer task at a time,
cancelled when nothing waits for time. A started record's token charge is kept until its
body has stopped (`finished`), then settled by the usage its output reports.

With a store that keeps rate windows (`agentq.queue.rate_ledger.RateLedger`), the budgets
of the lanes that have them are the store's, shared by every queue on it: such a lane's
record is ready only once `agentq.queue.budgets.SharedBudgets` holds a charge the store
granted for it (the local windows then only count this queue's starts, for `LaneStats`).
The permits, ``total_permits`` and aging stay this queue's.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from agentq.outcomes import Completed
from agentq.queue.budgets import SharedBudgets, shares
from agentq.queue.jobs import check_seconds
from agentq.queue.lane import Lane
from agentq.queue.lanes import LANE_ORDER
from agentq.queue.ledger import Ledger
from agentq.queue.rate_ledger import RateLedger
from agentq.queue.rates import Charge, tokens_used
from agentq.queue.records import Record

Start = Callable[[Lane[Record], Record], None]
"""Starts a worker for a record that was just given a permit of its lane."""


class Arbiter:
    """The permits, budgets and pauses of a queue's gated lanes.

    Args:
        ledger: The queue's books (lanes, clock, loop).
        total_permits: Permits shared by all lanes (an int >= 1), or None: each lane has only
            its own `LaneConfig.permits`. When given, every lane is gated.
        aging: Seconds after which a waiting job goes before any newer one, whatever its
            priority (a finite number >= 0).

    Raises:
        TypeError: `aging` is not a number.
        ValueError: `total_permits` is not an int >= 1 or None, or `aging` is negative or
            not finite; the message names the value.
    """

    __slots__ = (
        "_timer", "_wake_at", "aging", "charges", "lanes", "ledger", "shared", "shared_charges",
        "total", "unsettled",
    )

    def __init__(self, ledger: Ledger, total_permits: int | None, aging: float) -> None:
        if total_permits is not None and (
            isinstance(total_permits, bool)
            or not isinstance(total_permits, int)
            or total_permits < 1
        ):
            raise ValueError(f"total_permits must be an int >= 1 or None, got {total_permits!r}")
        if aging is None:
            raise TypeError("aging must be a number of seconds, got None")
        check_seconds("aging", aging)
        self.ledger = ledger
        self.total = total_permits
        self.aging = float(aging)
        self.lanes = tuple(ledger.lanes[p] for p in LANE_ORDER)
        if total_permits is not None:
            for lane in self.lanes:
                lane.gated = True
        self.charges: dict[Record, Charge] = {}
        self.shared: SharedBudgets | None = None
        self.shared_charges: dict[Record, int] = {}  # the store's charge of a started record
        # Charges of finished jobs whose output reported no usage, by key, oldest first:
        # `settle_late` may still settle them while they are in their window.
        self.unsettled: dict[str, tuple[Lane[Record], Charge, int | None]] = {}
        self._timer: asyncio.Task[None] | None = None
        self._wake_at = math.inf
        if isinstance(ledger.store, RateLedger):
            self.share(ledger.store)

    def share(self, store: RateLedger) -> None:
        """Share the budgets of the lanes that have one through `store` (see `Queue.share_budgets`).

        Raises:
            TypeError: `store` is not a `RateLedger`.
        """
        if not isinstance(store, RateLedger):
            raise TypeError(f"store must be a RateLedger (a store of agentq), got {store!r}")
        if self.shared is None and any(shares(lane) for lane in self.lanes):
            self.shared = SharedBudgets(self.ledger, store)

    async def resume(self, lane: Lane[Record]) -> bool:
        """Lift `lane`'s pause: in the store first when one shares the budgets, then here
        (the caller pumps). True if it was paused here or in the store.

        Raises:
            StoreError: The store failed; the pause is kept here.
        """
        now = self.ledger.clock.time()
        lifted = lane.paused_until > now
        if self.shared is not None:
            lifted = await self.shared.resume(lane, now) or lifted
        lane.paused_until = 0.0
        return lifted

    def in_use(self) -> int:
        """Permits held by all lanes together."""
        return sum(lane.running for lane in self.lanes)

    def admitted(self, rec: Record) -> None:
        """Date a record entering a gated lane's waiting area (for aging)."""
        rec.admitted_at = self.ledger.clock.time()

    def ready_at(self, lane: Lane[Record], rec: Record, now: float, start: Start) -> float:
        """The clock time from which `rec` may start as far as `lane`'s budgets and pause go.

        For a lane whose budgets a store shares, the store decides (an answer to come is
        an infinite time; it pumps again with `start`).
        """
        shared = self.shared
        if shared is not None and shares(lane):
            return shared.ready_at(lane, rec, now, lambda: self.pump(start))
        ready = max(now, lane.paused_until)
        starts = lane.starts
        if starts is not None:
            ready = max(ready, now + starts.delay(now, 1))
        budget = lane.token_budget
        if budget is not None:
            job = rec.job
            estimate = 0 if job is None or job.tokens is None else job.tokens
            ready = max(ready, now + budget.delay(now, estimate))
        return ready

    def pump(self, start: Start) -> None:
        """Give free permits to waiting records, best first, while budgets allow.

        Must be called on the queue's loop. `start` is called for each record given a
        permit (its lane's ``running`` already counts it).
        """
        now = self.ledger.clock.time()
        total = self.total
        while True:
            wake = math.inf
            if total is not None and self.in_use() >= total:
                break  # a released permit pumps again
            best: tuple[tuple[float, float, float], Lane[Record]] | None = None
            for lane in self.lanes:
                if not lane.gated or lane.running >= lane.permits:
                    continue
                rec = lane.peek_queued()
                if rec is None:
                    continue
                ready = self.ready_at(lane, rec, now, start)
                if ready > now:
                    wake = min(wake, ready)
                    continue
                waited = rec.admitted_at
                if now - waited >= self.aging:
                    rank = (0.0, waited, 0.0)
                else:
                    rank = (1.0, -float(lane.priority.rank), waited)
                if best is None or rank < best[0]:
                    best = (rank, lane)
            if best is None:
                break
            lane = best[1]
            rec = lane.grant()
            assert rec is not None
            if self.shared is not None and shares(lane):
                self.shared_charges[rec] = self.shared.consume(lane)
            if lane.starts is not None:
                lane.starts.charge(now, 1)
            job = rec.job
            if lane.token_budget is not None and job is not None:
                self.charges[rec] = lane.token_budget.charge(now, job.tokens or 0)
            start(lane, rec)
        self._schedule(wake, now, start)

    def finished(self, rec: Record) -> None:
        """`rec`'s body has stopped: settle its token charge by the usage its output reports."""
        charge = self.charges.pop(rec, None)
        shared = self.shared_charges.pop(rec, None) if self.shared_charges else None
        if charge is None:
            return
        outcome = rec.outcome
        if not isinstance(outcome, Completed):
            return
        used = tokens_used(outcome.output)
        if used is not None:
            self._settle(rec.lane, charge, shared, used)
            return
        unsettled = self.unsettled
        unsettled.pop(rec.key, None)
        unsettled[rec.key] = (rec.lane, charge, shared)
        now = self.ledger.clock.time()
        for key, (lane, kept, _) in list(unsettled.items()):  # forget those out of the window
            budget = lane.token_budget
            if budget is None or kept.at > now - budget.rate.per_seconds:
                break
            del unsettled[key]

    def settle_late(self, key: str, tokens: int) -> bool:
        """Settle the charge of the finished job `key` whose output reported no usage.

        Returns:
            True if a charge was kept for `key` (and is now settled); False if none was.

        Raises:
            ValueError: `tokens` is not an int >= 0.
        """
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens must be an int >= 0, got {tokens!r}")
        kept = self.unsettled.pop(key, None)
        if kept is None:
            return False
        self._settle(kept[0], kept[1], kept[2], tokens)
        return True

    def _settle(self, lane: Lane[Record], charge: Charge, shared: int | None, used: int) -> None:
        budget = lane.token_budget
        if budget is not None:
            budget.settle(charge, used)
        if shared is not None and self.shared is not None:
            self.shared.settle(shared, used)

    def stop(self) -> None:
        """Cancel the timer (the queue has nothing left to wait for)."""
        timer = self._timer
        self._timer = None
        self._wake_at = math.inf
        if timer is not None:
            timer.cancel()

    def _schedule(self, wake: float, now: float, start: Start) -> None:
        if wake == math.inf:
            self.stop()
            return
        timer = self._timer
        if timer is not None and not timer.done() and self._wake_at <= wake:
            return
        self.stop()
        self._wake_at = wake
        loop = self.ledger.running_loop()
        self._timer = loop.create_task(
            self._sleep_then_pump(wake - now, start), name="agentq-arbiter-timer"
        )

    async def _sleep_then_pump(self, seconds: float, start: Start) -> None:
        await self.ledger.clock.sleep(seconds)
        self._timer = None
        self._wake_at = math.inf
        self.pump(start)
