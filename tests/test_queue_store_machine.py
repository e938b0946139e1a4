"""A Hypothesis state machine: a queue with a store, restarted at random, beside a dict model.

Rules push, complete, fail, forget and restart (close the queue without draining, then a new
queue on the same store, as after a kernel restart) act on both the real thing and a model of
what is in memory and what is stored. After every rule the invariants compare each key's
state, the store's rows and how many times each body ran. The machine drives its coroutines
through its own `asyncio.Runner`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentq.outcomes import Completed, Failed, Pending, Processing
from agentq.queue import Cached, InFlight, Job, LaneConfig, Priority, Queue, Queued
from agentq.store import MemoryStore

KEYS = ("a", "b", "c")


class StoredQueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.store = MemoryStore()
        self.queue = self._new_queue()
        self.gates: dict[str, asyncio.Future[str]] = {}
        self.bodies = {key: self._body(key) for key in KEYS}
        self.runs = dict.fromkeys(KEYS, 0)
        # The model: what this queue's memory holds, and what the store holds.
        self.memory: dict[str, tuple[str, str | None]] = {}  # key -> (completed|failed, out)
        self.running: set[str] = set()
        self.stored: dict[str, str] = {}
        self.expected_runs = dict.fromkeys(KEYS, 0)

    def _new_queue(self) -> Queue:
        lanes = {Priority.MEDIUM: LaneConfig(capacity=len(KEYS), permits=len(KEYS))}
        return Queue(lanes, store=self.store)

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
            if key not in self.running:
                self.gates[key] = asyncio.get_running_loop().create_future()
            return await self.queue.push(Job(key, self.bodies[key]))

        result = self.run(push())
        if key in self.running:
            assert isinstance(result, InFlight)
        elif self.memory.get(key, ("",))[0] == "completed":
            assert result == Cached(self.memory[key][1])
        elif key in self.stored:  # read back from the store: nothing runs
            assert result == Cached(self.stored[key])
            self.memory[key] = ("completed", self.stored[key])
        else:
            assert isinstance(result, Queued)
            self.running.add(key)
            self.expected_runs[key] += 1

    @precondition(lambda self: self.running)
    @rule(data=st.data(), value=st.integers(0, 9))
    def complete(self, data: st.DataObject, value: int) -> None:
        key = data.draw(st.sampled_from(sorted(self.running)))
        output = f"{key}-{value}"
        self.run(self._resolve(key, output, None))
        self.running.discard(key)
        self.memory[key] = ("completed", output)
        self.stored.setdefault(key, output)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.running)))
        self.run(self._resolve(key, None, RuntimeError(f"{key} failed")))
        self.running.discard(key)
        self.memory[key] = ("failed", None)

    @rule(key=st.sampled_from(KEYS))
    def forget(self, key: str) -> None:
        forgotten = self.run(self.queue.forget(key))
        if key in self.running:
            assert forgotten is False
            return
        assert forgotten == (key in self.memory or key in self.stored)
        self.memory.pop(key, None)
        self.stored.pop(key, None)

    @rule()
    def restart(self) -> None:
        """The kernel restarts: running jobs are lost (cancelled, not saved), memory too."""
        self.run(self.queue.close(drain=False))
        self.queue = self._new_queue()
        self.running.clear()
        self.memory.clear()

    async def _resolve(self, key: str, value: str | None, exc: Exception | None) -> None:
        gate = self.gates[key]
        if exc is None:
            gate.set_result(value or "")
        else:
            gate.set_exception(exc)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def states_match_the_model(self) -> None:
        for key in KEYS:
            state = self.queue.state(key)
            if key in self.running:
                assert state in (Pending(), Processing()), (key, state)
            elif key in self.memory:
                kind, output = self.memory[key]
                if kind == "completed":
                    assert state == Completed(output), (key, state)
                else:
                    assert isinstance(state, Failed), (key, state)
            else:
                assert state is None, (key, state)

    @invariant()
    def the_store_holds_what_completed(self) -> None:
        async def rows() -> dict[str, str]:
            found = {}
            for key in KEYS:
                stored = await self.store.load_job(key, self.queue.clock.time())
                if stored is not None:
                    found[key] = stored.output
            return found

        assert self.runner.run(rows()) == self.stored

    @invariant()
    def a_stored_key_never_runs_again(self) -> None:
        assert self.runs == self.expected_runs


StoredQueueMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_stored_queue_machine = StoredQueueMachine.TestCase
