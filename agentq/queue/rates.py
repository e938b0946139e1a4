"""Rate limits: `Rate`, the sliding window that enforces one, and what a failure asks for.

A lane may bound how many of its jobs start (``LaneConfig(rate=Rate(60, 60.0))``) and how
many tokens its jobs use (``tokens=Rate(100_000, 60.0)``) in any window of ``per_seconds``
on the queue's clock. `Window` is one such budget: the amounts charged at their start times,
forgotten ``per_seconds`` later. It never reads the clock itself: the caller passes ``now``.

A failure may ask the lane to pause: `retry_after` reads how long, from an exception's
``retry_after`` attribute (seconds; pydantic-ai's model errors carry it) or from an HTTP
error with status 429 and a ``Retry-After`` header (duck-typed on ``status_code`` and
``headers``, so the queue imports no HTTP or model library). `tokens_used` reads a job's
actual usage from its output, to settle its estimate.

The windows here are one queue's; a store shares a lane's budget between processes
(`agentq.queue.rate_ledger`, `agentq.queue.budgets`; ``docs/lanes.md``).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["Rate"]


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` units in any window of `per_seconds` seconds (a sliding window).

    Used by `LaneConfig`: ``rate=Rate(10, 1.0)`` lets at most 10 jobs of a lane start in any
    second; ``tokens=Rate(40_000, 60.0)`` lets the lane's jobs use at most 40,000 tokens in
    any minute.

    Args:
        count: How many units the window holds (an int >= 1; bools are refused).
        per_seconds: The window's length in seconds (a positive, finite number).

    Raises:
        ValueError: `count` or `per_seconds` is out of range or of the wrong type; the
            message names the value.

    Example:
        >>> Rate(60, 60.0)
        Rate(count=60, per_seconds=60.0)
    """

    count: int
    per_seconds: float

    def __post_init__(self) -> None:
        count = self.count
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"Rate count must be an int >= 1, got {count!r}")
        per = self.per_seconds
        valid = not isinstance(per, bool) and isinstance(per, int | float)
        if valid:
            try:
                valid = math.isfinite(per) and per > 0
            except OverflowError:
                valid = False
        if not valid:
            raise ValueError(
                f"Rate per_seconds must be a positive, finite number of seconds, got {per!r}"
            )
        object.__setattr__(self, "per_seconds", float(per))


class Charge:
    """One amount charged to a `Window` at a time; `Window.settle` may change its amount."""

    __slots__ = ("amount", "at")

    def __init__(self, at: float, amount: int) -> None:
        self.at = at
        self.amount = amount


class Window:
    """A sliding-window budget: the charges of the last ``rate.per_seconds`` seconds.

    A charge of ``amount`` fits at ``now`` when the charges made in ``(now - per, now]`` plus
    ``amount`` stay within ``rate.count``. A charge larger than the whole budget fits only
    in an empty window, so it is delayed, never refused for ever.
    """

    __slots__ = ("charges", "rate", "used")

    def __init__(self, rate: Rate) -> None:
        self.rate = rate
        self.charges: deque[Charge] = deque()
        self.used = 0

    def _expire(self, now: float) -> None:
        charges = self.charges
        horizon = now - self.rate.per_seconds
        while charges and charges[0].at <= horizon:
            self.used -= charges.popleft().amount

    def usage(self, now: float) -> int:
        """The units charged in the window ending at `now`."""
        self._expire(now)
        return self.used

    def delay(self, now: float, amount: int) -> float:
        """Seconds from `now` until a charge of `amount` fits (0.0: it fits now)."""
        self._expire(now)
        limit = self.rate.count
        if self.used + amount <= limit or not self.charges:
            return 0.0
        per = self.rate.per_seconds
        used = self.used
        for charge in self.charges:  # oldest first: each one leaving makes room
            used -= charge.amount
            if used + amount <= limit or used <= 0:
                return charge.at + per - now
        return self.charges[-1].at + per - now  # pragma: no cover - the loop always returns

    def charge(self, now: float, amount: int) -> Charge:
        """Charge `amount` at `now` (the caller checked `delay` first)."""
        self._expire(now)
        charge = Charge(now, amount)
        self.charges.append(charge)
        self.used += amount
        return charge

    def settle(self, charge: Charge, amount: int) -> None:
        """Replace a charge's amount by the actual one, if it is still in the window."""
        if self.charges and self.charges[0].at <= charge.at:
            for kept in self.charges:
                if kept is charge:
                    self.used += amount - charge.amount
                    break
        charge.amount = amount


