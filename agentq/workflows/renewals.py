"""One timer for all the leases an engine holds: `Renewals`.

Every lease of an engine is renewed ``lease_ttl / 3`` seconds after it was claimed or last
renewed. They all share the engine's ``lease_ttl``, so a lease added (or renewed) now is never
due before any lease held already: kept in the order they were added, the first is always the
next one due. One task sleeps on the engine's clock until then, starts that lease's renewal
(`Renewable.renew_due`, which adds the lease again once renewed) and sleeps until the next; it
ends when no lease is held, and starts again with the next one. A step that finishes within
``lease_ttl / 3`` (most do) costs two dictionary operations, not a task of its own.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Protocol

from agentq.clock import Clock

__all__ = ["Renewable", "Renewals"]


class Renewable(Protocol):
    """A lease `Renewals` keeps alive."""

    def renew_due(self) -> None:
        """Start renewing the lease (its time has come); `Renewals.add` it again once
        renewed. Called on the engine's loop; must not block."""


class Renewals:
    """The renewal times of one engine's held leases, and the one task that waits for them.

    Args:
        clock: The engine's clock (``time`` and ``sleep``): the injectable time of renewals.
        lease_ttl: The engine's lease time to live, seconds (> 0): each lease is due
            ``lease_ttl / 3`` seconds after it was added.

    All methods run on the engine's event loop.
    """

    def __init__(self, clock: Clock, lease_ttl: float) -> None:
        self._clock = clock
        self._every = lease_ttl / 3
        self._due: dict[Renewable, float] = {}  # in the order they are due (see the module)
        self._task: asyncio.Task[None] | None = None

    def add(self, lease: Renewable) -> None:
        """Renew `lease` ``lease_ttl / 3`` seconds from now (its `renew_due` is called then)."""
        self._due[lease] = self._clock.time() + self._every
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="agentq.lease-renewals",
                context=contextvars.Context(),  # the engine's, not the first adder's step's
            )

    def discard(self, lease: Renewable) -> None:
        """Renew `lease` no more (idempotent); the task ends when no lease is left."""
        self._due.pop(lease, None)
        if not self._due and self._task is not None:
            task, self._task = self._task, None
            task.cancel()  # it sleeps: its sleep is cancelled at once

    def __len__(self) -> int:
        """Leases waiting for their next renewal."""
        return len(self._due)

    async def _run(self) -> None:
        try:
            while self._due:
                lease, due = next(iter(self._due.items()))
                wait = due - self._clock.time()
                if wait > 0:
                    await self._clock.sleep(wait)
                    continue
                del self._due[lease]
                lease.renew_due()
        finally:
            if self._task is asyncio.current_task():
                self._task = None

