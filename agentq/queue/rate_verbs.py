"""`RateVerbs`: the `Queue` verbs of the lanes' budgets and pauses (a base class of `Queue`).

`share_budgets` shares the rate-limited lanes' budgets through a `RateLedger` store,
`settle_tokens` settles a finished job's token charge, `resume_lane` lifts a lane's pause
(here and, when a store shares the budgets, in the store, for every process). Each is a few
lines over the `Arbiter` (``arbitration``) and the `Dispatcher` (``dispatch``).
"""

from __future__ import annotations

from agentq.queue.dispatch import Dispatcher
from agentq.queue.lane import Lane
from agentq.queue.lanes import Priority, as_priority
from agentq.queue.ledger import Ledger
from agentq.queue.rate_ledger import RateLedger
from agentq.queue.records import Record

__all__ = ["RateVerbs"]


class RateVerbs:
    """The budget and pause verbs of `Queue` (which sets the attributes below)."""

    _ledger: Ledger
    _lanes: dict[Priority, Lane[Record]]
    _dispatch: Dispatcher

    def share_budgets(self, store: RateLedger) -> None:
        """Share the rate-limited lanes' budgets and pauses through `store` (a `RateLedger`,
        else `TypeError`) as a `store` given to the queue does; a `WorkflowEngine` calls it with
        its store. No-op once shared, or without budgets; call it before such a lane starts."""
        self._dispatch.arbiter.share(store)

    def settle_tokens(self, key: str, tokens: int) -> bool:
        """Settle the token charge of the finished job `key`, whose output reported no usage,
        by the `tokens` it used (an int >= 0, else `ValueError`), e.g. a durable call's recorded
        usage. True if its charge, still in its window, was settled; else False."""
        return self._dispatch.arbiter.settle_late(key, tokens)

    async def resume_lane(self, lane: Priority | str) -> bool:
        """Lift the pause of `lane` that a rate-limit failure asked for (``Retry-After``):
        its waiting jobs start now, as its permits and budgets allow.

        When the queue shares its budgets through a store (`Queue(store=...)`, or a
        `WorkflowEngine`'s), the pause stored for every process is lifted too
        (`RateLedger.resume_lane`), first; the other processes' queues start that lane's
        jobs at their next take. A retry already waiting out the pause keeps its wait.

        Args:
            lane: A `Priority`, or its text (``"high"``, ``"medium"``, ``"low"``).

        Returns:
            True if the lane was paused (in this queue, or in the store); False if not.

        Raises:
            ValueError: `lane` names no lane (the message names it and the lanes there are).
            StoreError: The store failed; nothing was lifted here.
            WrongLoopError: The queue belongs to another event loop.
        """
        found = self._lanes[as_priority(lane, "no lane")]
        self._ledger.bind()
        lifted = await self._dispatch.arbiter.resume(found)
        self._dispatch.freed(found)  # its waiting jobs: the arbiter gives them permits
        return lifted
