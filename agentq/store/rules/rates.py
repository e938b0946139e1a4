"""The rules of the shared rate windows (`agentq.queue.rate_ledger.RateLedger`), once for
every store: the checks of the verbs' arguments, and whether a start fits.

A store keeps, per lane name, its pause (``paused_until``) and its recent charges (one row a
start: when, and its tokens). `judge` decides a take from those rows with the queue's own
sliding window (`agentq.queue.rates.Window`), so that a shared budget admits exactly what
the same budget admits in one process.

A charge dated more than a window (`horizon`) after the taker's time cannot be honest: the
process that made it has a clock ahead. Counted as dated, it would hold the lane shut for
everyone until that clock's time comes (an hour ahead: an hour). Every store moves such
charges (those after `future_limit`) to the taker's time, so they count for one window from
now, then expire, and says so once (`warn_ahead`: a WARNING on
``logging.getLogger("agentq")`` naming the lane and how far ahead the charge was).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

from agentq.queue import Rate
from agentq.queue.rates import Window

__all__ = [
    "check_pause",
    "check_resume",
    "check_settle",
    "check_take",
    "future_limit",
    "horizon",
    "judge",
    "warn_ahead",
]

LOGGER = logging.getLogger("agentq")


def _name(lane: object) -> str:
    if not isinstance(lane, str) or not lane:
        raise TypeError(f"a lane name must be non-empty text, got {lane!r}")
    return lane


def _time(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


def check_take(
    lane: object, rate: object, tokens: object, estimate: object, now: object
) -> tuple[str, Rate | None, Rate | None, int, float]:
    """Check the arguments of `RateLedger.take_budget`; return them typed.

    Raises:
        TypeError: A lane name that is not text, a budget that is not a `Rate`, no budget
            at all, or a time that is not a number.
        ValueError: A negative or non-int estimate, a time that is not finite.
    """
    name = _name(lane)
    for label, budget in (("rate", rate), ("tokens", tokens)):
        if budget is not None and not isinstance(budget, Rate):
            raise TypeError(f"{label} must be a Rate or None, got {budget!r}")
    if rate is None and tokens is None:
        raise TypeError(f"take_budget of lane {name!r} needs a rate or a tokens budget")
    return name, rate, tokens, _count("estimate", estimate), _time("now", now)  # type: ignore[return-value]


def check_settle(charge: object, tokens: object) -> tuple[int, int]:
    """Check the arguments of `RateLedger.settle_budget` (ints >= 0)."""
    return _count("charge", charge), _count("tokens", tokens)


def check_pause(lane: object, until: object) -> tuple[str, float]:
    """Check the arguments of `RateLedger.pause_lane`."""
    return _name(lane), _time("until", until)


def check_resume(lane: object, now: object) -> tuple[str, float]:
    """Check the arguments of `RateLedger.resume_lane`."""
    return _name(lane), _time("now", now)


def horizon(rate: Rate | None, tokens: Rate | None) -> float:
    """The longest window of the two budgets, in seconds: older charges count for nothing."""
    return max(budget.per_seconds for budget in (rate, tokens) if budget is not None)


def future_limit(rate: Rate | None, tokens: Rate | None, now: float) -> float:
    """The latest honest time of a stored charge: `now` plus the longest window, in seconds.

    A charge dated later was made by a process whose clock is ahead; the stores move it to
    `now` (it still counts for one window) and call `warn_ahead`.
    """
    return now + horizon(rate, tokens)


def warn_ahead(lane: str, latest: float, now: float) -> None:
    """Log (WARNING, ``logging.getLogger("agentq")``) that `lane` held charges dated in the
    future, the latest `latest - now` seconds ahead of this process's clock, now moved to it."""
    LOGGER.warning(
        "rate lane %r: charges dated up to %.1f s after this process's clock (another "
        "process's clock is ahead?); counted from now instead",
        lane,
        latest - now,
    )


def judge(
    charges: Iterable[tuple[float, int]],
    paused_until: float,
    rate: Rate | None,
    tokens: Rate | None,
    estimate: int,
    now: float,
) -> float:
    """Seconds from `now` until a start charged `estimate` tokens fits (0.0: it fits now).

    Args:
        charges: The lane's charges, ``(at, tokens)``, oldest first.
        paused_until: The lane's stored pause (clock time; 0.0 for none).
        rate: The lane's start budget, or None.
        tokens: The lane's token budget, or None.
        estimate: The tokens the start would charge.
        now: The taker's time.
    """
    starts = None if rate is None else Window(rate)
    used = None if tokens is None else Window(tokens)
    for at, amount in charges:
        if starts is not None:
            starts.charge(at, 1)
        if used is not None:
            used.charge(at, amount)
    wait = max(0.0, paused_until - now)
    if starts is not None:
        wait = max(wait, starts.delay(now, 1))
    if used is not None:
        wait = max(wait, used.delay(now, estimate))
    return wait
