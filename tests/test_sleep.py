"""Durable sleep: `ctx.sleep` / `ctx.sleep_until` (issue 24), on a fake clock.

A sleep is a keyed wait whose deadline is the wake time: the step waits with no lease, and
the engine's timer (while it lives), `run`, `recover` or `serve` wakes it at the stored time.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.events import utc
from agentq.queue import Job, LaneConfig, Priority, Queue
from agentq.store import DurableStore, SqliteStore, StepState, WorkflowState
from agentq.workflows import (
    RunStatus,
    StepContext,
    StepDef,
    StepStatus,
    Workflow,
    WorkflowDef,
    WorkflowEngine,
    recover,
)

pytestmark = pytest.mark.timeout(60)

LANES = {Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}
HOUR = 3600.0


@pytest.fixture
async def engine(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    async with Queue(LANES, clock=clock) as q:
        eng = WorkflowEngine(q, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()


async def kinds(store: DurableStore, workflow_id: str) -> list[str]:
    return [str(e.kind) for e in await store.load_events(workflow_id)]


async def ended(store: DurableStore, workflow_id: str) -> None:
    """Wait (bounded, yielding to the loop and SQLite's thread) until the workflow ended."""
    async with asyncio.timeout(20):
        while True:
            row = await store.get_workflow(workflow_id)
            if row is not None and row.state.closed:
                return
            await asyncio.sleep(0)


class Sleeper:
    """A step that makes one durable call, sleeps an hour, then returns what it saw."""

    def __init__(self) -> None:
        self.runs = 0
        self.calls: Counter[str] = Counter()

    def tool(self, name: str) -> str:
        self.calls[name] += 1
        return name

    async def body(self, ctx: StepContext) -> list[Any]:
        self.runs += 1
        before = await ctx.call(Job("before", functools.partial(self.tool, "before")))
        await ctx.sleep(HOUR)
        after = await ctx.call(Job("after", functools.partial(self.tool, "after")))
        return [before, after]


async def test_an_hours_sleep_waits_without_a_lease_and_wakes_on_the_engine_timer(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    sleeper = Sleeper()
    start = clock.time()
    wf = Workflow("wf-sleep", [StepDef("s", sleeper.body)])
    first = await engine.run(wf)
    wake = utc(start + HOUR).isoformat(timespec="milliseconds")
    assert first.status is RunStatus.WAITING
    assert first.reason == f"sleeping until {wake}"
    status = (await engine.status("wf-sleep"))[0]
    assert isinstance(status, StepStatus.Waiting)
    assert status.key == "sleep:0" and status.deadline == pytest.approx(start + HOUR)
    row = (await engine.store.step_rows("wf-sleep"))[0]
    assert row.state is StepState.WAITING and row.lease_expires_at is None
    await clock.advance(HOUR - 1)
    assert (await engine.store.get_workflow("wf-sleep")).state is WorkflowState.WAITING  # type: ignore[union-attr]
    await clock.advance(1)
    await ended(engine.store, "wf-sleep")
    result = await engine.run("wf-sleep")
    assert result.status is RunStatus.COMPLETED and result.output == ["before", "after"]
    assert sleeper.calls == Counter({"before": 1, "after": 1})  # the call before ran once
    assert sleeper.runs == 2
    assert (await kinds(engine.store, "wf-sleep")).count("WaitTimedOut") == 1


async def test_sleep_until_an_aware_datetime_and_several_sleeps_in_order(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    start = clock.time()
    woke: list[float] = []

    async def body(ctx: StepContext) -> int:
        await ctx.sleep_until(utc(start) + timedelta(minutes=10))
        woke.append(clock.time())
        await ctx.sleep_until(start + 1200)  # Unix seconds
        woke.append(clock.time())
        await ctx.sleep(0)  # returns at once, records nothing
        await ctx.sleep_until(start)  # passed already: the same
        return len(woke)

    wf = Workflow("wf-two", [StepDef("s", body)])
    assert (await engine.run(wf)).status is RunStatus.WAITING
    await clock.advance(600)
    for _ in range(2000):  # the first sleep woke; the step parks on the second
        if getattr((await engine.status("wf-two"))[0], "key", None) == "sleep:1":
            break
        await asyncio.sleep(0)
    assert getattr((await engine.status("wf-two"))[0], "key", None) == "sleep:1"
    await clock.advance(600)
    await ended(engine.store, "wf-two")
    assert woke[-1] == pytest.approx(start + 1200)
    assert woke[0] == pytest.approx(start + 600)
    result = await engine.run("wf-two")
    assert result.output == 3  # the body's last run saw both sleeps answered from the log
    assert (await kinds(engine.store, "wf-two")).count("WaitTimedOut") == 2
    keys = [c.key for c in await engine.store.calls("wf-two")]
    assert keys == ["sleep:0", "sleep:1"]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda ctx: ctx.sleep(-1), ValueError),
        (lambda ctx: ctx.sleep(float("nan")), ValueError),
        (lambda ctx: ctx.sleep(float("inf")), ValueError),
        (lambda ctx: ctx.sleep(True), TypeError),
        (lambda ctx: ctx.sleep("60"), TypeError),
        (lambda ctx: ctx.sleep(20 * 365 * 24 * HOUR), ValueError),
        (lambda ctx: ctx.sleep_until(datetime(2030, 1, 1)), ValueError),  # naive
        (lambda ctx: ctx.sleep_until("2030-01-01"), TypeError),
    ],
)
async def test_bad_sleeps_fail_the_step_and_record_no_wait(
    engine: WorkflowEngine, call: Any, error: type[Exception]
) -> None:
    seen: list[BaseException] = []

    async def body(ctx: StepContext) -> str:
        try:
            await call(ctx)
        except Exception as exc:
            seen.append(exc)
            raise
        return "slept"

    result = await engine.run(Workflow("wf-bad", [StepDef("s", body)]))
    assert result.status is RunStatus.FAILED
    assert isinstance(seen[0], error)
    assert await engine.store.calls("wf-bad") == []


