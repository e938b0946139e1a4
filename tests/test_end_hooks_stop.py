"""End-of-run hooks when their engine stops, and what their warnings say: ``serve(stop=)`` and
``close`` hand back the claims they did not deliver (the interrupted hook's row and those
waiting for their turn, a claim whose answer comes after the close), due again at once for
another engine, on a clock that stands still; a delivery recording its outcome when the
close comes ends the batch there; a lost claim says why (delivered by another engine); a
hook's error is logged as stored (cut, control characters escaped)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import StoreError
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import MAX_HOOK_ERROR_CHARS, DurableStore, HookRow
from agentq.workflows import RunResult, StepContext, StepDef, WorkflowDef, WorkflowEngine

pytestmark = pytest.mark.timeout(60)
ALL_STORES = pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True)


@pytest.fixture
async def queue(clock: FakeClock) -> AsyncIterator[Queue]:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}, clock=clock) as q:
        yield q


def engine_on(queue: Queue, store: DurableStore, clock: FakeClock, worker: str) -> WorkflowEngine:
    return WorkflowEngine(queue, store, worker_id=worker, lease_ttl=30.0, clock=clock)


def ok(ctx: StepContext) -> str:
    return "done"


async def asks(ctx: StepContext) -> Any:
    return await ctx.wait_for_input("approve", "ok?")


class Calls:
    """A hook that records its calls; it blocks (until `release`) while `blocking`."""

    def __init__(self, blocking: bool = False) -> None:
        self.ids: list[str] = []
        self.blocking = blocking
        self.called, self.release = asyncio.Event(), asyncio.Event()

    async def __call__(self, result: RunResult) -> None:
        self.ids.append(result.workflow_id)
        self.called.set()
        if self.blocking:
            await self.release.wait()

    async def reached(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.ids) < count:
                self.called.clear()
                await self.called.wait()


async def rows_of(store: DurableStore, ids: list[str]) -> list[HookRow]:
    return [row for wid in ids for row in await store.hooks(wid)]


async def serve_until(engine: WorkflowEngine, hook: Calls, count: int) -> None:
    """Serve until `hook` was called `count` times in all, then stop serving."""
    stop = asyncio.Event()
    serving = asyncio.ensure_future(engine.serve(poll_interval=1.0, stop=stop))
    try:
        await hook.reached(count)
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await serving


async def three_ends(queue: Queue, store: DurableStore, clock: FakeClock) -> None:
    """Workflow "w", cancelled three times (retried in between), with no hook: three rows."""
    steps = [StepDef("s", asks)]
    async with engine_on(queue, store, clock, "starter") as starter:
        starter.register(WorkflowDef("job", steps))
        await starter.start("job", "w")
        for n in range(3):
            assert await starter.cancel("w", f"stop {n}")
            if n < 2:
                await starter.retry("w")


@ALL_STORES
async def test_serve_stopped_mid_batch_hands_back_every_row_it_did_not_deliver(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    ids = [f"j{i}" for i in range(20)]
    async with engine_on(queue, store, clock, "starter") as starter:  # no hook: 20 pending
        starter.register(WorkflowDef("job", [StepDef("s", ok)]))
        for wid in ids:
            await starter.run(WorkflowDef("job", [StepDef("s", ok)]).workflow(wid))
    stuck = Calls(blocking=True)
    stopped = engine_on(queue, store, clock, "stopped")
    stopped.register(WorkflowDef("job", [StepDef("s", ok)], on_end=stuck))
    await serve_until(stopped, stuck, 1)  # stop while the first hook of a batch of 16 runs
    assert stuck.ids == ["j0"]
    rows = await rows_of(store, ids)
    assert [r.attempts for r in rows] == [1] * 16 + [0] * 4  # a batch of 16 was claimed
    assert all(r.lease_expires_at is None and not r.delivered for r in rows)  # handed back
    assert all(r.due_at <= clock.time() for r in rows)
    hook = Calls()
    async with engine_on(queue, store, clock, "next") as nxt:
        nxt.register(WorkflowDef("job", [StepDef("s", ok)], on_end=hook))
        await serve_until(nxt, hook, 20)  # the clock stands still: no claim had to expire
    assert sorted(hook.ids) == sorted(ids)
    assert all(r.delivered for r in await rows_of(store, ids))


async def test_a_close_while_a_delivery_records_its_outcome_ends_the_batch_there(
    queue: Queue, store: DurableStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close lets the delivery whose hooks returned record it, then hands back the
    rest of the batch instead of calling their hooks."""
    await three_ends(queue, store, clock)
    recording, gate = asyncio.Event(), asyncio.Event()
    finish = store.finish_hook

    async def slow_finish(seq: int, now: float) -> bool:
        recording.set()
        await gate.wait()
        return await finish(seq, now)

    monkeypatch.setattr(store, "finish_hook", slow_finish)
    hook = Calls()
    engine = engine_on(queue, store, clock, "closing")
    engine.register(WorkflowDef("job", [StepDef("s", asks)], on_end=hook))
    await engine.run("w")  # ended: delivers its three ends in one batch
    async with asyncio.timeout(10):
        await recording.wait()
    closing = asyncio.ensure_future(engine.close())
    await asyncio.sleep(0)  # the close has begun: it stops the deliveries
    gate.set()
    async with asyncio.timeout(10):
        await closing
    assert hook.ids == ["w"]
    rows = await store.hooks("w")
    assert [(r.delivered, r.lease_expires_at, r.attempts) for r in rows] == [
        (True, None, 1), (False, None, 1), (False, None, 1)]


