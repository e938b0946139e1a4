"""The rate-ledger protocol: what a `Queue` needs from a store to share its lanes' budgets.

`Queue(store=...)` given a store that also has these four verbs shares the budgets of its
rate-limited lanes (`LaneConfig.rate`, `LaneConfig.tokens`) with every other queue on that
store, in this process or another: a job of such a lane starts only once the store has
charged it to the lane's window (`RateLedger.take_budget`), and a pause a failure asks for
(``Retry-After``) is stored for all (`RateLedger.pause_lane`) until it ends or
`Queue.resume_lane` lifts it (`RateLedger.resume_lane`). The queue layer defines the
verbs and the stores (`agentq.store.MemoryStore`, `SqliteStore`, `PostgresStore`) implement
them, so that the queue never imports the store package. Stores are passive: the queue gives
them the time (``now``, ``until``: seconds on the queue's clock, which every process sharing
a store must agree on: the system clock, Unix seconds).

A lane is named by its priority's text (``"high"``, ``"medium"``, ``"low"``): the queues on
one store share the budgets of lanes with the same name, and should give them the same
`Rate`s (each take is judged by the rates its caller gives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentq.queue.rates import Rate

__all__ = ["BudgetGrant", "RateLedger"]


@dataclass(frozen=True, slots=True)
class BudgetGrant:
    """What `RateLedger.take_budget` answers.

    Attributes:
        charge: The id of the charge the store recorded (one start, and the estimated
            tokens, at ``now``), to settle later; None when nothing was charged.
        wait: Seconds from ``now`` until a start may fit (0.0 when `charge` is set).
        paused_until: The lane's stored pause (clock time), or 0.0 for none.
    """

    charge: int | None
    wait: float
    paused_until: float = 0.0


@runtime_checkable
class RateLedger(Protocol):
    """The shared windows and pauses of rate-limited lanes: four verbs, each atomic.

    Each verb is one transaction of the store; a verb that raises has written nothing.
    Every verb raises `StoreError` when the backend fails or the store is closed, and checks
    its arguments first (`TypeError`, `ValueError`). The methods are coroutines to await on
    one event loop. ``tests/store/test_rate_ledger.py`` is the contract suite every
    implementation must pass.
    """

    async def take_budget(
        self,
        lane: str,
        *,
        rate: Rate | None,
        tokens: Rate | None,
        estimate: int,
        now: float,
    ) -> BudgetGrant:
        """Charge one start of `lane` at `now` if its windows and pause allow it.

        Atomic across processes: of two takes at once, each is judged with the other's
        charge counted when it is recorded. A start fits when the lane is not paused at
        `now`, the charges of the last ``rate.per_seconds`` number fewer than ``rate.count``,
        and their tokens plus `estimate` stay within ``tokens.count`` over the last
        ``tokens.per_seconds`` (an estimate larger than the whole budget fits an empty
        window). Charges older than the longer window are deleted by the same step.

        Args:
            lane: The lane's name (non-empty text).
            rate: The lane's start budget, or None.
            tokens: The lane's token budget, or None (at least one of the two is given).
            estimate: The tokens to charge (an int >= 0).
            now: The taker's time (a finite number).

        Returns:
            A `BudgetGrant`: a charge id, or the seconds to wait before trying again.

        Raises:
            TypeError / ValueError: A bad argument (the message names it).
            StoreError: The backend failed.
        """
        ...

    async def settle_budget(self, charge: int, tokens: int) -> None:
        """Replace a charge's tokens by the tokens actually used (nothing if it is gone).

        Raises:
            TypeError / ValueError: `charge` or `tokens` is not an int >= 0.
            StoreError: The backend failed.
        """
        ...

    async def pause_lane(self, lane: str, until: float) -> None:
        """Start no job of `lane`, in any process on the store, before clock time `until`.

        A pause already stored that ends later is kept.

        Raises:
            TypeError / ValueError: A bad lane name or time.
            StoreError: The backend failed.
        """
        ...

    async def resume_lane(self, lane: str, now: float) -> bool:
        """Lift the stored pause of `lane`: its jobs may start again in every process on the
        store (each reads it at its next take). The charges of its windows are kept.

        Returns:
            True if the lane was paused at `now` (the taker's clock time); False if it was
            not (nothing to lift).

        Raises:
            TypeError / ValueError: A bad lane name or time.
            StoreError: The backend failed.
        """
        ...
