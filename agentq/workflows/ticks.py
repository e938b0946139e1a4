"""`Ticker`: fire the due ticks of the stored schedules whose definitions an engine holds.

`serve` calls `Ticker.fire_due` before each read of the ready work, and waits no longer than
until the earliest next tick it returns (`agentq.workflows.serving`); `recover` calls it
too. For each stored schedule (`DurableStore.schedules`) of a definition registered here
whose next tick has come, it fires *one* tick, the latest at or before now
(`agentq.workflows.cadence.due`; the ticks missed while no engine served are skipped), by the
store's compare-and-swap `DurableStore.fire_schedule`, which starts the tick's instance
``<name>@<tick ISO-8601 UTC>`` in the same transaction. Several engines on one store may
call it at once: each tick is fired by exactly one of them. The instance is then ready work
like any started instance of the definition.

Private to `agentq.workflows.engine`.
"""

from __future__ import annotations

from collections.abc import Callable

from agentq.clock import Clock
from agentq.errors import AgentqError
from agentq.store import DurableStore, ScheduleRow
from agentq.workflows.cadence import due
from agentq.workflows.registry import Registry
from agentq.workflows.workers import LOGGER

__all__ = ["Ticker"]


class Ticker:
    """Fires the due ticks of one engine's schedules.

    Args:
        store: Returns the engine's store.
        clock: Returns the engine's clock.
        registry: The engine's registered definitions.
    """

    def __init__(
        self, store: Callable[[], DurableStore], clock: Callable[[], Clock], registry: Registry
    ) -> None:
        self._store = store
        self._clock = clock
        self._registry = registry
        self._refused: set[tuple[str, str | None]] = set()  # specs that failed: logged once

    async def fire_due(self) -> tuple[list[str], float | None]:
        """Fire the due tick of every stored schedule of a definition registered here.

        Returns:
            ``(started, wake)``: the ids of the instances this call started, and the earliest
            next tick (Unix seconds) of those schedules, or None when there is none.

        A schedule whose tick cannot be fired (its cron expression unreadable here, the
        store failing for it) is logged (``logging.getLogger("agentq")``, WARNING) and
        skipped; the others still fire.

        Raises:
            StoreError: The store failed to list the schedules.
        """
        store, now = self._store(), self._clock().time()
        started: list[str] = []
        wake: float | None = None
        for row in await store.schedules():
            definition = self._registry.definition(row.definition)
            if definition is None:
                continue
            after = row.next_tick
            if row.next_tick <= now:
                try:
                    fired = await self._fire(store, row, now)
                except AgentqError as exc:  # said; the other schedules still fire
                    LOGGER.warning("schedule %r: firing its tick failed: %s", row.name, exc)
                    continue
                if fired is None:
                    continue
                wid, after = fired
                if wid is not None:
                    started.append(wid)
            wake = after if wake is None else min(wake, after)
        return started, wake

    async def _fire(
        self, store: DurableStore, row: ScheduleRow, now: float
    ) -> tuple[str | None, float] | None:
        """Fire `row`'s latest due tick: ``(instance id or None if another engine was first,
        the tick after now)``; None when its spec cannot be read here (logged once)."""
        definition = self._registry.definition(row.definition)
        assert definition is not None
        try:
            tick, after = due(row.cron, row.every, row.next_tick, now)
        except (AgentqError, ValueError) as exc:  # a cron this engine cannot read
            if (row.name, row.cron) not in self._refused:
                self._refused.add((row.name, row.cron))
                LOGGER.warning("schedule %r (%s) is not fired here: %s", row.name, row.spec, exc)
            return None
        deadline = None if definition.timeout is None else now + definition.timeout
        wid = await store.fire_schedule(
            row,
            tick=tick,
            next_tick=after,
            step_names=definition.step_names,
            now=now,
            deadline=deadline,
        )
        return wid, after
