"""`engine.serve()`: ready work of registered definitions, claimed only as permits allow.

In-process engines on one store (each a process as far as registrations go), on a fake
clock; `test_serving_processes.py` runs real serving processes.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentq import (
    Backoff,
    InputTimeout,
    Recorded,
    RetryPolicy,
    RunStatus,
    StepContext,
    StepDef,
    WaitForInput,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.clock import FakeClock
from agentq.errors import EngineError, QueueClosed
from agentq.events import EventKind
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import DurableStore, StepState, WorkflowState

pytestmark = [
    pytest.mark.timeout(60),
    # PostgreSQL too: its wait_for_work (LISTEN/NOTIFY) wakes the serve loop between polls.
    pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True),
]


class Engines:
    """Engines on one store and one fake clock, each with a 2-permit lane; closed at the end."""

    def __init__(self, store: DurableStore, clock: FakeClock) -> None:
        self.store, self.clock = store, clock
        self.queues: list[Queue] = []
        self.servers: list[asyncio.Task[Any]] = []

    async def new(self, worker: str, *definitions: WorkflowDef, permits: int = 2) -> WorkflowEngine:
        lanes = {Priority.MEDIUM: LaneConfig(capacity=50, permits=permits)}
        queue = Queue(lanes, clock=self.clock)
        self.queues.append(queue)
        engine = WorkflowEngine(
            queue, self.store, worker_id=worker, lease_ttl=30.0, clock=self.clock
        )
        for definition in definitions:
            engine.register(definition)
        return engine

    def serve(self, engine: WorkflowEngine, poll_interval: float = 1.0) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(engine.serve(poll_interval=poll_interval))
        self.servers.append(task)
        return task

    async def tick(self, seconds: float = 1.0) -> None:
        """Move the clock once the serving loops sleep (a SQLite read runs on a thread)."""
        async with asyncio.timeout(20):
            await self.clock.wait_for_sleepers(1)
        await self.clock.advance(seconds)

    async def close(self) -> None:
        for task in self.servers:
            task.cancel()
        await asyncio.gather(*self.servers, return_exceptions=True)
        for queue in self.queues:
            await queue.close()


@pytest.fixture
async def engines(store: DurableStore, clock: FakeClock) -> AsyncIterator[Engines]:
    made = Engines(store, clock)
    yield made
    await made.close()


class Bodies:
    """Step bodies that count their runs (by workflow and step) and can be held at a gate."""

    def __init__(self) -> None:
        self.runs: Counter[tuple[str, str]] = Counter()
        self.by: dict[tuple[str, str], list[str]] = {}
        self.gate = asyncio.Event()
        self.gate.set()
        self.inside = 0
        self.most_inside = 0
        self.changed = asyncio.Condition()

    def step(self, name: str, worker: str = "") -> StepDef:
        async def body(ctx: StepContext) -> str:
            self.runs[(ctx.workflow_id, name)] += 1
            self.by.setdefault((ctx.workflow_id, name), []).append(worker)
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            await self.notify()
            try:
                await self.gate.wait()
            finally:
                self.inside -= 1
            return f"{name}:{ctx.input}"

        return StepDef(name, body)

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def until(self, done: Callable[[], bool]) -> None:
        async with asyncio.timeout(20), self.changed:
            await self.changed.wait_for(done)


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, check=True, text=True)
    return int(proc.stdout)


def job(bodies: Bodies, name: str = "job", worker: str = "") -> WorkflowDef:
    return WorkflowDef(name, [bodies.step("a", worker), bodies.step("b", worker)])


async def finished(
    store: DurableStore, ids: list[str], state: WorkflowState = WorkflowState.COMPLETED
) -> None:
    """Wait (bounded, yielding to the loop) until every workflow in `ids` is stored in `state`."""
    async with asyncio.timeout(20):
        while True:
            rows = [await store.get_workflow(i) for i in ids]
            if all(r is not None and r.state is state for r in rows):
                return
            await asyncio.sleep(0)


# ------------------------------------------------------------------ arguments


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), True, "1"])
async def test_a_bad_poll_interval_is_refused(engines: Engines, bad: Any) -> None:
    engine = await engines.new("w1")
    with pytest.raises(ValueError, match="poll_interval must be a positive number"):
        await engine.serve(poll_interval=bad)


async def test_serving_twice_on_one_engine_is_refused(engines: Engines) -> None:
    engine = await engines.new("w1")
    engines.serve(engine)
    await asyncio.sleep(0)
    with pytest.raises(EngineError, match="already"):
        await engine.serve()


# ------------------------------------------------------------------ what is served


async def test_serve_runs_started_instances_claiming_only_what_it_can_start(
    engines: Engines,
) -> None:
    bodies = Bodies()
    bodies.gate.clear()
    definition = job(bodies)
    engine = await engines.new("w1", definition, permits=2)
    ids = [f"j-{i}" for i in range(5)]
    for i, wid in enumerate(ids):
        assert await engine.start(definition, wid, i)
    engines.serve(engine)
    await bodies.until(lambda: bodies.inside == 2)
    rows = await engines.store.step_rows()
    assert Counter(r.state for r in rows) == {StepState.LEASED: 2, StepState.PENDING: 8}

    bodies.gate.set()
    await finished(engines.store, ids)
    assert bodies.runs == Counter({(w, s): 1 for w in ids for s in "ab"})
    assert bodies.most_inside == 2
    results = [await engine.run(w) for w in ids]
    assert [r.outputs for r in results] == [(f"a:{i}", f"b:{i}") for i in range(5)]


async def test_an_engine_never_claims_steps_of_a_definition_it_did_not_register(
    engines: Engines,
) -> None:
    bodies = Bodies()
    a, b = job(bodies, "a-def"), job(bodies, "b-def")
    starter = await engines.new("starter", a, b)
    await starter.start(a, "a-1")
    await starter.start(b, "b-1")
    await starter.start(b, "b-2")
    server = await engines.new("server-a", a)
    engines.serve(server)
    await finished(engines.store, ["a-1"])
    assert await server._server.take_up() == 0  # nothing of "a-def" is left
    events = await engines.store.load_events()
    assert {e.workflow_id for e in events if e.kind is EventKind.STEP_STARTED} == {"a-1"}
    assert [s.state for s in await engines.store.step_rows("b-1")] == [StepState.PENDING] * 2


async def test_serve_picks_up_definitions_registered_while_it_serves(engines: Engines) -> None:
    bodies = Bodies()
    definition = job(bodies)
    starter = await engines.new("starter", definition)
    await starter.start(definition, "j-1")
    server = await engines.new("server")
    engines.serve(server)
    await asyncio.sleep(0)
    server.register(job(bodies))
    await engines.tick()  # the next poll
    await finished(engines.store, ["j-1"])


async def test_serve_skips_instances_whose_registered_definition_changed_steps(
    engines: Engines, caplog: pytest.LogCaptureFixture
) -> None:
    bodies = Bodies()
    starter = await engines.new("starter", job(bodies))
    await starter.start("job", "j-1")
    changed = WorkflowDef("job", [bodies.step("a"), bodies.step("c")])
    server = await engines.new("server", changed)
    assert await server._server.take_up() == 0  # not even listed
    assert [e.kind for e in await engines.store.load_events("j-1")] == [
        EventKind.WORKFLOW_STARTED]
    # Registered again with other steps between the read and the claim: skipped, said once.
    work = await engines.store.ready_workflows(engines.clock.time(), {"job": ["a", "b"]}, 5)
    for _ in range(2):
        assert not await server._server._take(work[0])
    skipped = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert len(skipped) == 1  # said once
    assert "workflow 'j-1'" in skipped[0] and "steps ['a', 'c']" in skipped[0]
    assert [e.kind for e in await engines.store.load_events("j-1")] == [
        EventKind.WORKFLOW_STARTED]


async def test_work_a_server_cannot_run_never_hides_the_work_it_can(engines: Engines) -> None:
    """Issue 20, fault 7: 15 instances of the served name started with other steps (an old
    version) and 15 of a definition nobody serves wait before the new instance; the first
    poll (which reads 2 x 2 permits) still finds it."""
    bodies = Bodies()
    old = WorkflowDef("job", [bodies.step("a")])
    starter = await engines.new("starter", job(bodies, "gone"))
    for i in range(15):
        await starter.start(old, f"old-{i}")
        await starter.start("gone", f"gone-{i}")
    server = await engines.new("server", job(bodies), permits=2)
    await server.start("job", "new")
    assert await server._server.take_up() == 1
    await finished(engines.store, ["new"])
    assert {w for w, _ in bodies.runs} == {"new"}


# ------------------------------------------------------------------ time, leases, waits


async def test_stored_retry_times_are_honoured_by_every_serving_engine(engines: Engines) -> None:
    attempts: list[float] = []

    tried = asyncio.Event()

    def flaky(ctx: StepContext) -> str:
        attempts.append(engines.clock.time())
        tried.set()
        if ctx.attempt == 1:
            raise ValueError("not yet")
        return "ok"

    definition = WorkflowDef(
        "flaky", [StepDef("x", flaky, retry=RetryPolicy(2, Backoff.fixed(10.0)))]
    )
    first = await engines.new("first", definition)
    second = await engines.new("second", definition)
    start = engines.clock.time()
    await first.start(definition, "f-1")
    engines.serve(first)
    engines.serve(second)
    async with asyncio.timeout(20):
        await tried.wait()
    for _ in range(9):  # the second engine polls every second: nothing before retry_at
        await engines.tick()
    assert attempts == [start]
    await engines.tick()
    await finished(engines.store, ["f-1"])
    assert attempts == [start, start + 10.0]


async def test_an_expired_lease_is_taken_over_with_worker_recovered(engines: Engines) -> None:
    bodies = Bodies()
    definition = job(bodies)
    starter = await engines.new("starter", definition)
    await starter.start(definition, "j-1")
    now = engines.clock.time()
    await engines.store.claim_step("j-1", 0, "dead-worker", 5.0, now)  # never finishes
    server = await engines.new("server", definition)
    engines.serve(server)
    await engines.tick(5.0)
    assert bodies.runs == Counter()  # live at its expiry time
    await engines.tick()
    await finished(engines.store, ["j-1"])
    kinds = [e.kind for e in await engines.store.load_events("j-1")]
    assert kinds.count(EventKind.WORKER_RECOVERED) == 1
    assert bodies.runs == Counter({("j-1", "a"): 1, ("j-1", "b"): 1})


async def test_a_dead_siblings_live_lease_on_this_host_is_taken_back_at_once(
    engines: Engines, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 20, fault 8: a serving engine does what `run` and `recover` do with a lease
    whose holder is a process of this host that no longer exists: it takes it back at the
    next poll, not once the lease expires (the clock never moves here). A live holder of
    this host (this very process) and a holder on another host are left alone."""
    bodies = Bodies()
    definition = job(bodies)
    starter = await engines.new("starter", definition)
    dead = f"{socket.gethostname()}:{dead_pid()}:0123abcd"
    for wid, holder in (("dead", dead), ("alive", f"{socket.gethostname()}:{os.getpid()}:"
                        "0123abcd"), ("away", f"other-host:{dead_pid()}:0123abcd")):
        await starter.start(definition, wid)
        await engines.store.claim_step(wid, 0, holder, 300.0, engines.clock.time())
    server = await engines.new("server", definition)
    engines.serve(server)
    await finished(engines.store, ["dead"])
    recovered = [
        e for e in await engines.store.load_events() if e.kind is EventKind.WORKER_RECOVERED]
    assert [e.workflow_id for e in recovered] == ["dead"]
    assert "no longer exists" in str(recovered[0].data)
    assert any("taken back at once" in r.getMessage() for r in caplog.records)
    assert {w for w, _ in bodies.runs} == {"dead"}
    alive = (await engines.store.step_rows("alive"))[0]
    assert alive.state is StepState.LEASED


