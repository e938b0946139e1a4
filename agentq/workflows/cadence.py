"""The ticks of a schedule's spec: a 5-field cron expression (UTC) or a period in seconds.

Pure functions of times given as Unix seconds; no clock, no store. Cron expressions are
parsed and walked by ``cronsim`` (the ``cron`` extra: ``pip install 'agentq[cron]'``),
imported only when a cron spec is used; a period needs nothing.

- `check_spec` refuses a bad spec (`ValueError` / `TypeError` naming the value);
- `first_tick` is the first tick after the moment a schedule is made: with ``every`` that
  moment plus the period; with ``cron`` the first match strictly after it;
- `due` answers, for a schedule whose next tick has come, the *latest* tick at or before now
  (the missed ones before it are skipped) and the tick after now.

Ticks of a period are ``next_tick + k * every``: anchored at the schedule's stored next tick,
so they do not drift with the moment an engine looks.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from agentq.events import utc
from agentq.extras import require
from agentq.workflows.parking import MAX_WAIT_TIMEOUT

__all__ = ["MIN_EVERY", "check_spec", "due", "first_tick"]

MIN_EVERY = 0.001
"""The shortest period (seconds) a schedule may have: one tick a millisecond at most. A
shorter one is refused by `check_spec`, and a stored one (written by another program) is
refused by `due` (the engine logs and skips it) rather than spinning."""


def _cron(cron: str, start: float, reverse: bool = False) -> float:
    """The first match of `cron` strictly after (or, `reverse`, before) `start`."""
    cronsim: Any = require("cronsim", "cron")
    try:
        found: datetime = next(cronsim.CronSim(cron, utc(start), reverse=reverse))
    except cronsim.CronSimError as exc:  # a stored expression this engine cannot read
        raise ValueError(f"bad cron expression {cron!r:.80}: {exc}") from exc
    except StopIteration:  # pragma: no cover - cronsim gives up on never-matching dates
        raise ValueError(f"cron expression {cron!r} never matches") from None
    return found.timestamp()


def check_spec(cron: object, every: object) -> tuple[str | None, float | None]:
    """Check a schedule's spec; return ``(cron, every)`` (`every` as a float).

    Raises:
        ValueError: Both or neither of `cron` and `every` given; a cron expression that is
            not 5 fields or that ``cronsim`` refuses (or that never matches); an `every`
            outside ``[MIN_EVERY, MAX_WAIT_TIMEOUT]`` (10 years). The message names the value.
        TypeError: `cron` is not a str, or `every` not a number.
        MissingExtraError: A cron spec without the ``cron`` extra installed.
    """
    if (cron is None) == (every is None):
        raise ValueError(
            "a schedule needs exactly one of cron= and every=, got "
            f"cron={cron!r:.80} and every={every!r:.80}"
        )
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, int | float):
            raise TypeError(f"every must be a number of seconds, got {every!r:.80}")
        if not MIN_EVERY <= every <= MAX_WAIT_TIMEOUT:
            raise ValueError(
                f"every must be a number of seconds between {MIN_EVERY} and "
                f"{MAX_WAIT_TIMEOUT:.0f} (10 years, as ctx.sleep), got {every!r}"
            )
        return None, float(every)
    if not isinstance(cron, str):
        raise TypeError(f"cron must be a str (a 5-field cron expression), got {cron!r:.80}")
    fields = cron.split()
    if len(fields) != 5:
        raise ValueError(
            f"cron must be a 5-field expression (minute hour day month weekday), got "
            f"{cron!r:.80} ({len(fields)} fields)"
        )
    cronsim: Any = require("cronsim", "cron")
    try:
        cronsim.CronSim(cron, utc(0.0))
    except cronsim.CronSimError as exc:
        raise ValueError(f"bad cron expression {cron!r:.80}: {exc}") from exc
    normal = " ".join(fields)
    _cron(normal, 0.0)  # one that never matches is refused here
    return normal, None


def first_tick(cron: str | None, every: float | None, made_at: float) -> float:
    """The first tick of a schedule made at `made_at` (Unix seconds): strictly after it."""
    if every is not None:
        return made_at + every
    assert cron is not None
    return _cron(cron, made_at)


def due(cron: str | None, every: float | None, next_tick: float, now: float) -> tuple[float, float]:
    """For a schedule whose stored next tick `next_tick` is at or before `now`: ``(tick,
    after)``, the latest tick at or before `now` (never before `next_tick`) and the first
    tick after `now`. The ticks between `next_tick` and `tick` are skipped (missed).

    Computed arithmetically (no loop over ticks), so no stored value can stall an engine.

    Raises:
        ValueError: A stored `every` that is not finite and >= `MIN_EVERY` (written by
            another program); the engine logs and skips such a schedule.
    """
    if every is not None:
        if not MIN_EVERY <= every < math.inf:
            raise ValueError(f"stored every={every!r} is not a period >= {MIN_EVERY} s")
        skipped = max((now - next_tick) // every, 0.0)
        tick = next_tick + skipped * every
        if tick + every <= now:  # float rounding: one step at most
            tick += every
        if tick > now and tick - every >= next_tick:
            tick -= every
        return tick, tick + every
    assert cron is not None
    after = _cron(cron, now)
    return max(next_tick, _cron(cron, after, reverse=True)), after
