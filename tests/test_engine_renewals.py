"""One timer renews every lease an engine holds (`agentq.workflows.renewals.Renewals`).

Attempts running at once share one sleeper on the clock (not one task each); every lease is
still renewed every ``lease_ttl / 3`` seconds, however long its body runs, and once no lease
is held nothing is left sleeping.
"""

from __future__ import annotations

import asyncio

import pytest

from agentq.clock import FakeClock
from agentq.store import DurableStore
from agentq.workflows import RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)

BOUND = 5.0
"""Real seconds any wait of these tests may take (the fake clock never moves on its own)."""

TTL = 30.0  # the `engine` fixture's lease_ttl


async def lease_until(store: DurableStore, workflow_id: str) -> float | None:
    """The lease expiry of the workflow's first step."""
    return (await store.step_rows(workflow_id))[0].lease_expires_at


async def renewed(store: DurableStore, workflow_id: str, until: float) -> None:
    """Wait (in real time) until the step's lease expires at `until` (a renewal lands)."""
    async with asyncio.timeout(BOUND):
        while await lease_until(store, workflow_id) != until:  # noqa: ASYNC110 - SQLite's thread
            await asyncio.sleep(0.001)


async def test_leases_held_at_once_share_one_timer_and_are_all_renewed_in_time(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    leave = asyncio.Event()
    all_entered = asyncio.Event()
    entered: list[str] = []

    async def long(ctx: StepContext) -> str:
        entered.append(ctx.workflow_id)
        if len(entered) == 3:
            all_entered.set()
        await leave.wait()
        return ctx.workflow_id

    wfs = [Workflow(f"wf-renew-{i}", [StepDef("s", long)]) for i in range(3)]
    runs = [asyncio.ensure_future(engine.run(wf)) for wf in wfs]
    async with asyncio.timeout(BOUND):
        await all_entered.wait()
        await clock.wait_for_sleepers(1)
    assert clock.sleepers == 1  # one renewer for three leases, not one each
    start = clock.time()
    # Ten renewal periods: every lease must be renewed each time (expired, it could be taken).
    for period in range(1, 11):
        async with asyncio.timeout(BOUND):
            await clock.advance(TTL / 3)
            for wf in wfs:  # each renewed at the end of this period
                await renewed(store, wf.id, start + period * TTL / 3 + TTL)
            await clock.wait_for_sleepers(1)
            rows = [(await store.step_rows(wf.id))[0] for wf in wfs]
        assert clock.sleepers == 1
        assert all(r.state == "leased" and r.lease_token == 1 for r in rows)
    leave.set()
    async with asyncio.timeout(BOUND):
        results = await asyncio.gather(*runs)
    assert [r.status for r in results] == [RunStatus.COMPLETED] * 3
    assert [r.output for r in results] == [wf.id for wf in wfs]
    assert clock.sleepers == 0  # no lease held: the renewer has ended
    assert engine.tables()["attempts"] == 0


async def test_a_lease_added_while_others_are_held_is_due_a_third_of_the_ttl_after_its_claim(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    leave = asyncio.Event()
    entered = {"wf-first": asyncio.Event(), "wf-second": asyncio.Event()}

    async def long(ctx: StepContext) -> None:
        entered[ctx.workflow_id].set()
        await leave.wait()

    first = asyncio.ensure_future(engine.run(Workflow("wf-first", [StepDef("s", long)])))
    async with asyncio.timeout(BOUND):
        await entered["wf-first"].wait()
        await clock.wait_for_sleepers(1)
    await clock.advance(TTL / 6)  # half-way to the first lease's renewal
    second = asyncio.ensure_future(engine.run(Workflow("wf-second", [StepDef("s", long)])))
    async with asyncio.timeout(BOUND):
        await entered["wf-second"].wait()
    claimed_second = clock.time()
    await clock.advance(TTL / 6)  # the first is due, the second not yet
    await renewed(store, "wf-first", clock.time() + TTL)
    assert await lease_until(store, "wf-second") == claimed_second + TTL
    await clock.advance(TTL / 6)  # now the second is due
    await renewed(store, "wf-second", clock.time() + TTL)
    leave.set()
    async with asyncio.timeout(BOUND):
        await asyncio.gather(first, second)
    assert clock.sleepers == 0
