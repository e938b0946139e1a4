"""The shared rate windows of `MemoryStore` (`agentq.queue.rate_ledger.RateLedger`), in dicts.

`RateBook` holds, per lane name, the stored pause and the recent charges; the store runs its
methods inside its all-or-nothing writes. One process only, as the store is, but the same
rules as the SQL stores (`agentq.store.rules.rates`), so a user's tests of two queues on one
`MemoryStore` see what two processes on one database see.
"""

from __future__ import annotations

from agentq.queue import BudgetGrant, Rate
from agentq.store.rules.rates import (
    check_pause,
    check_resume,
    check_settle,
    check_take,
    horizon,
    judge,
)

__all__ = ["RateBook"]


class RateBook:
    """The pauses (by lane) and charges (by id: lane, time, tokens) of shared rate windows."""

    __slots__ = ("charges", "next_id", "paused")

    def __init__(self) -> None:
        self.paused: dict[str, float] = {}
        self.charges: dict[int, tuple[str, float, int]] = {}  # in charge order
        self.next_id = 1

    def take(
        self, lane: str, rate: Rate | None, tokens: Rate | None, estimate: int, now: float
    ) -> BudgetGrant:
        """See `RateLedger.take_budget`."""
        lane, rate, tokens, estimate, now = check_take(lane, rate, tokens, estimate, now)
        since = now - horizon(rate, tokens)
        for charge, (name, at, _) in list(self.charges.items()):
            if name == lane and at <= since:
                del self.charges[charge]
        rows = sorted(
            (at, used) for name, at, used in self.charges.values() if name == lane
        )
        paused = self.paused.get(lane, 0.0)
        wait = judge(rows, paused, rate, tokens, estimate, now)
        if wait > 0:
            return BudgetGrant(None, wait, paused)
        charge = self.next_id
        self.next_id += 1
        self.charges[charge] = (lane, now, estimate)
        return BudgetGrant(charge, 0.0, paused)

    def settle(self, charge: int, tokens: int) -> None:
        """See `RateLedger.settle_budget`."""
        charge, tokens = check_settle(charge, tokens)
        kept = self.charges.get(charge)
        if kept is not None:
            self.charges[charge] = (kept[0], kept[1], tokens)

    def pause(self, lane: str, until: float) -> None:
        """See `RateLedger.pause_lane`."""
        lane, until = check_pause(lane, until)
        self.paused[lane] = max(self.paused.get(lane, 0.0), until)

    def resume(self, lane: str, now: float) -> bool:
        """See `RateLedger.resume_lane`."""
        lane, now = check_resume(lane, now)
        return self.paused.pop(lane, 0.0) > now