MAX_RETRY_AFTER = 3600.0
"""The longest pause (seconds) a failure's retry-after may ask for; more is clamped to it."""

_log = logging.getLogger(__name__)


def retry_after(exc: BaseException | None, lane: object = None) -> float | None:
    """Seconds a failure asks to wait before anything of its lane starts again, or None.

    Read from, in order: a ``retry_after`` attribute of `exc` (a number of seconds >= 0,
    e.g. pydantic-ai's ``ModelAPIError.retry_after``); then, for an error with
    ``status_code == 429``, its ``headers`` (a mapping, or an object with ``.headers`` as
    ``response`` or ``body``): ``retry-after-ms`` in milliseconds, else ``Retry-After`` as a
    number of seconds (an HTTP date is not read). Anything else: None.

    A value above `MAX_RETRY_AFTER` (e.g. ``Retry-After: 99999999``) is clamped to it and
    logged at WARNING, naming `lane` (the lane the failure would pause, for the message only)
    and the value asked.
    """
    seconds = _asked(exc)
    if seconds is not None and seconds > MAX_RETRY_AFTER:
        _log.warning(
            "lane %s: a retry-after of %r s is clamped to MAX_RETRY_AFTER (%r s)",
            lane, seconds, MAX_RETRY_AFTER,
        )
        return MAX_RETRY_AFTER
    return seconds


def _asked(exc: BaseException | None) -> float | None:
    if exc is None:
        return None
    seconds = _seconds(getattr(exc, "retry_after", None))
    if seconds is not None:
        return seconds
    if getattr(exc, "status_code", None) != 429:
        return None
    for holder in (exc, getattr(exc, "response", None), getattr(exc, "body", None)):
        headers = getattr(holder, "headers", None)
        if headers is None:
            continue
        try:
            millis = headers.get("retry-after-ms")
            value = headers.get("retry-after")
            if value is None:
                value = headers.get("Retry-After")
        except (AttributeError, TypeError):
            continue
        seconds = _seconds(millis)
        if seconds is not None:
            return seconds / 1000
        seconds = _seconds(value)
        if seconds is not None:
            return seconds
    return None


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def tokens_used(output: object) -> int | None:
    """The tokens a job's output says it used, or None when it says nothing.

    The output's ``usage`` (an attribute, or a method called with no arguments, as
    pydantic-ai's ``AgentRunResult.usage()``), read by `usage_tokens`.
    """
    usage = getattr(output, "usage", None)
    if usage is None:
        return None
    if callable(usage):
        try:
            usage = usage()
        except Exception:  # a usage we cannot read settles nothing
            return None
    return usage_tokens(usage)


def usage_tokens(usage: object) -> int | None:
    """The tokens a usage counts, or None: its ``total_tokens``, else ``input_tokens +
    output_tokens`` (ints >= 0), read as attributes or, from a mapping (a durable call's
    recorded usage), as keys."""
    if isinstance(usage, Mapping):
        read: Callable[[str], object] = usage.get
    else:
        read = lambda name: getattr(usage, name, None)  # noqa: E731
    total = read("total_tokens")
    if type(total) is int and total >= 0:
        return total
    given = read("input_tokens")
    produced = read("output_tokens")
    if type(given) is int and type(produced) is int and given >= 0 and produced >= 0:
        return given + produced
    return None
