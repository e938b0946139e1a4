"""Rules of the schedule verbs: store or replace a schedule, delete it, fire one tick.

The rules of `agentq.store.contract.protocol_schedules.DurableSchedules`, run by a store in one
transaction like every other rule. Firing a tick is a compare-and-swap on the schedule's next
tick, and starts the tick's instance (`agentq.store.rules.workflow.start_workflow`) in the same
transaction: two engines racing for one tick can never both start it, and a crash loses
either both writes or neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agentq.codec import encode
from agentq.errors import WorkflowMismatchError
from agentq.keys import validate_key
from agentq.store.contract.checks import check_now, check_number
from agentq.store.contract.schedules import ScheduleRow, check_schedule, instance_id
from agentq.store.rules.tx import Tx
from agentq.store.rules.workflow import start_workflow

__all__ = ["delete_schedule", "fire_schedule", "put_schedule"]


def put_schedule(
    tx: Tx,
    name: str,
    definition: str,
    cron: str | None,
    every: float | None,
    input: Any,
    next_tick: float,
    now: float,
) -> tuple[ScheduleRow, bool]:
    """Rule of `DurableSchedules.put_schedule`: a schedule with the same definition, spec and
    input is kept as it is; else it is stored (replaced), keeping its last tick and instance."""
    name, definition, cron, every, value, text, tick = check_schedule(
        name, definition, cron, every, input, next_tick
    )
    now, _ = check_now(now)
    old = tx.load_schedule(name)
    if (
        old is not None
        and (old.definition, old.cron, old.every) == (definition, cron, every)
        and encode(old.input, "input") == text
    ):
        return old, False
    row = ScheduleRow(
        name, definition, cron, every, value, tick, now,
        None if old is None else old.last_tick,
        None if old is None else old.last_instance,
    )
    tx.put_schedule(row)
    return row, True


def delete_schedule(tx: Tx, name: str) -> bool:
    """Rule of `DurableSchedules.delete_schedule`."""
    return tx.delete_schedule(validate_key(name, "schedule name"))


def fire_schedule(
    tx: Tx,
    row: ScheduleRow,
    tick: float,
    next_tick: float,
    step_names: Sequence[str],
    now: float,
    deadline: float | None,
) -> str | None:
    """Rule of `DurableSchedules.fire_schedule`: the compare-and-swap on the next tick, then
    the instance's start, in this transaction."""
    if not isinstance(row, ScheduleRow):
        raise TypeError(f"row must be a ScheduleRow, got {row!r:.80}")
    tick = check_number(tick, "tick")
    next_tick = check_number(next_tick, "next_tick")
    if not row.next_tick <= tick < next_tick:
        raise ValueError(
            f"schedule {row.name!r}: a tick must be at or after the next tick "
            f"{row.next_tick!r} and before the one after it, got tick={tick!r}, "
            f"next_tick={next_tick!r}"
        )
    stored = tx.load_schedule(validate_key(row.name, "schedule name"))
    if stored is None or (stored.next_tick, stored.definition, stored.cron, stored.every) != (
        row.next_tick, row.definition, row.cron, row.every,
    ):
        return None  # fired by another engine, replaced or deleted meanwhile
    wid = instance_id(stored.name, tick)
    tx.put_schedule(replace(stored, next_tick=next_tick, last_tick=tick, last_instance=wid))
    try:
        start_workflow(
            tx, wid, step_names, stored.input, now, stored.definition, None, None, deadline
        )
    except WorkflowMismatchError:  # checked before anything is written: the tick is spent
        return None
    return wid
