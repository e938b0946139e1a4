"""Schedules (``engine.schedule``): one instance per tick on the fake clock, the latest of the
missed ticks only, unschedule, replace semantics, bad input refused before anything is
stored, and two engines (or stores) racing for one tick on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentq import StepContext, StepDef, WorkflowDef, WorkflowEngine
from agentq.clock import FakeClock
from agentq.errors import InvalidKeyError, PayloadError, UnknownWorkflowError
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import (
    DurableStore,
    PostgresStore,
    ScheduleRow,
    SqliteStore,
    WorkflowState,
    instance_id,
)

pytestmark = pytest.mark.timeout(60)

T0 = FakeClock().time()  # 2026-01-01T00:00:00Z


async def open_postgres(request: pytest.FixtureRequest) -> PostgresStore:
    """A `PostgresStore` on this test's (empty) PostgreSQL schema; each call a new pool."""
    target = request.getfixturevalue("pg_target")
    return await PostgresStore.open(target.dsn, schema=target.schema)


def counting(name: str = "report") -> tuple[WorkflowDef, dict[str, int]]:
    """A one-step definition that counts its runs by workflow id."""
    runs: dict[str, int] = {}

    async def body(ctx: StepContext) -> Any:
        runs[ctx.workflow_id] = runs.get(ctx.workflow_id, 0) + 1
        return ctx.input

    return WorkflowDef(name, [StepDef("go", body)]), runs


async def until(check: Callable[[], Any], what: str) -> None:
    """Wait (bounded, in real time: SQLite answers on its thread) until `check()` holds."""
    try:
        async with asyncio.timeout(10):
            while not await check():  # noqa: ASYNC110 - SQLite's thread writes
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def instances(store: DurableStore, name: str) -> list[str]:
    return [w.workflow_id for w in await store.workflows() if w.workflow_id.startswith(name + "@")]


async def ended(store: DurableStore, count: int, name: str = "n") -> bool:
    rows = [w for w in await store.workflows() if w.workflow_id.startswith(name + "@")]
    return len(rows) >= count and all(w.state is WorkflowState.COMPLETED for w in rows)


@asynccontextmanager
async def serving(engine: WorkflowEngine, poll: float = 1e9) -> AsyncIterator[None]:
    task = asyncio.create_task(engine.serve(poll_interval=poll))
    try:
        await asyncio.sleep(0)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


