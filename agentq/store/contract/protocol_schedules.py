"""The schedule verbs of `DurableStore`: `DurableSchedules`.

`DurableStore` (``agentq.store.contract.protocol``) inherits this protocol; it lives apart
only to keep each module short. Schedules are rows of their own (`ScheduleRow`), not events;
firing a tick is the one verb that writes both: it advances the schedule and starts the
tick's instance in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from agentq.store.contract.schedules import ScheduleRow

__all__ = ["DurableSchedules"]


class DurableSchedules(Protocol):
    """Schedules: `put_schedule`, `delete_schedule`, `schedules`, `fire_schedule` (see
    `DurableStore` for what every verb shares)."""

    async def put_schedule(
        self,
        name: str,
        definition: str,
        *,
        cron: str | None,
        every: float | None,
        input: Any,
        next_tick: float,
        now: float,
    ) -> tuple[ScheduleRow, bool]:
        """Store schedule `name`, or replace the one stored under that name.

        A schedule stored with the same definition, spec (`cron`, `every`) and input is
        left as it is (its next tick included); one with any of them different is replaced:
        its next tick becomes `next_tick`, its last tick and instance are kept.

        Args:
            name: The schedule's name (a key).
            definition: The definition each tick starts (a key).
            cron: A cron expression (the store does not parse it), or None.
            every: A period in seconds (> 0), or None; exactly one of `cron` and `every`.
            input: The input (JSON) of every instance.
            next_tick: Unix seconds of the first tick (computed by the caller).
            now: Unix seconds.

        Returns:
            ``(row, changed)``: the stored row, and whether this call stored or replaced it.

        Raises:
            InvalidKeyError / TypeError / ValueError / PayloadError: A bad argument
                (`agentq.store.contract.schedules.check_schedule`); nothing is stored.
        """
        ...

    async def delete_schedule(self, name: str) -> bool:
        """Delete schedule `name`; True if it was stored. Its instances are kept.

        Raises:
            InvalidKeyError / TypeError: A bad name.
        """
        ...

    async def schedules(self) -> list[ScheduleRow]:
        """Return every stored schedule, by name."""
        ...

    async def fire_schedule(
        self,
        row: ScheduleRow,
        *,
        tick: float,
        next_tick: float,
        step_names: Sequence[str],
        now: float,
        deadline: float | None = None,
    ) -> str | None:
        """Fire the tick `tick` of schedule `row` (as the caller read it), atomically.

        A compare-and-swap: only if the stored schedule still has `row`'s next tick,
        definition and spec, it is advanced to `next_tick` (its last tick and instance set)
        and, in the same transaction, the tick's instance is started
        (`DurableStore.start_workflow` with the id
        `agentq.store.contract.schedules.instance_id` of `row.name` and `tick`, the
        definition's `step_names`, the stored input and `deadline`). Of several callers
        racing for a tick, exactly one fires it; the others get None.

        Args:
            row: The schedule as read by `schedules` (its ``next_tick`` is compared).
            tick: The tick fired (Unix seconds, >= ``row.next_tick``): the latest one due.
            next_tick: The tick after it (Unix seconds, > `tick`).
            step_names: The step names of the definition.
            now: Unix seconds.
            deadline: The instance's deadline (Unix seconds), or None.

        Returns:
            The instance's workflow id, or None when the schedule moved on, was replaced or
            deleted meanwhile (nothing is written then). An instance id stored already with
            other steps or another input is not started again; the schedule still advances
            and None is returned.

        Raises:
            TypeError / ValueError: A bad argument; nothing is written.
        """
        ...
