"""`check_now` rounds a time to the microsecond exactly as a `datetime` does."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentq.events import utc
from agentq.store.contract.checks import check_now


@settings(max_examples=2000, deadline=None)
@given(st.floats(min_value=0.0, max_value=253_402_300_799.0, allow_nan=False))
@example(1_767_225_600.0000005)  # a half microsecond: to even
@example(1_767_225_600.0000015)
@example(1_767_225_600.9999996)  # rounds up into the next second
@example(0.0)
@example(253_402_300_799.0)
@example(1e-7)
def test_at_is_the_datetime_round_trip(now: float) -> None:
    assert check_now(now) == (now, utc(now).timestamp())


def test_times_a_datetime_cannot_hold_are_refused() -> None:
    with pytest.raises(ValueError, match="now must be a date Python can represent"):
        check_now(1e20)
    assert check_now(-1.5)[1] == utc(-1.5).timestamp()  # before 1970: the slow way
