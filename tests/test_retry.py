"""`Backoff` and `RetryPolicy`: pure functions of the attempt number (agentq.retry)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentq.errors import NonRetryable, WaitForInput
from agentq.retry import (
    Backoff,
    Classification,
    RetryPolicy,
    Verdict,
    classify,
    is_retryable,
)


def test_fixed_backoff_waits_the_same_before_every_retry() -> None:
    backoff = Backoff.fixed(2.5)
    assert [backoff.delay(n) for n in (1, 2, 50)] == [2.5, 2.5, 2.5]
    assert Backoff.fixed(0).delay(3) == 0.0


def test_exponential_backoff_grows_then_is_capped() -> None:
    backoff = Backoff.exponential(0.5, 10.0)
    assert [backoff.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert Backoff.exponential(1, 100, multiplier=3).delay(3) == 9.0


def test_the_cap_applies_before_any_overflow_at_huge_attempt_numbers() -> None:
    backoff = Backoff.exponential(0.001, 0.01, multiplier=2.0)
    assert backoff.delay(10**9) == 0.01
    assert Backoff.exponential(1e-300, 1e300, multiplier=1e10).delay(10**9) == 1e300
    policy = RetryPolicy(max_attempts=2000, backoff=backoff)
    assert all(policy.delay(n) <= 0.01 for n in range(1, 2000))  # BH-07's policy


def test_jitter_draws_within_its_bounds() -> None:
    backoff = Backoff.exponential(1.0, 8.0, jitter=0.25)
    rng = random.Random(7)
    draws = [backoff.delay(4, rng) for _ in range(2000)]
    assert all(6.0 <= d <= 8.0 for d in draws)
    assert max(draws) - min(draws) > 1.5  # really random
    assert Backoff.fixed(3, jitter=1.0).delay(1, random.Random(1)) <= 3


@given(
    base=st.floats(0, 1e6),
    extra=st.floats(0, 1e6),
    multiplier=st.floats(1, 1e6),
    jitter=st.floats(0, 1),
    failures=st.integers(1, 10**12),
)
def test_any_delay_is_finite_and_within_zero_and_max(
    base: float, extra: float, multiplier: float, jitter: float, failures: int
) -> None:
    backoff = Backoff(base=base, multiplier=multiplier, max=base + extra, jitter=jitter)
    delay = backoff.delay(failures, random.Random(failures))
    assert math.isfinite(delay) and 0.0 <= delay <= backoff.max


@pytest.mark.parametrize(
    "build",
    [
        lambda: Backoff.fixed(-1),
        lambda: Backoff.fixed(math.inf),
        lambda: Backoff.fixed(math.nan),
        lambda: Backoff.exponential(2, 1),
        lambda: Backoff.exponential(1, 2, multiplier=0.5),
        lambda: Backoff.fixed(1, jitter=1.5),
        lambda: Backoff.fixed(1).delay(0),
        lambda: RetryPolicy(max_attempts=0),
    ],
)
def test_invalid_values_raise_value_error(build: object) -> None:
    with pytest.raises(ValueError):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    "build",
    [
        lambda: Backoff.fixed(True),
        lambda: Backoff.fixed("1"),
        lambda: RetryPolicy(max_attempts=True),
        lambda: RetryPolicy(max_attempts=2.0),
        lambda: RetryPolicy(backoff=1.0),
    ],
)
def test_values_of_the_wrong_type_raise_type_error(build: object) -> None:
    with pytest.raises(TypeError):
        build()  # type: ignore[operator]


def test_attempts_count_the_first_one() -> None:
    policy = RetryPolicy(max_attempts=3, backoff=Backoff.fixed(1))
    assert [policy.should_retry(n) for n in (1, 2, 3)] == [True, True, False]
    assert RetryPolicy().should_retry(1) is False
    assert RetryPolicy(max_attempts=3, backoff=Backoff.exponential(0.5, 10.0)).delay(2) == 1.0


# ------------------------------------------------------------------ what is retried at all


class Permanent(Exception):
    retryable = False


class Broken(Exception):
    def __getattr__(self, name: str) -> object:
        raise RuntimeError("no attributes today")


def test_plain_failures_are_retried_and_marked_ones_are_not() -> None:
    assert classify(None) == Classification(Verdict.RETRY)
    assert is_retryable(ValueError("x")) and is_retryable(TimeoutError())
    assert is_retryable(Broken())  # a failing __getattr__ does not make it final
    for exc in (NonRetryable("no"), Permanent("no")):
        verdict = classify(exc)
        assert verdict.verdict is Verdict.FINAL and verdict.leaf is exc
        assert not is_retryable(exc)
    wait = WaitForInput("approve?")
    assert classify(wait) == Classification(Verdict.WAIT, wait, (wait,))
    assert classify(wait).wait_reason == "approve?"


def test_a_group_holding_a_wait_waits_whatever_its_other_leaves() -> None:
    first, second, again = WaitForInput("send mail?"), WaitForInput("pay?"), WaitForInput("pay?")
    group = ExceptionGroup("tools", [
        ValueError("x"), NonRetryable("no"), first, ExceptionGroup("inner", [second, again]),
    ])
    verdict = classify(group)
    assert verdict.verdict is Verdict.WAIT and verdict.leaf is first
    assert verdict.waits == (first, second, again)
    assert verdict.wait_reason == "send mail?; pay?"  # distinct reasons, in order


def test_a_group_with_a_final_leaf_is_final_naming_that_leaf() -> None:
    leaf = Permanent("card expired")
    group = BaseExceptionGroup("tools", [ValueError("x"), ExceptionGroup("in", [leaf])])
    verdict = classify(group)
    assert verdict.verdict is Verdict.FINAL and verdict.leaf is leaf


def test_a_group_of_ordinary_failures_is_ordinary() -> None:
    assert classify(BaseExceptionGroup("tools", [ValueError(), KeyboardInterrupt()])).verdict is (
        Verdict.RETRY
    )


def test_a_group_marked_final_itself_is_final() -> None:
    class FinalGroup(ExceptionGroup[Exception]):
        retryable = False

    group = FinalGroup("tools", [ValueError()])
    assert classify(group).leaf is group


def test_a_joined_wait_reason_is_capped() -> None:
    waits = [WaitForInput(f"{i}" * 3000) for i in range(3)]
    reason = classify(ExceptionGroup("w", waits)).wait_reason
    assert len(reason) == 4096 and reason.endswith("…")
