"""End-of-run hooks (issue 24): ``WorkflowDef(on_end=)`` and ``engine.on_end``, delivered at
least once from the outbox row the end writes, on a fake clock: once per end in every end
state, retried after the engine's hook backoff, handed back by an engine closed while its
hook runs, left for an engine that knows the definition, (with two serving engines on one
store, the clock still) delivered once, and kept claimed by an engine whose hook runs longer
than lease_ttl (delivered again by another engine once its renewals fail and the claim
expires).
`test_end_hooks_processes.py` kills a process between the end and its hook."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentq import Backoff
from agentq.clock import FakeClock
from agentq.errors import StoreError
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import DurableStore
from agentq.workflows import (
    RunResult,
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowDef,
    WorkflowEngine,
)

pytestmark = pytest.mark.timeout(60)

LANES = {Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}


class Hook:
    """A hook that records what it is called with (and raises `fail` times first)."""

    def __init__(self, name: str = "hook", fail: int = 0, log: list[str] | None = None) -> None:
        self.name, self.fail = name, fail
        self.results: list[RunResult] = []
        self.log = log if log is not None else []
        self.changed = asyncio.Event()

    async def __call__(self, result: RunResult) -> None:
        self.log.append(f"{self.name}:{result.workflow_id}")
        self.changed.set()
        if self.fail:
            self.fail -= 1
            raise RuntimeError(f"{self.name} is down")
        self.results.append(result)

    async def called(self, count: int) -> None:
        """Wait (bounded) until the hook returned `count` times in all."""
        async with asyncio.timeout(10):
            while len(self.results) < count:
                self.changed.clear()
                await self.changed.wait()

    def by_id(self) -> Counter[str]:
        return Counter(r.workflow_id for r in self.results)


class Slow:
    """A hook that records the ids it is called for and blocks until `release` is set."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.started, self.release = asyncio.Event(), asyncio.Event()

    async def __call__(self, result: RunResult) -> None:
        self.calls.append(result.workflow_id)
        self.started.set()
        await self.release.wait()


async def delivering(engine: WorkflowEngine, slow: Slow) -> None:
    """Run workflow "j" of definition "job" (hook `slow`) on `engine`; return once its hook
    has started."""
    job = WorkflowDef("job", [StepDef("s", ok)], on_end=slow)
    engine.register(job)
    await engine.run(job.workflow("j"))
    async with asyncio.timeout(10):
        await slow.started.wait()


async def settled(store: DurableStore, workflow_id: str, attempts: int) -> None:
    """Wait (bounded, yielding to the loop and SQLite's thread) until the workflow's outbox
    row has had `attempts` deliveries, the last one over (no claim held)."""
    async with asyncio.timeout(10):
        while True:
            [row] = await store.hooks(workflow_id)
            if row.attempts >= attempts and row.lease_expires_at is None:
                return
            await asyncio.sleep(0)


async def lease_until(store: DurableStore, workflow_id: str, until: float) -> None:
    """Wait (bounded, yielding to the loop and the stores' threads) until the workflow's
    outbox row is claimed until `until` (a renewal was written)."""
    async with asyncio.timeout(10):
        while True:
            [row] = await store.hooks(workflow_id)
            if row.lease_expires_at == until:
                return
            await asyncio.sleep(0)


@pytest.fixture
async def queue(clock: FakeClock) -> AsyncIterator[Queue]:
    async with Queue(LANES, clock=clock) as q:
        yield q


def engine_on(
    queue: Queue, store: DurableStore, clock: FakeClock, worker: str = "w1", **kw: Any
) -> WorkflowEngine:
    return WorkflowEngine(queue, store, worker_id=worker, lease_ttl=30.0, clock=clock, **kw)


def ok(ctx: StepContext) -> str:
    return "done"


def boom(ctx: StepContext) -> str:
    raise ValueError("boom")


async def asks(ctx: StepContext) -> Any:
    return await ctx.wait_for_input("approve", "ok?")