async def test_a_wait_whose_deadline_passed_continues_in_a_serving_engine(
    engines: Engines,
) -> None:
    async def ask(ctx: StepContext) -> str:
        try:
            return str(await ctx.wait_for_input("approve", "ok?", timeout=30.0))
        except InputTimeout:
            return "timed out"

    definition = WorkflowDef("ask", [StepDef("ask", ask)])
    starter = await engines.new("starter", definition)
    await starter.start(definition, "q-1")
    assert (await starter.run("q-1")).status is RunStatus.WAITING
    await starter.close()  # its own deadline timer is gone with it
    server = await engines.new("server", definition)
    engines.serve(server)
    await engines.tick(29.0)
    row = await engines.store.get_workflow("q-1")
    assert row is not None and row.state is WorkflowState.WAITING
    await engines.tick()
    await finished(engines.store, ["q-1"])
    assert (await server.run("q-1")).output == "timed out"


# ------------------------------------------------------------------ changes from elsewhere


async def test_a_resume_recorded_without_the_definition_is_run_by_the_server(
    engines: Engines,
) -> None:
    async def approve(ctx: StepContext) -> Any:
        if not ctx.resumed:
            raise WaitForInput("ok?")
        return ctx.resume_input

    definition = WorkflowDef("approval", [StepDef("approve", approve)])
    server = await engines.new("server", definition)
    await server.start(definition, "ap-1")
    engines.serve(server)
    await finished(engines.store, ["ap-1"], WorkflowState.WAITING)
    clerk = await engines.new("clerk")  # holds no definition
    assert await clerk.resume("ap-1", "approve", {"ok": 1}) == Recorded(
        "ap-1", "approval", "resumed"
    )
    await engines.tick()
    await finished(engines.store, ["ap-1"])
    assert (await server.run("ap-1")).output == {"ok": 1}


