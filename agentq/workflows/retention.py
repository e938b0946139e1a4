"""`Retention`: the sweeps a serving engine runs (``engine.serve(retention=seconds)``).

A serving engine given a retention sweeps the store (`DurableStore.sweep`) as it serves: at
its first poll, then every `sweep_interval` of the retention (a tenth of it, at least a
minute and at most an hour apart), each time removing the completed and cancelled workflows
that ended more than `retention` seconds ago on the engine's clock. Each sweep runs in a task
of its own beside the serve loop, so a long one (the first on a store that never swept) never
delays the work the loop takes up; a sweep still running when the next is due is not doubled.
A store failure is logged and the sweep tried again when the next is due. Private to
`agentq.workflows.serving`.
"""

from __future__ import annotations

import asyncio
import math

from agentq.clock import Clock
from agentq.errors import AgentqError
from agentq.store import DurableStore
from agentq.workflows.workers import LOGGER

__all__ = ["Retention", "check_retention", "sweep_interval"]


def check_retention(retention: object) -> float | None:
    """Return `retention` as seconds (a float), or None.

    Raises:
        ValueError: Not None and not a positive, finite number of seconds.
    """
    if retention is None:
        return None
    if (
        isinstance(retention, bool)
        or not isinstance(retention, int | float)
        or not 0 < retention < math.inf
    ):
        raise ValueError(
            f"retention must be a positive number of seconds or None, got {retention!r:.80}"
        )
    return float(retention)


def sweep_interval(retention: float) -> float:
    """Seconds between two sweeps of a serving engine: a tenth of `retention`, between a
    minute and an hour."""
    return min(max(retention / 10, 60.0), 3600.0)


class Retention:
    """The sweeps of one serve loop: `poll` at each turn, `stop` when serving ends."""

    def __init__(self, store: DurableStore, clock: Clock, retention: float) -> None:
        self._store = store
        self._clock = clock
        self.retention = retention
        self.interval = sweep_interval(retention)
        self._due = -math.inf
        self._task: asyncio.Task[None] | None = None

    def poll(self) -> None:
        """Start a sweep if one is due and none is running (never waits for it)."""
        now = self._clock.time()
        if now < self._due or (self._task is not None and not self._task.done()):
            return
        self._due = now + self.interval
        self._task = asyncio.get_running_loop().create_task(self._sweep(now - self.retention))

    async def _sweep(self, ended_before: float) -> None:
        try:
            report = await self._store.sweep(ended_before=ended_before)
        except AgentqError as exc:  # said; tried again when the next sweep is due
            LOGGER.warning("serve(): sweeping ended workflows failed: %s", exc)
            return
        if report.workflows:
            LOGGER.info(
                "serve(): swept %d ended workflows (%d events, %d calls) older than %g s",
                report.workflows, report.events, report.calls, self.retention,
            )

    async def stop(self) -> None:
        """Cancel a sweep in progress (the batches it committed stay) and wait for it."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

