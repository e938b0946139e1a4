"""The ticks of a schedule's spec (`agentq.workflows.cadence`): pure functions of Unix
seconds, cron expressions in UTC through cronsim."""

from __future__ import annotations

import sys

import pytest

from agentq.errors import MissingExtraError
from agentq.workflows.cadence import check_spec, due, first_tick

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a Thursday


def test_a_period_ticks_on_the_grid_of_its_first_tick() -> None:
    assert check_spec(None, 60) == (None, 60.0)
    assert first_tick(None, 60.0, T0 + 7.5) == T0 + 67.5
    assert due(None, 60.0, T0 + 60, T0 + 60) == (T0 + 60, T0 + 120)  # exactly at a tick
    assert due(None, 60.0, T0 + 60, T0 + 659.9) == (T0 + 600, T0 + 660)  # nine missed
    assert due(None, 0.1, T0, T0 + 1000.05) == pytest.approx((T0 + 1000.0, T0 + 1000.1))


def test_a_cron_expression_ticks_at_its_matches_in_utc() -> None:
    assert check_spec("  0  9 * *   * ", None) == ("0 9 * * *", None)  # fields normalised
    assert first_tick("0 9 * * *", None, T0) == T0 + 9 * 3600
    assert first_tick("0 9 * * *", None, T0 + 9 * 3600) == T0 + 33 * 3600  # strictly after
    # weekdays at 09:00: from Thursday 09:00, missed until Monday 10:00 -> Monday's only
    monday_10 = T0 + 4 * 86400 + 10 * 3600
    assert due("0 9 * * 1-5", None, T0 + 9 * 3600, monday_10) == (
        T0 + 4 * 86400 + 9 * 3600, T0 + 5 * 86400 + 9 * 3600,
    )
    assert due("*/5 * * * *", None, T0 + 300, T0 + 23 * 60 + 1) == (T0 + 1200, T0 + 1500)


@pytest.mark.parametrize(
    ("cron", "every", "error", "named"),
    [
        (None, None, ValueError, "exactly one"),
        ("* * * * *", 1, ValueError, "exactly one"),
        ("@daily", None, ValueError, "'@daily'"),
        ("0 9 * *", None, ValueError, "4 fields"),
        ("0 25 * * *", None, ValueError, "'0 25 \\* \\* \\*'"),
        ("0 0 30 2 *", None, ValueError, "'0 0 30 2 \\*'"),
        (b"* * * * *", None, TypeError, "b'"),
        (None, -1, ValueError, "-1"),
        (None, float("nan"), ValueError, "nan"),
        (None, False, TypeError, "False"),
        (None, 1e-9, ValueError, "1e-09"),
        (None, 1e300, ValueError, "1e\\+300"),
    ],
)
def test_a_bad_spec_is_refused_naming_it(
    cron: object, every: object, error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        check_spec(cron, every)


def test_a_cron_without_cronsim_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cronsim", None)  # import cronsim now fails
    with pytest.raises(MissingExtraError, match=r"agentq\[cron\]"):
        check_spec("0 9 * * *", None)
    assert check_spec(None, 5) == (None, 5.0)  # a period needs nothing


def test_due_at_unix_scale_is_arithmetic_and_refuses_a_stored_tiny_period() -> None:
    now = 1.8e9
    assert due(None, 0.001, now - 5000.0, now) == pytest.approx((now, now + 0.001))
    tick, after = due(None, 0.001, now - 5000.0, now)
    assert tick <= now < after
    with pytest.raises(ValueError, match="1e-09"):  # would loop forever before
        due(None, 1e-9, now - 1.0, now)
