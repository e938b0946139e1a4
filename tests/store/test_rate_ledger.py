"""The RateLedger contract: take_budget, settle_budget, pause_lane and resume_lane, on
every store.

A store that passes this file can share the budgets of a `Queue(store=...)`'s lanes.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import cast

import pytest

from agentq.errors import StoreError
from agentq.queue import BudgetGrant, Rate, RateLedger
from agentq.store import DurableStore, SqliteStore

from .conftest import T0

pytestmark = pytest.mark.timeout(30)

EVERY_10_S = Rate(3, 10.0)


def ledger(store: DurableStore) -> RateLedger:
    assert isinstance(store, RateLedger)
    return cast(RateLedger, store)


async def take(
    store: DurableStore, lane: str = "medium", *, rate: Rate | None = EVERY_10_S,
    tokens: Rate | None = None, estimate: int = 0, at: float = 0.0,
) -> BudgetGrant:
    return await ledger(store).take_budget(
        lane, rate=rate, tokens=tokens, estimate=estimate, now=T0 + at
    )


async def test_starts_fit_the_window_and_the_wait_says_when(store: DurableStore) -> None:
    granted = [await take(store, at=at) for at in (0.0, 0.0, 4.0)]
    assert all(g.charge is not None and g.wait == 0.0 for g in granted)
    assert len({g.charge for g in granted}) == 3
    refused = await take(store, at=9.0)
    assert refused.charge is None and refused.wait == pytest.approx(1.0)  # 0 leaves at 10
    assert (await take(store, at=10.0)).charge is not None
    assert (await take(store, at=10.0)).charge is not None
    refused = await take(store, at=10.0)
    assert refused.charge is None and refused.wait == pytest.approx(4.0)  # 4.0 leaves at 14
    # Another lane has a window of its own.
    assert (await take(store, "high", at=10.0)).charge is not None


async def test_tokens_window_charges_the_estimate_and_settles(store: DurableStore) -> None:
    budget = Rate(100, 60.0)
    big = await take(store, rate=None, tokens=budget, estimate=80)
    assert big.charge is not None
    refused = await take(store, rate=None, tokens=budget, estimate=30, at=1.0)
    assert refused.charge is None and refused.wait == pytest.approx(59.0)
    await ledger(store).settle_budget(big.charge, 10)  # it used 10 tokens, not 80
    assert (await take(store, rate=None, tokens=budget, estimate=30, at=1.0)).charge is not None
    # Bigger than the whole budget: waits for an empty window, never refused for ever.
    huge = await take(store, rate=None, tokens=budget, estimate=500, at=2.0)
    assert huge.charge is None and huge.wait == pytest.approx(59.0)
    assert (await take(store, rate=None, tokens=budget, estimate=500, at=61.0)).charge
    await ledger(store).settle_budget(10**9, 5)  # a charge long gone: nothing to settle


async def test_a_stored_pause_holds_every_taker_and_only_grows(store: DurableStore) -> None:
    await ledger(store).pause_lane("low", T0 + 5.0)
    await ledger(store).pause_lane("low", T0 + 2.0)  # an earlier end keeps the later one
    refused = await take(store, "low", at=1.0)
    assert refused.charge is None
    assert refused.wait == pytest.approx(4.0) and refused.paused_until == T0 + 5.0
    granted = await take(store, "low", at=5.0)
    assert granted.charge is not None and granted.paused_until == T0 + 5.0
    assert (await take(store, "medium", at=1.0)).charge is not None  # other lanes go on


async def test_resume_lifts_a_stored_pause_for_every_taker(store: DurableStore) -> None:
    first = await take(store, "low")  # a charge in the window, kept by the lift
    assert first.charge is not None
    await ledger(store).pause_lane("low", T0 + 30.0)
    await ledger(store).pause_lane("high", T0 + 30.0)
    assert (await take(store, "low", at=1.0)).charge is None
    assert await ledger(store).resume_lane("low", T0 + 2.0) is True
    granted = await take(store, "low", at=2.0)
    assert granted.charge is not None and granted.paused_until == 0.0
    assert await ledger(store).resume_lane("low", T0 + 3.0) is False  # nothing left to lift
    assert await ledger(store).resume_lane("medium", T0 + 3.0) is False  # never paused
    assert (await take(store, "high", at=3.0)).paused_until == T0 + 30.0  # its own pause
    await take(store, "low", at=3.0)  # the third start of the window
    refused = await take(store, "low", at=4.0)  # the window was kept: 3 in 10 s
    assert refused.charge is None and refused.paused_until == 0.0
    await ledger(store).pause_lane("high", T0 + 1.0)  # an ended pause is not lifted again
    assert await ledger(store).resume_lane("high", T0 + 40.0) is False


async def test_concurrent_takes_never_overfill(store: DurableStore) -> None:
    grants = await asyncio.gather(*(take(store, at=1.0) for _ in range(10)))
    assert sum(g.charge is not None for g in grants) == 3


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"lane": ""}, TypeError, "''"),
        ({"lane": 3}, TypeError, "3"),
        ({"rate": None, "tokens": None}, TypeError, "needs a rate"),
        ({"rate": (3, 10.0)}, TypeError, "(3, 10.0)"),
        ({"estimate": -1}, ValueError, "-1"),
        ({"estimate": True}, ValueError, "True"),
        ({"now": math.nan}, ValueError, "nan"),
        ({"now": "now"}, TypeError, "'now'"),
    ],
)
async def test_bad_arguments_are_refused_naming_them(
    store: DurableStore, kwargs: dict[str, object], error: type[Exception], named: str
) -> None:
    args: dict[str, object] = {
        "lane": "medium", "rate": Rate(3, 10.0), "tokens": None, "estimate": 0, "now": T0
    }
    args.update(kwargs)
    lane = args.pop("lane")
    with pytest.raises(error) as info:
        await ledger(store).take_budget(lane, **args)  # type: ignore[arg-type]
    assert named in str(info.value)
    with pytest.raises(ValueError, match="-2"):
        await ledger(store).settle_budget(-2, 1)
    with pytest.raises(ValueError, match=r"tokens .* -3"):
        await ledger(store).settle_budget(1, -3)
    with pytest.raises(ValueError, match="inf"):
        await ledger(store).pause_lane("low", math.inf)
    with pytest.raises(TypeError, match="''"):
        await ledger(store).resume_lane("", T0)
    with pytest.raises(ValueError, match="nan"):
        await ledger(store).resume_lane("low", math.nan)
    assert (await take(store)).charge is not None  # nothing was written by the refusals


async def test_a_closed_store_raises_store_error(store: DurableStore) -> None:
    await store.close()
    with pytest.raises(StoreError):
        await take(store)
    with pytest.raises(StoreError):
        await ledger(store).pause_lane("low", T0)
    with pytest.raises(StoreError):
        await ledger(store).resume_lane("low", T0)


async def test_the_window_outlives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "rates.db"
    async with SqliteStore(path) as first:
        for _ in range(3):
            assert (await take(first)).charge is not None
        await first.pause_lane("high", T0 + 30.0)
    async with SqliteStore(path) as again:
        refused = await take(again, at=5.0)
        assert refused.charge is None and refused.wait == pytest.approx(5.0)
        assert (await take(again, "high", at=5.0)).paused_until == T0 + 30.0
