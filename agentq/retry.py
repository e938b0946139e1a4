"""Retry policies: how many attempts, and how long to wait between them.

Pure functions of the attempt number: nothing here sleeps or reads the clock. One policy type
serves queue jobs and workflow steps.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

__all__ = ["Backoff", "RetryPolicy"]


def _check_seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    try:
        finite = math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before a retry, as a function of how many attempts have failed.

    Build one with `Backoff.fixed` or `Backoff.exponential`. The cap is applied before the
    exponent can overflow, so any attempt number (even millions) gives a finite delay.

    Attributes:
        base: Delay in seconds after the first failure.
        multiplier: Growth factor per further failure (1.0 for a fixed delay).
        max: Upper bound of the delay in seconds, before jitter.
        jitter: Fraction in [0, 1] of the delay that is randomised: the delay is drawn
            uniformly from ``[d * (1 - jitter), d]``. 0 means deterministic.
    """

    base: float = 0.0
    multiplier: float = 1.0
    max: float = 0.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        _check_seconds("base", self.base)
        _check_seconds("max", self.max)
        if not math.isfinite(self.multiplier) or self.multiplier < 1.0:
            raise ValueError(f"multiplier must be a finite number >= 1, got {self.multiplier!r}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter!r}")
        if self.max < self.base:
            raise ValueError(f"max ({self.max!r}) must be >= base ({self.base!r})")

    @classmethod
    def fixed(cls, seconds: float, *, jitter: float = 0.0) -> Backoff:
        """The same delay, `seconds`, before every retry.

        Raises:
            ValueError: `seconds` is negative or not finite, or `jitter` is outside [0, 1].
        """
        seconds = _check_seconds("seconds", seconds)
        return cls(base=seconds, multiplier=1.0, max=seconds, jitter=jitter)

    @classmethod
    def exponential(
        cls, base: float, max: float, *, multiplier: float = 2.0, jitter: float = 0.0
    ) -> Backoff:
        """``base * multiplier ** (n - 1)`` seconds before the n-th retry, capped at `max`.

        Raises:
            ValueError: A negative or infinite value, ``max < base``, ``multiplier < 1``, or
                `jitter` outside [0, 1].
        """
        return cls(base=base, multiplier=multiplier, max=max, jitter=jitter)

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after `failures` failed attempts (1 for the first retry).

        Args:
            failures: How many attempts have failed so far (>= 1).
            rng: Source of jitter; defaults to the `random` module's generator.

        Raises:
            ValueError: `failures` is below 1.
        """
        if failures < 1:
            raise ValueError(f"failures must be >= 1, got {failures!r}")
        exponent = failures - 1
        if self.base == 0.0:
            capped = 0.0
        elif self.multiplier == 1.0 or exponent == 0:
            capped = min(self.base, self.max)
        else:
            # Compare in log space first: base * m**e can overflow long before the cap matters,
            # and so can m**e alone when base is tiny (even though the product would fit).
            growth = exponent * math.log(self.multiplier)
            if growth >= math.log(self.max) - math.log(self.base):
                capped = self.max
            elif growth < 700.0:  # m**e stays finite (e**709 is near the float limit)
                capped = min(self.max, self.base * self.multiplier**exponent)
            else:
                capped = min(self.max, math.exp(math.log(self.base) + growth))
        if self.jitter == 0.0 or capped == 0.0:
            return capped
        draw = (rng or random).random()
        return capped * (1.0 - self.jitter * draw)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times to attempt a job or step, and the backoff between attempts.

    Attributes:
        max_attempts: Attempts in all, counting the first one (>= 1). 1 means no retry.
        backoff: Delay before each retry.

    Example:
        >>> RetryPolicy(max_attempts=3, backoff=Backoff.exponential(0.5, 10.0)).delay(2)
        1.0
    """

    max_attempts: int = 1
    backoff: Backoff = field(default_factory=lambda: Backoff.fixed(0.0))

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise TypeError(f"max_attempts must be an int, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts!r}")
        if not isinstance(self.backoff, Backoff):
            raise TypeError(f"backoff must be a Backoff, got {self.backoff!r}")

    def should_retry(self, attempt: int) -> bool:
        """Whether a failure of attempt number `attempt` (1-based) gets another attempt."""
        return attempt < self.max_attempts

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after attempt number `attempt` (1-based) failed."""
        return self.backoff.delay(attempt, rng)