# ------------------------------------------------------------------ many engines, shutdown


async def test_two_serving_engines_run_each_step_once(engines: Engines) -> None:
    bodies = Bodies()
    bodies.gate.clear()
    one = await engines.new("one", job(bodies, worker="one"), permits=3)
    two = await engines.new("two", job(bodies, worker="two"), permits=3)
    ids = [f"j-{i}" for i in range(20)]
    for wid in ids:
        await one.start("job", wid)
    engines.serve(one)
    engines.serve(two)
    for _ in range(5):  # each takes what its permits allow (a lost claim waits a poll)
        if bodies.inside == 6:
            break
        await engines.tick()
    await bodies.until(lambda: bodies.inside == 6)
    bodies.gate.set()
    await finished(engines.store, ids)
    assert bodies.runs == Counter({(w, s): 1 for w in ids for s in "ab"})
    assert {w for ran in bodies.by.values() for w in ran} == {"one", "two"}


async def test_cancelling_serve_interrupts_its_runs_and_hands_their_leases_back(
    engines: Engines,
) -> None:
    bodies = Bodies()
    bodies.gate.clear()
    definition = job(bodies)
    first = await engines.new("first", definition)
    await first.start(definition, "j-1")
    serving = engines.serve(first)
    await bodies.until(lambda: bodies.inside == 1)
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
    [a, _] = await engines.store.step_rows("j-1")
    # handed back: pending at once, and neither an attempt nor a crash
    assert (a.state, a.attempt, a.recoveries) == (StepState.PENDING, 0, 0)
    assert first.tables()["runs"] == 0

    bodies.gate.set()
    second = await engines.new("second", definition)
    engines.serve(second)
    await engines.tick()
    await finished(engines.store, ["j-1"])
    assert bodies.runs[("j-1", "a")] == 2  # the interrupted body ran again, elsewhere


