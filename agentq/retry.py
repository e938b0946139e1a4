"""Retry policies, and the one rule for what is retried at all.

Pure functions: nothing here sleeps or reads the clock. One policy type serves queue jobs and
workflow steps, and so does one rule, `classify`, for which failures a policy may retry:

- an exception whose ``retryable`` attribute is ``False`` (a class attribute is enough),
  `NonRetryable` among them, is final: the job or step fails at once;
- `WaitForInput` is a wait: a step enters ``Waiting`` (a queue job fails without retry);
- an exception group (what `asyncio.TaskGroup` raises when parallel calls fail) is classified
  by its leaves, depth first: a group holding a wait waits (the siblings that failed beside
  it do not matter: the step runs again once resumed); else a group holding a final leaf is
  final; else it is an ordinary failure;
- anything else (timeouts included) is an ordinary failure, retried while the policy allows.

Only the exception itself and a group's leaves count, not ``__cause__``: a `JobFailed` raised
by ``push_and_wait`` is an ordinary failure whatever failed the inner job.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from enum import StrEnum

from agentq.errors import MAX_REASON_CHARS, WaitForInput

__all__ = ["Backoff", "Classification", "RetryPolicy", "Verdict", "classify", "is_retryable"]


class Verdict(StrEnum):
    """What a failure calls for (see `classify`)."""

    RETRY = "retry"
    """An ordinary failure: the retry policy decides whether another attempt follows."""
    FINAL = "final"
    """Never retried: the job or step fails at once."""
    WAIT = "wait"
    """A wait for outside input: a step enters ``Waiting``; never retried."""


@dataclass(frozen=True, slots=True)
class Classification:
    """The verdict on one failure, and the exceptions that decided it.

    Attributes:
        verdict: `Verdict.RETRY`, `Verdict.FINAL` or `Verdict.WAIT`.
        leaf: The exception that decided a final verdict or a wait (for a group, its first
            deciding leaf), or None for an ordinary failure.
        waits: Every `WaitForInput` found, in the group's depth-first order (for a wait).
    """

    verdict: Verdict
    leaf: BaseException | None = None
    waits: tuple[WaitForInput, ...] = ()

    @property
    def wait_reason(self) -> str:
        """The reason a step waits for: the distinct reasons of `waits`, joined by ``"; "``,
        in order, at most `agentq.errors.MAX_REASON_CHARS` characters ('' if none)."""
        reasons = list(dict.fromkeys(w.reason for w in self.waits))
        text = "; ".join(reasons)
        return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


_RETRY = Classification(Verdict.RETRY)


def _says_final(exc: BaseException) -> bool:
    try:
        return getattr(exc, "retryable", True) is False
    except Exception:  # a broken __getattr__ does not make an exception final
        return False


def _leaves(exc: BaseException) -> list[BaseException]:
    """The leaves of an exception group, depth first (an exception alone is its own leaf)."""
    out: list[BaseException] = []
    stack: list[BaseException] = [exc]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup) and not _says_final(current):
            stack.extend(reversed(current.exceptions))
        else:
            out.append(current)
    return out


def classify(exc: BaseException | None) -> Classification:
    """Classify a failure by the rule in the module docstring.

    Args:
        exc: What the body raised, or None (a failure without an exception object).

    Returns:
        A `Classification`; ``classify(None)`` is an ordinary failure.

    Example:
        >>> classify(ExceptionGroup("tools", [ValueError(), NonRetryable("no")])).verdict
        <Verdict.FINAL: 'final'>
    """
    if exc is None:
        return _RETRY
    if not isinstance(exc, BaseExceptionGroup):  # the common case
        if isinstance(exc, WaitForInput):
            return Classification(Verdict.WAIT, exc, (exc,))
        return Classification(Verdict.FINAL, exc) if _says_final(exc) else _RETRY
    leaves = _leaves(exc)
    waits = tuple(leaf for leaf in leaves if isinstance(leaf, WaitForInput))
    if waits:
        return Classification(Verdict.WAIT, waits[0], waits)
    final = next((leaf for leaf in leaves if _says_final(leaf)), None)
    return _RETRY if final is None else Classification(Verdict.FINAL, final)


def is_retryable(exc: BaseException | None) -> bool:
    """Whether a retry policy may retry a failure that raised `exc` (see `classify`)."""
    return classify(exc).verdict is Verdict.RETRY


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