async def test_the_hook_is_called_once_per_end_in_every_end_state(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    hook = Hook()
    done = WorkflowDef("done", [StepDef("s", ok)], on_end=hook)
    failing = WorkflowDef("failing", [StepDef("s", boom)], on_end=hook)
    waiting = WorkflowDef("waiting", [StepDef("s", asks)], on_end=hook)
    slow = WorkflowDef("slow", [StepDef("s", asks)], timeout=60.0, on_end=hook)
    async with engine_on(queue, store, clock) as engine:
        for definition in (done, failing, waiting, slow):
            engine.register(definition)
        assert (await engine.run(done.workflow("c"))).status is RunStatus.COMPLETED
        assert (await engine.run(failing.workflow("f"))).status is RunStatus.FAILED
        assert (await engine.run(waiting.workflow("x"))).status is RunStatus.WAITING
        assert (await engine.run(slow.workflow("t"))).status is RunStatus.WAITING
        assert await engine.cancel("x", "no longer needed")
        await clock.advance(61)  # the live timer fails "t" at its deadline
        await hook.called(4)
        assert (await engine.run("c")).status is RunStatus.COMPLETED  # ended: nothing new
    statuses = {r.workflow_id: (r.status, r.reason) for r in hook.results}
    assert statuses["c"] == (RunStatus.COMPLETED, None)
    assert statuses["f"][0] is RunStatus.FAILED and "boom" in str(statuses["f"][1])
    assert statuses["x"] == (RunStatus.CANCELLED, "no longer needed")
    assert statuses["t"][0] is RunStatus.FAILED and "WorkflowTimedOut" in str(statuses["t"][1])
    assert hook.by_id() == {"c": 1, "f": 1, "x": 1, "t": 1}
    assert hook.results[0].outputs == ("done",)
    for wid in "cfxt":
        [row] = await store.hooks(wid)
        assert row.delivered and row.attempts == 1 and row.error is None


async def test_a_hook_that_raises_is_retried_after_the_backoff_until_it_returns(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    hook = Hook(fail=2)
    flaky = WorkflowDef("flaky", [StepDef("s", ok)], on_end=hook)
    backoff = Backoff.exponential(5.0, 60.0)  # 5 s, then 10 s
    async with engine_on(queue, store, clock, hook_backoff=backoff) as engine:
        engine.register(flaky)
        start = clock.time()
        await engine.run(flaky.workflow("wf"))
        await settled(store, "wf", 1)
        [row] = await store.hooks("wf")
        assert (row.attempts, row.due_at, row.error) == (1, start + 5, "RuntimeError: hook is down")
        await clock.advance(4.9)
        assert len(hook.log) == 1  # not before its time
        await clock.advance(0.1)
        await settled(store, "wf", 2)
        [row] = await store.hooks("wf")
        assert (row.attempts, row.due_at) == (2, start + 15)
        await clock.advance(10)
        await hook.called(1)
    [row] = await store.hooks("wf")
    assert (row.attempts, row.error, row.delivered_at) == (3, None, start + 15)
    assert hook.log == ["hook:wf"] * 3 and hook.by_id() == {"wf": 1}


async def test_a_hook_interrupted_by_close_is_handed_back_and_delivered_again_at_once(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    """The engine delivering a hook closes while the hook runs: the hook is interrupted and
    its claim handed back, so another engine delivers the end at once (no wait for
    lease_ttl; the hook is called again: at least once). A crash keeps the claim until it
    expires (`test_end_hooks_processes.py`, and the renewals test below)."""
    started, never = asyncio.Event(), asyncio.Event()

    async def stuck(result: RunResult) -> None:
        started.set()
        await never.wait()

    hook = Hook()
    job = WorkflowDef("job", [StepDef("s", ok)], on_end=stuck)
    first = engine_on(queue, store, clock, "first")
    first.register(job)
    await first.run(job.workflow("j"))
    async with asyncio.timeout(10):
        await started.wait()
    await first.close()  # the hook is interrupted; the row is handed back
    [row] = await store.hooks("j")
    assert (row.worker_id, row.delivered, row.lease_expires_at, row.attempts) == (
        "first", False, None, 1)
    assert row.due_at <= clock.time()
    again = WorkflowDef("job", [StepDef("s", ok)], on_end=hook)
    async with engine_on(queue, store, clock, "second") as second:
        second.register(again)
        await second.run("j")  # the clock stands still: due at once
    assert len(hook.results) == 1
    [row] = await store.hooks("j")
    assert row.delivered and (row.worker_id, row.attempts) == ("second", 2)


async def test_a_hook_waits_for_an_engine_that_registered_its_definition(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    hook, theirs = Hook("def"), Hook("engine-wide")
    order = WorkflowDef("order", [StepDef("s", asks)], on_end=hook)
    async with engine_on(queue, store, clock, "starter") as starter:
        await starter.start(order, "o1")
    async with engine_on(queue, store, clock, "other") as other:  # does not know "order"
        other.on_end(theirs)
        assert await other.cancel("o1", "stop")  # leaving the block settles its delivery
    assert theirs.results == [] and hook.results == []
    [row] = await store.hooks("o1")
    assert not row.delivered and row.attempts == 0  # nobody claimed it
    async with engine_on(queue, store, clock, "knows") as knows:
        knows.register(order)
        assert (await knows.run("o1")).status is RunStatus.CANCELLED  # delivers it
    assert [r.status for r in hook.results] == [RunStatus.CANCELLED]
    assert (await store.hooks("o1"))[0].delivered


async def test_engine_hooks_are_called_for_every_definition_and_plain_workflow(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    log: list[str] = []
    own, everyone = Hook("own", log=log), Hook("all", log=log)
    seen: list[str] = []
    a = WorkflowDef("a", [StepDef("s", ok)], on_end=own)
    b = WorkflowDef("b", [StepDef("s", ok)])
    async with engine_on(queue, store, clock) as engine:
        engine.register(a)
        engine.register(b)
        engine.on_end(everyone)
        engine.on_end(lambda result: seen.append(result.workflow_id))  # a sync hook
        await engine.run(a.workflow("a1"))
        await engine.run(b.workflow("b1"))
        await engine.run(Workflow("p1", [StepDef("s", ok)]))
    assert log.index("own:a1") < log.index("all:a1")  # the definition's hook first
    assert own.by_id() == {"a1": 1}
    assert everyone.by_id() == {"a1": 1, "b1": 1, "p1": 1}
    assert sorted(seen) == ["a1", "b1", "p1"]


async def test_without_hooks_nothing_is_delivered_and_the_rows_wait(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    plain = WorkflowDef("plain", [StepDef("s", ok)])
    async with engine_on(queue, store, clock) as engine:
        engine.register(plain)
        await engine.run(plain.workflow("p"))
    [row] = await store.hooks("p")
    assert not row.delivered and row.attempts == 0  # for an engine with hooks, later
    late = Hook()
    async with engine_on(queue, store, clock) as engine:
        engine.register(plain)
        engine.on_end(late)
        await engine.run("p")
    assert late.by_id() == {"p": 1}


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True)
async def test_two_serving_engines_deliver_each_hook_once(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    """No time passes (no autojump: under load it jumped past lease_ttl while a delivery
    waited on PostgreSQL, before any renewal was written: an at-least-once repeat), so no
    claim can expire: a second call of a hook here is two engines delivering one end."""
    hook = Hook()
    job = WorkflowDef("job", [StepDef("s", ok)], on_end=hook)
    engines = [engine_on(queue, store, clock, f"w{i}") for i in range(2)]
    for engine in engines:
        engine.register(job)
    for i in range(12):
        await engines[0].start(job, f"j{i}")
    start = clock.time()
    servers = [asyncio.ensure_future(e.serve(poll_interval=1.0)) for e in engines]
    try:  # the clock stands still: no claim can expire, so a second call is a real double
        await hook.called(12)
    finally:
        for server in servers:
            server.cancel()
        await asyncio.gather(*servers, return_exceptions=True)
        for engine in engines:
            await engine.close()
    assert clock.time() == start
    assert hook.by_id() == {f"j{i}": 1 for i in range(12)}
    rows = [(await store.hooks(f"j{i}"))[0] for i in range(12)]
    assert all(r.delivered and r.attempts == 1 for r in rows)
    assert {r.worker_id for r in rows} == {"w0", "w1"}  # both engines delivered: they raced


async def test_a_claim_is_renewed_while_the_hooks_run_past_lease_ttl(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    """A live engine keeps its claim while its hook runs longer than lease_ttl (renewed every
    lease_ttl / 3): another engine does not take the end, the hook is called once."""
    slow, hook = Slow(), Hook()
    again = WorkflowDef("job", [StepDef("s", ok)], on_end=hook)
    async with engine_on(queue, store, clock, "first") as first:
        await delivering(first, slow)
        claimed = clock.time()
        for n in (1, 2, 3):  # renewed at +10, +20, +30: each time until 30 s later
            await clock.advance(10.0)
            await lease_until(store, "j", claimed + 10.0 * n + 30.0)
        await clock.advance(5.0)  # 35 s after the claim, past the first lease
        async with engine_on(queue, store, clock, "second") as second:
            second.register(again)
            await second.run("j")  # held by "first": nothing
        assert hook.results == [] and slow.calls == ["j"]
        slow.release.set()  # the block settles the delivery
    [row] = await store.hooks("j")
    assert row.delivered and (row.worker_id, row.attempts) == ("first", 1)
    assert slow.calls == ["j"] and hook.results == []


async def test_the_rows_of_a_claim_waiting_for_their_turn_keep_their_claim(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    """One claim takes both ends; while the first's hook runs past lease_ttl, the second
    row waits for its turn still claimed (renewed), so no other engine delivers it."""
    slow = Slow()
    plain = WorkflowDef("job", [StepDef("s", ok)])
    async with engine_on(queue, store, clock, "ender") as ender:  # no hooks: rows wait
        ender.register(plain)
        for wid in ("j1", "j2"):
            await ender.run(plain.workflow(wid))
    hook = Hook()
    async with engine_on(queue, store, clock, "first") as first:
        first.register(WorkflowDef("job", [StepDef("s", ok)], on_end=slow))
        server = asyncio.ensure_future(first.serve(poll_interval=1000.0))
        try:
            await lease_until(store, "j2", clock.time() + 30.0)  # claimed with j1
            claimed = clock.time()
            for n in (1, 2, 3):
                await clock.advance(10.0)
                await lease_until(store, "j2", claimed + 10.0 * n + 30.0)
            await clock.advance(5.0)
            async with engine_on(queue, store, clock, "second") as second:
                second.register(WorkflowDef("job", [StepDef("s", ok)], on_end=hook))
                await second.run("j2")  # held by "first": nothing
            assert hook.results == [] and slow.calls == ["j1"]
            slow.release.set()
            await settled(store, "j2", 1)
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
    assert slow.calls == ["j1", "j2"] and hook.results == []
    rows = [(await store.hooks(w))[0] for w in ("j1", "j2")]
    assert all(r.delivered and (r.worker_id, r.attempts) == ("first", 1) for r in rows)


async def test_a_claim_whose_renewals_fail_expires_and_another_engine_delivers(
    queue: Queue,
    store: DurableStore,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At least once: the store refuses the first engine's renewals (said each time), its
    claim expires while its hook runs, a second engine delivers the end too; the first
    engine's late mark is a no-op."""
    async def down(*args: Any, **kwargs: Any) -> bool:
        raise StoreError("the store is down")

    slow, hook = Slow(), Hook()
    again = WorkflowDef("job", [StepDef("s", ok)], on_end=hook)
    async with engine_on(queue, store, clock, "first") as first:
        await delivering(first, slow)
        monkeypatch.setattr(store, "renew_hook", down)
        await clock.advance(30.0)  # renewals at +10, +20, +30 all refused
        async with engine_on(queue, store, clock, "second") as second:
            second.register(again)
            await second.run("j")  # expired: claimed again, delivered
        monkeypatch.undo()
        assert hook.by_id() == {"j": 1} and slow.calls == ["j"]
        [row] = await store.hooks("j")
        assert row.delivered and (row.worker_id, row.attempts) == ("second", 2)
        slow.release.set()  # the first delivery ends (the block settles it): its mark is a no-op
    assert slow.calls == ["j"] and await store.hooks("j") == [row]
    assert "renewing the claim of workflow 'j'" in caplog.text
    assert "the store is down" in caplog.text


def test_bad_hooks_are_refused(queue: Queue, store: DurableStore, clock: FakeClock) -> None:
    with pytest.raises(TypeError, match="on_end"):
        WorkflowDef("d", [StepDef("s", ok)], on_end=3)  # type: ignore[arg-type]
    engine = engine_on(queue, store, clock)
    with pytest.raises(TypeError, match="callable"):
        engine.on_end("not a function")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Backoff"):
        engine_on(queue, store, clock, hook_backoff=5)


async def test_a_retried_delivery_of_an_old_end_reports_that_end_not_the_latest(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    """Failed (its hook down), then retried to completion: the failed end's later delivery
    says failed, from its outbox row, not the completed state the workflow has now."""
    from agentq.errors import NonRetryable

    tries: list[int] = []

    def once_bad(ctx: StepContext) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise NonRetryable("first time")
        return "ok"

    hook = Hook(fail=1)
    job = WorkflowDef("job", [StepDef("s", once_bad)], on_end=hook)
    async with engine_on(queue, store, clock, hook_backoff=Backoff.fixed(5.0)) as engine:
        engine.register(job)
        await engine.run(job.workflow("w"))
        await settled(store, "w", 1)
        await engine.retry("w")
        await engine.run("w")
        await hook.called(1)  # the completed end
        await clock.advance(5)
        await hook.called(2)  # the failed end, retried
    assert sorted(str(r.status) for r in hook.results) == ["completed", "failed"]