async def test_serve_ends_when_its_queue_closes_without_claiming(engines: Engines) -> None:
    bodies = Bodies()
    engine = await engines.new("w1", job(bodies))
    await engine.queue.close()
    await engine.start("job", "j-1")
    with pytest.raises(QueueClosed, match="serve"):
        await engine.serve()
    assert [e.kind for e in await engines.store.load_events("j-1")] == [
        EventKind.WORKFLOW_STARTED]



# ------------------------------------------------------------------ stopping gracefully


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"grace": -1.0}, ValueError), ({"grace": float("inf")}, ValueError),
     ({"grace": True}, ValueError), ({"stop": object()}, TypeError)],
)
async def test_bad_stop_arguments_are_refused(
    engines: Engines, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    engine = await engines.new("w1")
    with pytest.raises(error):
        await engine.serve(**kwargs)


async def test_a_stopped_server_takes_no_more_work_waits_the_grace_then_hands_back(
    engines: Engines, caplog: pytest.LogCaptureFixture
) -> None:
    bodies = Bodies()
    bodies.gate.clear()
    definition = job(bodies)
    first = await engines.new("first", definition, permits=1)
    await first.start(definition, "j-1")
    await first.start(definition, "j-2")
    stop = asyncio.Event()
    serving = asyncio.ensure_future(first.serve(stop=stop, grace=5.0))
    await bodies.until(lambda: bodies.inside == 1)
    stop.set()
    async with asyncio.timeout(20):
        while True:  # the line is logged before the grace starts
            if any("stops" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0)
    [said] = [r.getMessage() for r in caplog.records if "stops" in r.getMessage()]
    assert said == (
        "serve() stops: taking no more work; waiting up to 5 s for 1 step in progress "
        "(of 'j-1'), then interrupting what is left and handing its leases back"
    )
    await engines.tick(4.0)
    assert not serving.done()
    await engines.tick(1.0)  # the grace is over: interrupted, handed back
    async with asyncio.timeout(20):
        assert await serving is None
    rows = {w: (await engines.store.step_rows(w))[0] for w in ("j-1", "j-2")}
    assert (rows["j-1"].state, rows["j-1"].attempt, rows["j-1"].recoveries) == (
        StepState.PENDING, 0, 0)
    assert rows["j-2"].state is StepState.PENDING and bodies.runs[("j-2", "a")] == 0
    assert any("grace is over" in r.getMessage() for r in caplog.records)

    bodies.gate.set()  # another engine takes the handed-back step at once
    second = await engines.new("second", definition)
    assert await second._server.take_up() == 2
    await finished(engines.store, ["j-1", "j-2"])


async def test_a_stopped_server_lets_the_running_step_finish_but_starts_no_next_step(
    engines: Engines, caplog: pytest.LogCaptureFixture
) -> None:
    bodies = Bodies()
    bodies.gate.clear()
    definition = job(bodies)  # steps a, b
    engine = await engines.new("w1", definition)
    await engine.start(definition, "j-1")
    stop = asyncio.Event()
    serving = asyncio.ensure_future(engine.serve(stop=stop, grace=60.0))
    await bodies.until(lambda: bodies.inside == 1)
    stop.set()
    async with asyncio.timeout(20):
        while True:  # the line is logged before the grace starts
            if any("stops" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0)
    bodies.gate.set()  # step a ends within the grace: recorded; b is not claimed
    async with asyncio.timeout(20):
        assert await serving is None  # the clock never moved: the grace was not waited out
    a, b = await engines.store.step_rows("j-1")
    assert (a.state, b.state) == (StepState.COMPLETED, StepState.PENDING)
    assert bodies.runs == Counter({("j-1", "a"): 1})
    assert not any("grace is over" in r.getMessage() for r in caplog.records)

    assert (await engine.run("j-1")).status is RunStatus.COMPLETED  # reopened: runs again
    assert bodies.runs == Counter({("j-1", "a"): 1, ("j-1", "b"): 1})


async def test_a_run_that_ends_within_the_grace_ends_normally(engines: Engines) -> None:
    bodies = Bodies()
    bodies.gate.clear()
    definition = WorkflowDef("one", [bodies.step("a")])
    engine = await engines.new("w1", definition)
    await engine.start(definition, "j-1")
    stop = asyncio.Event()
    serving = asyncio.ensure_future(engine.serve(stop=stop, grace=60.0))
    await bodies.until(lambda: bodies.inside == 1)
    stop.set()
    await asyncio.sleep(0)
    bodies.gate.set()
    async with asyncio.timeout(20):
        assert await serving is None  # the clock never moved: it did not wait the grace
    await finished(engines.store, ["j-1"])
    assert bodies.runs == Counter({("j-1", "a"): 1})