async def test_every_fires_one_instance_per_tick(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    report, runs = counting()
    assert await engine.schedule("n", report, every=60, input={"to": "ops"})
    async with serving(engine):  # it never polls: the ticks wake it
        for k in range(1, 4):
            await clock.advance(60)
            await until(lambda k=k: ended(store, k), f"tick {k}")
    ids = await instances(store, "n")
    assert ids == [f"n@{iso(T0 + 60 * k)}" for k in (1, 2, 3)]
    assert runs == dict.fromkeys(ids, 1)
    assert ids[0] == "n@2026-01-01T00:01:00Z" == instance_id("n", T0 + 60)
    (row,) = await store.schedules()
    assert (row.last_tick, row.last_instance, row.next_tick) == (T0 + 180, ids[-1], T0 + 240)
    assert (await store.get_workflow(ids[0])).input == {"to": "ops"}  # type: ignore[union-attr]


async def test_a_daily_cron_fires_at_its_time(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    report, _ = counting()
    await engine.schedule("daily", report, cron="0 9 * * *")
    (row,) = await store.schedules()
    assert row.next_tick == T0 + 9 * 3600 and row.spec == "cron 0 9 * * *"
    async with serving(engine):
        for day in range(3):
            await clock.advance(9 * 3600 if day == 0 else 24 * 3600)
            await until(lambda d=day: ended(store, d + 1, "daily"), f"day {day}")
    assert await instances(store, "daily") == [
        "daily@2026-01-01T09:00:00Z", "daily@2026-01-02T09:00:00Z", "daily@2026-01-03T09:00:00Z",
    ]


async def test_missed_ticks_run_only_the_latest(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    report, runs = counting()
    await engine.schedule("n", report, every=60)
    await clock.advance(10 * 60 + 30)  # nobody serves: ten ticks missed
    async with serving(engine):
        await until(lambda: ended(store, 1), "the latest tick")
        assert await instances(store, "n") == [f"n@{iso(T0 + 600)}"]
        (row,) = await store.schedules()
        assert row.next_tick == T0 + 660  # the ticks stay on their grid
        await clock.advance(30)
        await until(lambda: ended(store, 2), "the next tick")
    assert await instances(store, "n") == [f"n@{iso(T0 + 600)}", f"n@{iso(T0 + 660)}"]
    assert sum(runs.values()) == 2


async def test_recover_fires_the_due_tick(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    from agentq import recover

    report, runs = counting()
    await engine.schedule("n", report, every=60)
    await clock.advance(125)
    report_ = await recover(engine)
    await report_.wait()
    assert await instances(store, "n") == [f"n@{iso(T0 + 120)}"]
    assert sum(runs.values()) == 1


async def test_unschedule_stops_it(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    report, _ = counting()
    await engine.schedule("n", report, every=60)
    async with serving(engine):
        await clock.advance(60)
        await until(lambda: ended(store, 1), "the first tick")
        assert await engine.unschedule("n") is True
        assert await engine.unschedule("n") is False
        await clock.advance(600)
        await asyncio.sleep(0.05)
    assert await instances(store, "n") == [f"n@{iso(T0 + 60)}"]
    assert await store.schedules() == []
    assert (await store.get_workflow(f"n@{iso(T0 + 60)}")) is not None  # instances are kept


async def test_same_spec_is_a_no_op_another_replaces(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    report, _ = counting()
    assert await engine.schedule("n", report, every=60, input=1) is True
    await clock.advance(30)
    assert await engine.schedule("n", "report", every=60, input=1) is False
    (row,) = await store.schedules()
    assert row.next_tick == T0 + 60  # kept
    assert await engine.schedule("n", report, every=60, input=2) is True  # another input
    (row,) = await store.schedules()
    assert (row.next_tick, row.input) == (T0 + 90, 2)
    assert await engine.schedule("n", report, cron="*/5 * * * *", input=2) is True
    (row,) = await store.schedules()
    assert (row.cron, row.every, row.next_tick) == ("*/5 * * * *", None, T0 + 300)
    other, _ = counting("other")
    assert await engine.schedule("n", other, cron="*/5 * * * *", input=2) is True
    assert [r.definition for r in await store.schedules()] == ["other"]


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({}, ValueError, "exactly one of cron= and every="),
        ({"cron": "* * * * *", "every": 5}, ValueError, "exactly one"),
        ({"cron": "61 * * * *"}, ValueError, "'61 * * * *'"),
        ({"cron": "* * * * * *"}, ValueError, "6 fields"),
        ({"cron": "0 0 31 2 *"}, ValueError, "'0 0 31 2 *'"),
        ({"cron": 5}, TypeError, "5"),
        ({"every": 0}, ValueError, "got 0"),
        ({"every": -1.5}, ValueError, "got -1.5"),
        ({"every": float("inf")}, ValueError, "inf"),
        ({"every": "60"}, TypeError, "'60'"),
        ({"every": True}, TypeError, "True"),
        ({"every": 1, "input": {1, 2}}, PayloadError, "input"),
    ],
)
async def test_bad_input_is_refused_before_anything_is_stored(
    engine: WorkflowEngine, store: DurableStore, kwargs: dict[str, Any], error: type, named: str
) -> None:
    report, _ = counting()
    with pytest.raises(error, match=named.replace("*", r"\*").replace("(", r"\(")):
        await engine.schedule("n", report, **kwargs)
    assert await store.schedules() == []


async def test_bad_names_and_definitions_are_refused(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    report, _ = counting()
    with pytest.raises(UnknownWorkflowError, match="'nope'"):
        await engine.schedule("n", "nope", every=1)
    with pytest.raises(TypeError, match="42"):
        await engine.schedule("n", 42, every=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError):
        await engine.schedule("", report, every=1)
    assert await store.schedules() == []
    assert "report" not in engine.definitions  # nothing registered either


async def racing_fires(stores: list[DurableStore], clock: FakeClock) -> None:
    """Every store fires the same tick at once: exactly one instance, one winner."""
    report, _ = counting()
    first = stores[0]
    row, _ = await first.put_schedule(
        "n", "report", cron=None, every=60.0, input=None, next_tick=T0 + 60, now=T0
    )
    for round_ in range(5):
        tick = T0 + 60 * (round_ + 1)
        (row,) = await first.schedules()
        results = await asyncio.gather(
            *(
                s.fire_schedule(
                    row, tick=tick, next_tick=tick + 60, step_names=report.step_names,
                    now=tick,
                )
                for s in stores for _ in range(3)
            )
        )
        assert [r for r in results if r is not None] == [instance_id("n", tick)]
    assert len(await instances(first, "n")) == 5
    # A stale row (the tick already fired) fires nothing and writes nothing.
    before = await first.last_seq()
    assert await first.fire_schedule(
        row, tick=row.next_tick, next_tick=row.next_tick + 60, step_names=["go"], now=T0
    ) is None
    assert await first.last_seq() == before


async def test_two_sqlite_stores_on_one_file_fire_a_tick_once(
    tmp_path: Path, clock: FakeClock
) -> None:
    async with SqliteStore(tmp_path / "s.db") as a, SqliteStore(tmp_path / "s.db") as b:
        await racing_fires([a, b], clock)


async def test_two_postgres_stores_fire_a_tick_once(
    request: pytest.FixtureRequest, clock: FakeClock
) -> None:
    a = await open_postgres(request)
    b = await open_postgres(request)
    try:
        await racing_fires([a, b], clock)
    finally:
        await a.close()
        await b.close()


async def two_serving_engines(stores: list[DurableStore], clock: FakeClock) -> None:
    """Two engines serve one store on one clock: every tick has one instance, run once."""
    report, runs = counting()
    lanes = {Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}
    async with Queue(lanes, clock=clock) as qa, Queue(lanes, clock=clock) as qb:
        engines = [
            WorkflowEngine(q, s, worker_id=f"w{i}", clock=clock)
            for i, (q, s) in enumerate(zip((qa, qb), stores, strict=True))
        ]
        for e in engines:
            e.register(report)
        await engines[0].schedule("n", "report", every=60)
        async with serving(engines[0]), serving(engines[1]):
            for k in range(1, 6):
                await clock.advance(60)
                await until(lambda k=k: ended(stores[0], k), f"tick {k}")
        for e in engines:
            await e.close()
    ids = await instances(stores[0], "n")
    assert ids == [f"n@{iso(T0 + 60 * k)}" for k in range(1, 6)]
    assert runs == dict.fromkeys(ids, 1)


async def test_two_serving_engines_on_one_sqlite_file(tmp_path: Path, clock: FakeClock) -> None:
    async with SqliteStore(tmp_path / "s.db") as a, SqliteStore(tmp_path / "s.db") as b:
        await two_serving_engines([a, b], clock)


async def test_two_serving_engines_on_postgres(
    request: pytest.FixtureRequest, clock: FakeClock
) -> None:
    a = await open_postgres(request)
    b = await open_postgres(request)
    try:
        await two_serving_engines([a, b], clock)
    finally:
        await a.close()
        await b.close()


async def test_schedule_rows_read_back_the_same_everywhere(store: DurableStore) -> None:
    row, changed = await store.put_schedule(
        "ü/n", "d", cron="0 9 * * *", every=None, input={"a": [1]}, next_tick=5.0, now=1.0
    )
    assert changed and await store.schedules() == [row]
    assert row == ScheduleRow("ü/n", "d", "0 9 * * *", None, {"a": [1]}, 5.0, 1.0)
    assert await store.delete_schedule("ü/n") is True
    assert await store.delete_schedule("ü/n") is False
    with pytest.raises(ValueError, match="exactly one of cron and every"):
        await store.put_schedule("n", "d", cron=None, every=None, input=1, next_tick=1, now=1)


async def test_a_schedule_that_cannot_fire_here_does_not_stop_the_others(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    report, runs = counting()
    engine.register(report)
    # Written by some other program: the store does not parse cron expressions.
    await store.put_schedule("bad", "report", cron="not a cron", every=None, input=None,
                             next_tick=T0 + 10, now=T0)
    await engine.schedule("good", report, every=60)
    async with serving(engine):
        await clock.advance(60)
        await until(lambda: ended(store, 1, "good"), "the good schedule's tick")
    assert await instances(store, "bad") == [] and sum(runs.values()) == 1
    said = [r.getMessage() for r in caplog.records if "'bad'" in r.getMessage()]
    assert len(said) == 1 and "not fired here: bad cron expression 'not a cron'" in said[0]


async def test_a_name_too_long_for_its_instance_ids_is_refused(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    report, _ = counting()
    with pytest.raises(InvalidKeyError, match="instances' ids"):
        await engine.schedule("x" * 1000, report, every=60)
    assert await store.schedules() == []
