"""`Scheduling`: the engine's ``schedule`` and ``unschedule`` verbs.

`Endings` (``endings.py``, the base of `WorkflowEngine`) derives from this class, as this
class derives from `Forks` (``forking.py``). A schedule is stored in the store
(`DurableStore.put_schedule`), so every engine serving that store with the definition
registered fires it (``ticks.py``, from ``serve`` and `recover`).

Private to `agentq.workflows.engine`; the verbs are documented as `WorkflowEngine`'s.
"""

from __future__ import annotations

from typing import Any

from agentq.errors import UnknownWorkflowError
from agentq.keys import validate_key
from agentq.store import ScheduleRow, check_schedule_name
from agentq.workflows.cadence import check_spec, first_tick
from agentq.workflows.forking import Forks
from agentq.workflows.model import WorkflowDef
from agentq.workflows.ticks import Ticker

__all__ = ["Scheduling"]


class Scheduling(Forks):
    """The schedule verbs of an engine (a subclass provides `store` and `clock`)."""

    def __init__(self) -> None:
        super().__init__()
        self._ticker = Ticker(lambda: self.store, lambda: self.clock, self._registry)

    async def schedule(
        self,
        name: str,
        definition: WorkflowDef | str,
        *,
        cron: str | None = None,
        every: float | None = None,
        input: Any = None,
    ) -> bool:
        """Store a schedule: an instance of `definition` at every tick, on every engine.

        The schedule is stored in the store, so every engine that serves it (``serve``, or
        `recover` once) with `definition` registered fires it: one instance per tick,
        exactly once across all of them (a compare-and-swap on the schedule's next tick, in
        the transaction that starts the instance), with the id ``<name>@<tick as ISO-8601
        UTC>``, e.g. ``nightly@2026-01-01T09:00:00Z``, and `input` as its input. The
        instance then runs as any started instance of the definition.

        Ticks: the first is the first one strictly after this call (with `every`: now +
        `every`, then every `every` seconds from it). Of the ticks missed while no engine
        served (all engines down, or none with the definition registered), only the latest
        runs: an engine that finds several ticks past fires the last one at or before now
        and skips the others. All times are on the engine's clock.

        Scheduling a name again with the same definition, spec and input is a no-op (the
        next tick is kept); with any of them different it replaces the schedule: the next
        tick is computed again from now, the instances already started are kept.

        Args:
            name: The schedule's name (a key: non-empty, at most 1024 bytes of UTF-8).
            definition: A `WorkflowDef` (registered on the way, as `start` does) or the name
                of one registered with this engine.
            cron: A standard 5-field cron expression (minute hour day-of-month month
                day-of-week), evaluated in UTC; needs the ``cron`` extra (``cronsim``).
            every: A period in seconds (a finite number > 0). Exactly one of `cron` and
                `every`.
            input: The input (JSON) of every instance.

        Returns:
            True if the schedule was stored or replaced; False if it was stored already
            with the same definition, spec and input.

        Raises:
            ValueError: Both or neither of `cron` and `every`; a bad cron expression; an
                `every` that is not finite and > 0 (the message names the value).
            TypeError: `cron` not a str, `every` not a number, `definition` neither a
                `WorkflowDef` nor a str.
            UnknownWorkflowError: A definition name that no registered definition has.
            InvalidKeyError: A bad `name` (at most 996 bytes of UTF-8, so that its
                instances' ids fit in a key).
            PayloadError: `input` is not JSON or too large.
            MissingExtraError: A `cron` schedule without ``cronsim`` installed.
            Nothing is stored when any of these is raised.

        Example:
            >>> await engine.schedule("nightly", report, cron="0 9 * * *", input={"to": "ops"})
            True
        """
        name = check_schedule_name(name)
        cron, every = check_spec(cron, every)
        if isinstance(definition, WorkflowDef):
            found = definition
        elif isinstance(definition, str):
            registered = self._registry.definition(definition)
            if registered is None:
                raise UnknownWorkflowError(
                    f"no definition named {definition!r} is registered with this engine "
                    f"(registered: {list(self._registry.names)}); register it first"
                )
            found = registered
        else:
            raise TypeError(
                f"schedule() expects a WorkflowDef or its name, got {definition!r:.80}"
            )
        now = self.clock.time()
        next_tick = first_tick(cron, every, now)
        _, changed = await self.store.put_schedule(
            name, found.name, cron=cron, every=every, input=input, next_tick=next_tick, now=now
        )
        if isinstance(definition, WorkflowDef):
            self._registry.define(definition)
        return changed

    async def unschedule(self, name: str) -> bool:
        """Delete schedule `name`: no engine fires it again. Its instances are kept (a run
        in progress goes on).

        Returns:
            True if it was stored, else False.

        Raises:
            InvalidKeyError / TypeError: A bad `name`.
        """
        return await self.store.delete_schedule(validate_key(name, "schedule name"))

    async def schedules(self) -> list[ScheduleRow]:
        """Return the stored schedules, by name (each with its spec, next tick and last
        instance): every engine's, not only this one's."""
        return await self.store.schedules()

    async def _fire_schedules(self) -> list[str]:
        """Fire the due ticks of the stored schedules of definitions registered here; the
        ids of the instances started (see ``ticks.py``)."""
        started, _ = await self._ticker.fire_due()
        return started