async def test_a_naive_datetime_names_itself_in_the_error(engine: WorkflowEngine) -> None:
    async def body(ctx: StepContext) -> None:
        await ctx.sleep_until(datetime(2030, 1, 1))

    result = await engine.run(Workflow("wf-naive", [StepDef("s", body)]))
    assert result.status is RunStatus.FAILED and "naive" in (result.reason or "")


async def test_an_aware_datetime_in_another_zone_is_the_same_instant(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    wake = datetime.fromtimestamp(clock.time() + 90, timezone(timedelta(hours=5)))

    async def body(ctx: StepContext) -> float:
        await ctx.sleep_until(wake)
        return clock.time()

    assert (await engine.run(Workflow("wf-zone", [StepDef("s", body)]))).status is (
        RunStatus.WAITING
    )
    status = (await engine.status("wf-zone"))[0]
    assert isinstance(status, StepStatus.Waiting)
    assert status.deadline == pytest.approx(wake.astimezone(UTC).timestamp())


async def test_a_sleep_key_used_by_a_wait_is_a_conflict(engine: WorkflowEngine) -> None:
    async def body(ctx: StepContext) -> None:
        await ctx.wait_for_input("sleep:0", "ok?")
        await ctx.sleep(10)

    wf = Workflow("wf-conflict", [StepDef("s", body)])
    assert (await engine.run(wf)).status is RunStatus.WAITING  # on the wait "sleep:0"
    # keys "sleep:<n>" are the engine's: no input answers a wait that uses one
    from agentq.errors import NotWaitingError

    with pytest.raises(NotWaitingError, match="durable sleep"):
        await engine.resume("wf-conflict", "s", "yes")
    assert (await engine.store.get_workflow("wf-conflict")).state is WorkflowState.WAITING  # type: ignore[union-attr]


async def test_a_sleep_survives_a_restart_and_wakes_once_on_recover(
    db_path: Path, clock: FakeClock
) -> None:
    sleeper = Sleeper()
    definition = WorkflowDef("nap", [StepDef("s", sleeper.body)])
    start = clock.time()
    async with Queue(LANES, clock=clock) as q, SqliteStore(db_path) as store:
        engine = WorkflowEngine(q, store, worker_id="first", clock=clock)
        await engine.start(definition, "nap-1")
        assert (await engine.run("nap-1")).status is RunStatus.WAITING
        await engine.close()  # the process is gone: its timer with it
    for at, state in (
        (start + HOUR - 1, WorkflowState.WAITING),
        (start + HOUR + 5, WorkflowState.COMPLETED),
    ):
        later = FakeClock(at)
        async with Queue(LANES, clock=later) as q, SqliteStore(db_path) as store:
            engine = WorkflowEngine(q, store, worker_id=f"at-{at}", clock=later)
            engine.register(definition)
            await (await recover(engine)).wait()
            if state is WorkflowState.COMPLETED:
                await ended(store, "nap-1")
            row = await store.get_workflow("nap-1")
            assert row is not None and row.state is state
            await engine.close()
    assert sleeper.calls == Counter({"before": 1, "after": 1})
    assert sleeper.runs == 2
    async with SqliteStore(db_path) as store:
        assert (await kinds(store, "nap-1")).count("WaitTimedOut") == 1


async def test_a_serving_engine_wakes_a_sleeping_step(
    store: DurableStore, clock: FakeClock
) -> None:
    sleeper = Sleeper()
    definition = WorkflowDef("nap", [StepDef("s", sleeper.body)])
    async with Queue(LANES, clock=clock) as q1:
        starter = WorkflowEngine(q1, store, worker_id="starter", clock=clock)
        await starter.start(definition, "nap-2")
        assert (await starter.run("nap-2")).status is RunStatus.WAITING
        await starter.close()
    async with Queue(LANES, clock=clock) as q2:
        server = WorkflowEngine(q2, store, worker_id="server", clock=clock)
        server.register(definition)
        serving = asyncio.ensure_future(server.serve(poll_interval=60.0))
        try:
            async with asyncio.timeout(20):
                await clock.wait_for_sleepers(1)
            await clock.advance(HOUR - 60)
            row = await store.get_workflow("nap-2")
            assert row is not None and row.state is WorkflowState.WAITING
            for _ in range(2):
                async with asyncio.timeout(20):
                    await clock.wait_for_sleepers(1)
                await clock.advance(60)
            await ended(store, "nap-2")
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
        assert (await server.run("nap-2")).output == ["before", "after"]
    assert sleeper.runs == 2


async def test_no_resume_wakes_a_sleep_or_answers_a_receive(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    """A sleep's wait (``sleep:<n>``) and a receive's (``receive:...``) are the engine's, not
    a person's: a resume with their key, or with no key on a sleeping step, is refused before
    and during the wait, and the approval views do not list them (review t24)."""
    from agentq.errors import NotWaitingError
    from agentq.widgets.models.bulk import pending_waits

    sleeper = Sleeper()
    wf = Workflow("wf-nap", [StepDef("s", sleeper.body)])
    assert (await engine.run(wf)).status is RunStatus.WAITING
    for key in ("sleep:0", None):
        with pytest.raises(NotWaitingError, match=r"durable sleep \(ctx.sleep\)"):
            await engine.resume("wf-nap", "s", {"x": 1}, key=key)
    with pytest.raises(NotWaitingError, match=r"a receive \(ctx.receive\)"):
        await engine.resume("wf-nap", "s", "forged", key="receive:0:t:0")  # not kept either
    assert await engine.store.messages("wf-nap") == []
    assert await pending_waits(engine.store) == []
    await clock.advance(HOUR)
    await ended(engine.store, "wf-nap")
    assert sleeper.runs == 2