async def test_a_claim_answered_after_the_close_began_is_handed_back(
    queue: Queue, store: DurableStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await three_ends(queue, store, clock)
    claimed, gate = asyncio.Event(), asyncio.Event()
    claim = store.claim_hooks

    async def slow_claim(*args: Any, **kwargs: Any) -> list[HookRow]:
        rows = await claim(*args, **kwargs)  # committed; its answer comes late
        claimed.set()
        await gate.wait()
        return rows

    monkeypatch.setattr(store, "claim_hooks", slow_claim)
    hook = Calls()
    engine = engine_on(queue, store, clock, "closing")
    engine.register(WorkflowDef("job", [StepDef("s", asks)], on_end=hook))
    await engine.run("w")
    async with asyncio.timeout(10):
        await claimed.wait()
    closing = asyncio.ensure_future(engine.close())
    await asyncio.sleep(0)  # the close has cancelled the delivery waiting for its claim
    gate.set()
    async with asyncio.timeout(10):
        await closing
    assert hook.ids == []
    rows = await store.hooks("w")
    assert [(r.worker_id, r.lease_expires_at) for r in rows] == [("closing", None)] * 3


class Said(logging.Handler):
    """Sets `seen` once a WARNING containing `text` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.WARNING)
        self.text, self.seen = text, asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


async def test_a_claim_lost_to_another_engines_delivery_says_so(
    queue: Queue,
    store: DurableStore,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    slow, fast = Calls(blocking=True), Calls()

    async def down(*args: Any, **kwargs: Any) -> bool:
        raise StoreError("the store is down")

    said = Said("on_end: workflow 'j'")
    logging.getLogger("agentq").addHandler(said)
    try:
        async with engine_on(queue, store, clock, "first") as first:
            first.register(WorkflowDef("job", [StepDef("s", ok)], on_end=slow))
            await first.run(WorkflowDef("job", [StepDef("s", ok)]).workflow("j"))
            await slow.reached(1)
            monkeypatch.setattr(store, "renew_hook", down)
            await clock.advance(30.0)  # its renewals refused: the claim expires
            async with engine_on(queue, store, clock, "second") as second:
                second.register(WorkflowDef("job", [StepDef("s", ok)], on_end=fast))
                await second.run("j")  # claimed again, delivered
            monkeypatch.undo()
            await clock.advance(10.0)  # the first engine's next renewal: refused
            async with asyncio.timeout(10):
                await said.seen.wait()
            slow.release.set()
    finally:
        logging.getLogger("agentq").removeHandler(said)
    assert fast.ids == ["j"]
    assert "marked delivered by engine 'second'" in caplog.text
    assert "its hooks ran more than once" in caplog.text


async def test_a_raising_hooks_error_is_logged_as_stored_cut_and_escaped(
    queue: Queue, store: DurableStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def bad(result: RunResult) -> None:
        raise ValueError("[red]x[/red] \x1b[31mANSI\x1b[0m \u202eRTL\u202c " + "y" * 5000)

    async with engine_on(queue, store, clock, "w1") as engine:
        engine.register(WorkflowDef("job", [StepDef("s", ok)], on_end=bad))
        await engine.run(WorkflowDef("job", [StepDef("s", ok)]).workflow("j"))
    [row] = await store.hooks("j")
    assert row.error is not None and len(row.error) == MAX_HOOK_ERROR_CHARS
    [line] = [r.getMessage() for r in caplog.records if "a hook of workflow" in r.message]
    assert "\x1b" not in line and "\u202e" not in line
    assert line.endswith(
        "ValueError: [red]x[/red] \\x1b[31mANSI\\x1b[0m \\u202eRTL\\u202c "
        + "y" * (MAX_HOOK_ERROR_CHARS - len("ValueError: [red]x[/red] \x1b[31mANSI\x1b[0m "
                                           "\u202eRTL\u202c "))
    )
