"""Fencing of durable calls: two engines on one store and one fake clock.

Engine A is inside a call when it stops renewing its lease (its process is paused: the
renewals never reach the store); the lease expires and engine B takes the step over. When A
wakes up, the outcome of its call is refused, and so is any call it tries next: nothing A
does after the takeover reaches the log. B's run completes, and the call's key ends with
exactly one ``CallCompleted``.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import LeaseLostError
from agentq.events import EventKind
from agentq.queue import Job, Queue
from agentq.store import DurableStore, Execution
from agentq.workflows import RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)

TTL = 30.0


class PausedRenewals:
    """`inner` as one engine sees it; while `paused`, that engine's lease renewals hang.

    Every other verb goes straight through: the process is paused only as far as its lease
    is concerned (a long GC pause, a laptop lid closed while a call is out).
    """

    def __init__(self, inner: DurableStore) -> None:
        self.inner = inner
        self.paused = False
        self.woken = asyncio.Event()

    async def renew_lease(self, execution: Execution, lease_ttl: float, now: float) -> Execution:
        if self.paused:
            await self.woken.wait()  # held until the test wakes the process up
        return await self.inner.renew_lease(execution, lease_ttl, now)


def _delegate(name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    async def method(self: PausedRenewals, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = name
    return method


for _name in dir(DurableStore):  # class attributes, so that isinstance(..., DurableStore) holds
    if not _name.startswith("_") and _name != "renew_lease":
        setattr(PausedRenewals, _name, _delegate(_name))


async def settle_until(done: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if done():
            return
        await asyncio.sleep(0.001 if _ > 1000 else 0)  # SQLite answers from its thread
    raise AssertionError(f"never happened: {what}")


async def takeover(
    a: WorkflowEngine,
    b: WorkflowEngine,
    wf: Workflow,
    paused: PausedRenewals,
    clock: FakeClock,
    run_a: asyncio.Task[Any],
    pending: list[asyncio.Future[str]],
    refused: list[tuple[str, str]],
) -> None:
    await settle_until(lambda: len(pending) == 1, "A is inside the call 'pay'")
    paused.paused = True
    await clock.advance(TTL + 1)  # A's lease expires: it could not renew it
    run_b = asyncio.create_task(b.run(wf))
    await settle_until(lambda: len(pending) == 2, "B runs 'pay' again (it is in doubt)")

    pending[0].set_result("paid-by-A")  # A wakes up with its call's outcome: too late
    await settle_until(lambda: len(refused) == 2, "A's outcome and next call refused")
    pending[1].set_result("paid-by-B")
    done_b = await run_b
    assert done_b.status is RunStatus.COMPLETED
    assert done_b.output == ["quote-ok", "paid-by-B", "receipt-ok"]

    await clock.advance(a.poll_interval)  # A polls again and finds the step completed
    done_a = await run_a
    assert done_a.status is RunStatus.COMPLETED and done_a.outputs == done_b.outputs


async def test_a_late_call_outcome_after_a_takeover_is_refused(
    store: DurableStore, clock: FakeClock
) -> None:
    ran: Counter[str] = Counter()
    pending: list[asyncio.Future[str]] = []
    refused: list[tuple[str, str]] = []

    async def tool(name: str) -> str:
        ran[name] += 1
        if name != "pay":
            return f"{name}-ok"
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        pending.append(gate)
        return await gate

    async def body(ctx: StepContext) -> list[str]:
        quote = await ctx.call(Job("quote", functools.partial(tool, "quote")))
        try:
            paid = await ctx.call(Job("pay", functools.partial(tool, "pay")))
        except LeaseLostError:
            refused.append(("pay", ctx.step_name))
            try:  # a worker that lost its lease cannot start another call either
                await ctx.call(Job("after-loss", functools.partial(tool, "after-loss")))
            except LeaseLostError:
                refused.append(("after-loss", ctx.step_name))
            raise
        receipt = await ctx.call(Job("receipt", functools.partial(tool, "receipt")))
        return [quote, paid, receipt]

    wf = Workflow("wf-fenced", [StepDef("checkout", body)])
    paused = PausedRenewals(store)
    assert isinstance(paused, DurableStore)
    async with Queue(clock=clock) as qa, Queue(clock=clock) as qb:
        a = WorkflowEngine(qa, paused, worker_id="A", lease_ttl=TTL, clock=clock)  # type: ignore[arg-type]
        b = WorkflowEngine(qb, store, worker_id="B", lease_ttl=TTL, clock=clock)
        run_a = asyncio.create_task(a.run(wf))
        try:
            await takeover(a, b, wf, paused, clock, run_a, pending, refused)
        finally:  # a failed assertion must not leave a renewal or a call hanging
            paused.woken.set()
            for gate in pending:
                gate.cancel()
            await a.close()
            await b.close()

    assert ran == Counter({"quote": 1, "pay": 2, "receipt": 1})  # never "after-loss"
    assert refused == [("pay", "checkout"), ("after-loss", "checkout")]
    events = await store.load_events("wf-fenced")
    taken = next(
        i for i, e in enumerate(events)
        if e.kind is EventKind.STEP_STARTED and e.worker_id == "B"
    )
    assert events[taken - 1].kind is EventKind.WORKER_RECOVERED
    assert {e.worker_id for e in events[taken:]} <= {"B", None}  # nothing recorded by A
    pay = [e for e in events if e.data.get("key") == "pay"]
    assert [(e.kind, e.worker_id) for e in pay] == [
        (EventKind.CALL_STARTED, "A"),
        (EventKind.CALL_STARTED, "B"),
        (EventKind.CALL_COMPLETED, "B"),
    ]
    assert [e.data["rerun"] for e in pay[:2]] == [False, True]
    assert pay[2].data["output"] == "paid-by-B"
    rows = {row.key: (row.state, row.output) for row in await store.calls("wf-fenced")}
    assert rows == {
        "quote": ("completed", "quote-ok"),
        "pay": ("completed", "paid-by-B"),
        "receipt": ("completed", "receipt-ok"),
    }
