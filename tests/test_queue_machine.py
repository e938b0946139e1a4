"""A Hypothesis state machine: the queue beside a plain-dict model of its keys and one lane.

Rules push (push_nowait), complete, fail, cancel, forget and abandon (a push_and_wait cancelled
while its job waits in the lane) act on both; after every rule the loop settles and the
invariants compare every key's state, the lane's counters and the event log with the model.
The machine drives its coroutines through its own `asyncio.Runner`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentq.clock import FakeClock
from agentq.errors import QueueFull
from agentq.outcomes import Completed, Failed, FailureReason, Pending, Processing
from agentq.queue.handles import Cached, InFlight, Queued
from agentq.queue.jobs import TERMINAL_KINDS, Job, JobEvent
from agentq.queue.lanes import LaneConfig, Priority
from agentq.queue.queue import Queue

KEYS = ("a", "b", "c", "d", "e")
PERMITS, CAPACITY = 2, 2


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        lanes = {Priority.MEDIUM: LaneConfig(capacity=CAPACITY, permits=PERMITS)}
        self.queue = Queue(lanes)
        self.events: list[JobEvent] = []
        self.queue.subscribe(self.events.append)
        self.gates: dict[str, asyncio.Future[str]] = {}
        self.bodies = {key: self._body(key) for key in KEYS}
        self.runs = dict.fromkeys(KEYS, 0)
        # The model: key -> ("completed", value) | ("failed", reason); and the lane, FIFO.
        self.done: dict[str, tuple[str, object]] = {}
        self.running: list[str] = []
        self.waiting: list[str] = []
        self.completed = self.failed = 0

    def _body(self, key: str) -> Callable[[], Coroutine[Any, Any, str]]:
        async def body() -> str:
            self.runs[key] += 1
            return await self.gates[key]

        return body

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        async def with_settle() -> Any:
            result = await coro
            for _ in range(30):
                await asyncio.sleep(0)
            return result

        return self.runner.run(with_settle())

    def teardown(self) -> None:
        self.run(self.queue.close(drain=False))
        self.runner.close()

    # ------------------------------------------------------------------ rules

    @rule(key=st.sampled_from(KEYS))
    def push(self, key: str) -> None:
        async def push() -> object:
            if key not in self.gates or self.gates[key].done():
                self.gates[key] = asyncio.get_running_loop().create_future()
            try:
                return self.queue.push_nowait(Job(key, self.bodies[key]))
            except QueueFull as exc:
                return exc

        result = self.run(push())
        if key in self.running or key in self.waiting:
            assert isinstance(result, InFlight)
        elif self.done.get(key, ("",))[0] == "completed":
            assert result == Cached(self.done[key][1])
        elif len(self.running) + len(self.waiting) >= PERMITS + CAPACITY:
            assert isinstance(result, QueueFull)
        else:
            assert isinstance(result, Queued)
            self.done.pop(key, None)
            self.waiting.append(key)
            self._dispatch()

    @precondition(lambda self: self.running)
    @rule(data=st.data(), value=st.integers(0, 9))
    def complete(self, data: st.DataObject, value: int) -> None:
        key = data.draw(st.sampled_from(self.running))
        output = f"{key}-{value}"
        self.run(self._resolve(key, output, None))
        self._finish(key, ("completed", output))
        self.completed += 1

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.running))
        self.run(self._resolve(key, None, RuntimeError(f"{key} failed")))
        self._finish(key, ("failed", FailureReason.ERROR))
        self.failed += 1

    @precondition(lambda self: self.running or self.waiting)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.running + self.waiting))

        async def cancel() -> bool:
            accepted = self.queue.push_nowait(Job(key, self.bodies[key]))
            assert isinstance(accepted, InFlight)
            return accepted.handle.cancel()

        assert self.run(cancel()) is True
        self._finish(key, ("failed", FailureReason.CANCELLED))
        self.failed += 1

    @rule(key=st.sampled_from(KEYS))
    def forget(self, key: str) -> None:
        forgotten = self.run(self.queue.forget(key))
        assert forgotten == (key in self.done)
        self.done.pop(key, None)

    @precondition(
        lambda self: len(self.running) == PERMITS and len(self.waiting) < CAPACITY
    )
    @rule(key=st.sampled_from(KEYS))
    def abandon(self, key: str) -> None:
        if key in self.running or key in self.waiting:
            return
        if self.done.get(key, ("",))[0] == "completed":
            return
        before = self.queue.state(key)

        async def abandon() -> None:
            self.gates[key] = asyncio.get_running_loop().create_future()
            waiter = asyncio.ensure_future(self.queue.push_and_wait(Job(key, self.bodies[key])))
            for _ in range(5):
                await asyncio.sleep(0)
            assert self.queue.state(key) == Pending()
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter

        self.run(abandon())
        assert self.queue.state(key) == before  # the earlier state (or none) is back

    # ------------------------------------------------------------------ model helpers

    async def _resolve(self, key: str, value: str | None, exc: Exception | None) -> None:
        gate = self.gates[key]
        if exc is None:
            gate.set_result(value or "")
        else:
            gate.set_exception(exc)

    def _finish(self, key: str, state: tuple[str, object]) -> None:
        if key in self.running:
            self.running.remove(key)
        else:
            self.waiting.remove(key)
        self.done[key] = state
        self._dispatch()

    def _dispatch(self) -> None:
        while self.waiting and len(self.running) < PERMITS:
            self.running.append(self.waiting.pop(0))

    # ------------------------------------------------------------------ invariants

    @invariant()
    def states_match_the_model(self) -> None:
        for key in KEYS:
            state = self.queue.state(key)
            if key in self.running:
                assert state == Processing(), (key, state)
            elif key in self.waiting:
                assert state == Pending(), (key, state)
            elif key in self.done:
                kind, detail = self.done[key]
                if kind == "completed":
                    assert state == Completed(detail)
                else:
                    assert isinstance(state, Failed) and state.reason is detail
            else:
                assert state is None, (key, state)

    @invariant()
    def lane_counters_match_the_model(self) -> None:
        lane = self.queue.stats()[Priority.MEDIUM]
        assert lane.running == len(self.running) <= PERMITS
        assert lane.queued == len(self.waiting) <= CAPACITY
        assert (lane.completed, lane.failed) == (self.completed, self.failed)

    @invariant()
    def every_job_ended_at_most_once(self) -> None:
        terminal = [e for e in self.events if e.kind in TERMINAL_KINDS]
        started = sum(1 for e in self.events if e.kind == "started")
        assert started == sum(self.runs.values())
        finished = sum(1 for e in terminal if e.kind != "lost")
        assert finished == self.completed + self.failed


QueueMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_queue_machine = QueueMachine.TestCase


TOTAL, LANE_PERMITS = 3, 2


class ArbitratedMachine(RuleBasedStateMachine):
    """Three lanes sharing ``total_permits``, beside a model of the arbitration.

    The clock stands still (no job ever ages), so a free permit must go to the first waiting
    job of the most urgent lane that has a free permit of its own; the invariants check that
    the lanes never hold more than `TOTAL` permits together nor `LANE_PERMITS` each, and that
    exactly the jobs of the model run.
    """

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        lanes = {p: LaneConfig(capacity=4, permits=LANE_PERMITS) for p in Priority}
        self.clock = FakeClock()
        self.queue = Queue(lanes, clock=self.clock, total_permits=TOTAL, aging=1000.0)
        self.gates: dict[str, asyncio.Future[str]] = {}
        self.started: set[str] = set()
        self.count = 0
        self.waiting: dict[Priority, list[str]] = {p: [] for p in Priority}
        self.running: dict[Priority, list[str]] = {p: [] for p in Priority}

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return QueueMachine.run(self, coro)  # type: ignore[arg-type]

    def teardown(self) -> None:
        self.run(self.queue.close(drain=False))
        self.runner.close()

    @rule(priority=st.sampled_from(list(Priority)))
    def push(self, priority: Priority) -> None:
        self.count += 1
        key = f"{priority}-{self.count}"

        async def body() -> str:
            self.started.add(key)
            return await self.gates[key]

        async def push() -> object:
            self.gates[key] = asyncio.get_running_loop().create_future()
            try:
                return self.queue.push_nowait(Job(key, body, priority))
            except QueueFull as exc:
                return exc

        result = self.run(push())
        if len(self.waiting[priority]) + len(self.running[priority]) >= 4 + LANE_PERMITS:
            assert isinstance(result, QueueFull)
            return
        assert isinstance(result, Queued)
        self.waiting[priority].append(key)
        self._dispatch()

    @precondition(lambda self: any(self.running.values()))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(k for ks in self.running.values() for k in ks)))

        async def resolve() -> None:
            self.gates[key].set_result(key)

        self.run(resolve())
        for keys in self.running.values():
            if key in keys:
                keys.remove(key)
        self._dispatch()

    def _dispatch(self) -> None:
        while sum(len(r) for r in self.running.values()) < TOTAL:
            for priority in (Priority.HIGH, Priority.MEDIUM, Priority.LOW):
                if self.waiting[priority] and len(self.running[priority]) < LANE_PERMITS:
                    self.running[priority].append(self.waiting[priority].pop(0))
                    break
            else:
                return

    @invariant()
    def permits_are_shared_and_given_by_priority(self) -> None:
        stats = self.queue.stats()
        assert sum(s.running for s in stats) <= TOTAL
        for lane in stats:
            assert lane.running == len(self.running[lane.priority]) <= LANE_PERMITS
            assert lane.queued == len(self.waiting[lane.priority])
        assert {k for ks in self.running.values() for k in ks} <= self.started
        assert not self.started & {k for ks in self.waiting.values() for k in ks}


ArbitratedMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_arbitrated_machine = ArbitratedMachine.TestCase
