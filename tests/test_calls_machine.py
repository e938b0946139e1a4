"""A Hypothesis state machine: durable calls beside a plain-dict model of the world.

One workflow of one step runs on a `MemoryStore` that outlives every engine. Its step body is
an interpreter the machine drives: each rule sends it one command (make a durable call, wait
for input, fail the step) and reads what came back. The rules:

- ``call``: ``ctx.call`` of one of a few keys; the tool's body notes that it ran, then blocks
  until ``complete`` or ``fail`` decides its outcome (a completed key must answer from the
  log without running);
- ``complete`` / ``fail``: the call in flight returns a value / raises;
- ``fail_step``: the step body raises; its retry runs the body again from its start;
- ``crash``: the process dies: its engine is cut off from the store (nothing it does later
  reaches it: each verb raises), maybe with a call in doubt; a new engine on the same store
  takes the step over once the lease has expired;
- ``wait`` / ``resume``: ``ctx.wait_for_input`` parks the step; ``engine.resume`` answers it,
  the step runs again, and the same wait now returns the answer.

The model is plain dicts: which keys completed with which output, how many times each key's
body ran, how many crashes happened during it and how often it failed. Invariants after every
rule: a completed key never runs again; a key runs at most (crashes during it + failures + 1)
times; the store's recorded outputs, states and ``rerun`` flags equal the model's. The
machine drives its coroutines through its own `asyncio.Runner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentq.clock import FakeClock
from agentq.errors import JobFailed
from agentq.events import EventKind
from agentq.queue import Job, Queue
from agentq.retry import RetryPolicy
from agentq.store import DurableStore, MemoryStore
from agentq.workflows import RunResult, RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

KEYS = ("a", "b", "c")
WAIT_KEYS = ("w1", "w2")
WF = "wf-machine"
TTL = 30.0


class Dead(Exception):
    """Raised by every store verb of an engine whose process crashed."""


class Link:
    """The store as one process sees it; after `cut` every verb raises `Dead`."""

    def __init__(self, inner: DurableStore) -> None:
        self.inner = inner
        self.alive = True


def _through(name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    async def verb(self: Link, *args: Any, **kwargs: Any) -> Any:
        if not self.alive:
            raise Dead(f"{name}: this process is dead")
        return await getattr(self.inner, name)(*args, **kwargs)

    verb.__name__ = name
    return verb


for _name in dir(DurableStore):  # class attributes, so that isinstance(..., DurableStore) holds
    if not _name.startswith("_"):
        setattr(Link, _name, _through(_name))


class CallsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.store = MemoryStore()
        self.clock = FakeClock()
        # The model has no crash budget: every crash is recovered (max_recoveries).
        retry = RetryPolicy(max_attempts=10_000)
        self.wf = Workflow(WF, [StepDef("s", self._body, retry=retry, max_recoveries=10_000)])
        self.generation = 0
        # The running process: its link to the store, queue, engine and current run.
        self.link: Link
        self.queue: Queue
        self.engine: WorkflowEngine
        self.run_task: asyncio.Task[RunResult] | None = None
        self.inbox: asyncio.Queue[tuple[str, str, asyncio.Future[Any]]] | None = None
        self.gate: tuple[str, asyncio.Future[str]] | None = None  # the call body in flight
        self.reply: asyncio.Future[Any] | None = None  # what ctx.call will return to the body
        self.waiting: str | None = None  # the wait key the step is parked on
        # The model.
        self.done: dict[str, str] = {}  # key -> recorded output
        self.ran: Counter[str] = Counter()  # key -> executions of its body (the world)
        self.ran_when_done: dict[str, int] = {}
        self.crashes: Counter[str] = Counter()  # crashes while the key's body ran
        self.failures: Counter[str] = Counter()
        self.failed: set[str] = set()  # keys whose last run failed
        self.in_doubt: set[str] = set()  # keys started and never finished (a crash)
        self.reruns: dict[str, list[bool]] = {}  # key -> expected CallStarted "rerun" flags
        self.answers: dict[str, int] = {}  # wait key -> the input resume gave
        self.run(self._start_process(advance=False))

    # ------------------------------------------------------------------ plumbing

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.runner.run(coro)

    @staticmethod
    async def until(done: Callable[[], bool], what: str) -> None:
        for _ in range(500):
            if done():
                return
            await asyncio.sleep(0)
        raise AssertionError(f"never happened: {what}")

    async def tool(self, key: str) -> str:
        self.ran[key] += 1
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.gate = (key, gate)
        return await gate

    async def _body(self, ctx: StepContext) -> None:
        inbox: asyncio.Queue[tuple[str, str, asyncio.Future[Any]]] = asyncio.Queue()
        self.inbox = inbox
        while True:
            op, arg, reply = await inbox.get()
            if op == "raise":
                raise ConnectionError("the step fails; its retry runs the body again")
            try:
                if op == "call":
                    result: Any = await ctx.call(Job(arg, functools.partial(self.tool, arg)))
                else:
                    result = await ctx.wait_for_input(arg, f"question {arg}")
            except JobFailed as exc:
                result = exc
            reply.set_result(result)

    async def _start_process(self, *, advance: bool) -> None:
        """A new process: a new queue and engine on the same store; it continues the step."""
        self.generation += 1
        self.link = Link(self.store)
        self.queue = Queue(clock=self.clock)
        self.engine = WorkflowEngine(
            self.queue,
            self.link,  # type: ignore[arg-type]
            worker_id=f"process-{self.generation}",
            lease_ttl=TTL,
            clock=self.clock,
        )
        self.engine.register_workflow(self.wf)
        if self.waiting is None:
            if advance:
                await self.clock.advance(TTL + 1)  # the dead process's lease expires
            await self._continue(self.engine.run(WF))

    async def _continue(self, run: Coroutine[Any, Any, RunResult]) -> None:
        self.inbox = None
        self.run_task = asyncio.ensure_future(run)
        await self.until(lambda: self.inbox is not None, "the step body runs again")

    async def _ask(self, op: str, arg: str) -> asyncio.Future[Any]:
        assert self.inbox is not None
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.inbox.put_nowait((op, arg, reply))
        return reply

    async def _stop_process(self) -> None:
        """The process dies: it is cut off from the store, then its tasks are wound down."""
        self.link.alive = False
        if self.gate is not None:
            self.gate[1].cancel()
            self.gate = None
        self.reply = None
        with contextlib.suppress(Dead):
            await self.engine.close()
        if self.run_task is not None:
            with contextlib.suppress(Dead, asyncio.CancelledError):
                await self.run_task
            self.run_task = None
        await self.queue.close(drain=False)

    def teardown(self) -> None:
        self.run(self._stop_process())
        self.runner.close()

    # ------------------------------------------------------------------ rules

    @precondition(lambda self: self.waiting is None and self.gate is None)
    @rule(key=st.sampled_from(KEYS))
    def call(self, key: str) -> None:
        before = self.ran[key]

        async def call() -> asyncio.Future[Any]:
            reply = await self._ask("call", key)
            await self.until(lambda: reply.done() or self.gate is not None, f"call {key}")
            return reply

        reply = self.run(call())
        if key in self.done:  # answered from the log, not run
            event("call answered from the log")
            assert reply.done() and reply.result() == self.done[key]
            assert self.ran[key] == before and self.gate is None
            return
        assert not reply.done() and self.gate is not None and self.gate[0] == key
        assert self.ran[key] == before + 1
        event("call in doubt runs again" if key in self.in_doubt else "call runs")
        self.reruns.setdefault(key, []).append(key in self.in_doubt)
        self.in_doubt.add(key)  # until its outcome is recorded
        self.failed.discard(key)
        self.reply = reply

    @precondition(lambda self: self.gate is not None)
    @rule(value=st.integers(0, 9))
    def complete(self, value: int) -> None:
        assert self.gate is not None and self.reply is not None
        key, gate = self.gate
        output = f"{key}={value}"
        gate.set_result(output)
        reply = self.reply
        self.run(self.until(reply.done, f"{key} completes"))
        assert reply.result() == output
        self.gate = self.reply = None
        self.done[key] = output
        self.ran_when_done[key] = self.ran[key]
        self.in_doubt.discard(key)
        self.failed.discard(key)

    @precondition(lambda self: self.gate is not None)
    @rule()
    def fail(self) -> None:
        assert self.gate is not None and self.reply is not None
        key, gate = self.gate
        gate.set_exception(RuntimeError(f"{key} failed"))
        reply = self.reply
        self.run(self.until(reply.done, f"{key} fails"))
        result = reply.result()
        assert isinstance(result, JobFailed) and isinstance(result.__cause__, RuntimeError)
        self.gate = self.reply = None
        self.failures[key] += 1
        self.in_doubt.discard(key)
        self.failed.add(key)

    @precondition(lambda self: self.waiting is None and self.gate is None)
    @rule()
    def fail_step(self) -> None:
        async def fail_step() -> None:
            inbox = self.inbox
            await self._ask("raise", "")
            await self.until(lambda: self.inbox is not inbox, "the step is retried")

        self.run(fail_step())

    @rule()
    def crash(self) -> None:
        event(
            "crash during a call" if self.gate is not None
            else "crash while waiting" if self.waiting else "crash between calls"
        )
        if self.gate is not None:
            self.crashes[self.gate[0]] += 1

        async def crash() -> None:
            await self._stop_process()
            await self._start_process(advance=True)

        self.run(crash())

    @precondition(lambda self: self.waiting is None and self.gate is None)
    @rule(key=st.sampled_from(WAIT_KEYS))
    def wait(self, key: str) -> None:
        async def wait() -> asyncio.Future[Any]:
            reply = await self._ask("wait", key)
            task = self.run_task
            assert task is not None
            await self.until(lambda: reply.done() or task.done(), f"wait {key}")
            return reply

        reply = self.run(wait())
        if key in self.answers:  # answered from the log
            event("wait answered from the log")
            assert reply.done() and reply.result() == self.answers[key]
            return
        assert self.run_task is not None
        result = self.run_task.result()
        assert result.status is RunStatus.WAITING and result.reason == f"question {key}"
        self.run_task = None
        self.waiting = key

    @precondition(lambda self: self.waiting is not None)
    @rule(value=st.integers(0, 99))
    def resume(self, value: int) -> None:
        key = self.waiting
        assert key is not None

        async def resume() -> Any:
            await self._continue(self.engine.resume(WF, "s", value, key=key))
            reply = await self._ask("wait", key)  # the step asks again: the answer is there
            await self.until(reply.done, f"wait {key} answered")
            return reply.result()

        assert self.run(resume()) == value
        self.waiting = None
        self.answers[key] = value

    # ------------------------------------------------------------------ invariants

    @invariant()
    def a_completed_key_never_runs_again(self) -> None:
        for key, ran in self.ran_when_done.items():
            assert self.ran[key] == ran, key

    @invariant()
    def a_key_runs_at_most_once_per_crash_and_failure(self) -> None:
        for key in KEYS:
            assert self.ran[key] <= self.crashes[key] + self.failures[key] + 1, key

    @invariant()
    def the_log_equals_the_model(self) -> None:
        rows = self.run(self.store.calls(WF))
        calls = {r.key: r for r in rows if r.kind == "call"}
        waits = {r.key: r for r in rows if r.kind == "wait"}
        assert {k: r.output for k, r in calls.items() if r.state == "completed"} == self.done
        assert {k for k, r in calls.items() if r.state == "started"} == self.in_doubt
        assert {k for k, r in calls.items() if r.state == "failed"} == self.failed
        assert {k: r.output for k, r in waits.items() if r.state == "answered"} == self.answers
        events = self.run(self.store.load_events(WF))
        reruns: dict[str, list[bool]] = {}
        for e in events:
            if e.kind is EventKind.CALL_STARTED:
                reruns.setdefault(e.data["key"], []).append(e.data["rerun"])
        assert reruns == self.reruns
        completed = Counter(e.data["key"] for e in events if e.kind is EventKind.CALL_COMPLETED)
        assert completed == Counter(self.done.keys())  # one CallCompleted per completed key


CallsMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_calls_machine = CallsMachine.TestCase
