"""Schedules as a store keeps them: `ScheduleRow`, the instance id of a tick, the checks.

A schedule (``engine.schedule``) is a row of its own, apart from the event log: its name, the
definition it starts, its spec (a cron expression or a period in seconds), the input of each
instance, and its next tick (Unix seconds). A tick is fired by a compare-and-swap on that next
tick, in the transaction that starts the tick's instance (`DurableSchedules.fire_schedule`), so
of several engines racing for one tick exactly one starts its instance. The tick arithmetic
(what the next tick of a spec is) belongs to the engine (`agentq.workflows.cadence`); a store
only keeps the values it is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agentq.errors import InvalidKeyError
from agentq.events import utc
from agentq.keys import MAX_KEY_BYTES, validate_key
from agentq.store.contract.checks import check_number, check_payload

__all__ = [
    "MAX_SCHEDULE_NAME_BYTES",
    "ScheduleRow",
    "check_name",
    "check_schedule",
    "instance_id",
]

_SUFFIX = len("@2026-01-01T00:00:00.000000Z")  # the longest tick suffix of an instance id
MAX_SCHEDULE_NAME_BYTES = MAX_KEY_BYTES - _SUFFIX
"""The longest schedule name, in bytes of UTF-8: its instances' ids must be keys too."""


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """One stored schedule.

    Attributes:
        name: The schedule's name (a key: non-empty, at most 1024 bytes of UTF-8).
        definition: The name of the `WorkflowDef` each tick starts an instance of.
        cron: A 5-field cron expression (UTC), or None for a periodic schedule.
        every: The period in seconds (> 0), or None for a cron schedule.
        input: The input (JSON) of every instance.
        next_tick: Unix seconds of the next tick to fire.
        updated_at: Unix seconds when the schedule was made (or last replaced).
        last_tick: Unix seconds of the last tick fired, or None.
        last_instance: The workflow id of the last tick's instance, or None.
    """

    name: str
    definition: str
    cron: str | None
    every: float | None
    input: Any
    next_tick: float
    updated_at: float
    last_tick: float | None = None
    last_instance: str | None = None

    @property
    def spec(self) -> str:
        """The spec as one line: ``cron 0 9 * * *`` or ``every 3600s``."""
        return f"cron {self.cron}" if self.cron is not None else f"every {self.every:g}s"


def instance_id(name: str, tick: float) -> str:
    """The workflow id of the instance of schedule `name` at `tick` (Unix seconds):
    ``<name>@<tick as ISO-8601 UTC>``, e.g. ``nightly@2026-01-01T09:00:00Z`` (fractions of a
    second only when the tick has some)."""
    return f"{name}@{utc(tick).isoformat().replace('+00:00', 'Z')}"


def check_name(name: object) -> str:
    """Return `name` if it can name a schedule: a key of at most `MAX_SCHEDULE_NAME_BYTES`.

    Raises:
        InvalidKeyError / TypeError: Not a key, or too long for its instances' ids.
    """
    name = validate_key(name, "schedule name")
    size = len(name.encode("utf-8"))
    if size > MAX_SCHEDULE_NAME_BYTES:
        raise InvalidKeyError(
            f"schedule name {name[:40]!r}… is {size} bytes of UTF-8; at most "
            f"{MAX_SCHEDULE_NAME_BYTES}, so that its instances' ids "
            f"('<name>@<tick>') fit in {MAX_KEY_BYTES}"
        )
    return name


def check_schedule(
    name: object,
    definition: object,
    cron: object,
    every: object,
    input: Any,
    next_tick: object,
) -> tuple[str, str, str | None, float | None, Any, str, float]:
    """Check what `DurableSchedules.put_schedule` is given; return it, the input decoded as
    it reads back and its JSON text: ``(name, definition, cron, every, input, text,
    next_tick)``.

    Raises:
        InvalidKeyError: A bad name (`check_name`) or definition name.
        TypeError / ValueError: Not exactly one of `cron` (a non-empty str of printable
            ASCII; not parsed here) and `every` (a finite number > 0); a `next_tick` that is
            not finite Unix seconds.
        PayloadError: `input` is not JSON or too large.
    """
    name = check_name(name)
    definition = validate_key(definition, "definition name")
    if (cron is None) == (every is None):
        raise ValueError(
            f"schedule {name!r} needs exactly one of cron and every, got cron={cron!r:.80} "
            f"and every={every!r:.80}"
        )
    if cron is not None:
        if not isinstance(cron, str):
            raise TypeError(f"cron must be a str, got {cron!r:.80}")
        if not cron.strip() or not cron.isascii() or not cron.isprintable():
            raise ValueError(
                f"cron must be a non-empty expression of printable ASCII, got {cron!r:.80}"
            )
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, int | float):
            raise TypeError(f"every must be a number of seconds, got {every!r:.80}")
        if not 0 < every < math.inf:
            raise ValueError(f"every must be a finite number of seconds > 0, got {every!r}")
        every = float(every)
    value, text = check_payload(input, "input")
    tick = check_number(next_tick, "next_tick")
    return name, definition, cron, every, value, text, tick
