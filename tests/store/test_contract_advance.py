"""`advance_step`, on every store: a completion and the next step's claim in one transaction.

What it records must be exactly what ``complete_step`` then ``claim_step`` record (the events a
reader sees, the rows), and what it refuses must leave nothing of either: a transaction that
fails half-way (a crash before the commit) leaves the step leased, as before the completion.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import agentq.store.rules.lease as rules_lease
from agentq.errors import LeaseLostError, PayloadError, WorkflowClosedError
from agentq.store import (
    Claimed,
    DurableStore,
    Execution,
    MemoryStore,
    StepState,
    WorkflowClosed,
    WorkflowState,
)
from agentq.store.memory.tx import MemoryTx

from .conftest import T0, claim, kinds, start

pytestmark = pytest.mark.timeout(30)


def seen(events: list[Any], workflow_id: str) -> list[tuple[Any, ...]]:
    """What a reader of the log sees of `workflow_id`'s events, but their seq and the id
    (named in a reason's text too)."""
    return [
        (e.kind, e.at, e.step_index, e.step_name, e.attempt, e.worker_id,
         repr(e.data).replace(repr(workflow_id), "'X'"))
        for e in events if e.workflow_id == workflow_id
    ]


async def test_advance_records_what_complete_then_claim_record(store: DurableStore) -> None:
    await start(store, "two")
    await start(store, "one")
    ex = await claim(store, "two")
    await store.complete_step(ex, {"n": [1, 2]}, T0 + 1)
    by_two = await store.claim_step("two", 1, "w1", 10.0, T0 + 1, max_recoveries=2)
    ex = await claim(store, "one")
    row, by_one = await store.advance_step(
        ex, {"n": [1, 2]}, T0 + 1, lease_ttl=10.0, max_recoveries=2
    )
    assert isinstance(by_one, Claimed) and isinstance(by_two, Claimed)
    assert by_one == replace(
        by_two, execution=replace(by_two.execution, workflow_id="one")
    )
    assert (by_one.execution.step_index, by_one.execution.worker_id) == (1, "w1")
    assert (by_one.execution.lease_token, by_one.execution.attempt) == (1, 1)
    assert by_one.execution.expires_at == T0 + 11.0
    assert row.state is WorkflowState.RUNNING
    events = await store.load_events()
    assert seen(events, "one") == seen(events, "two")
    assert await kinds(store, "one") == [
        "WorkflowStarted", "StepStarted", "StepCompleted", "StepStarted"
    ]
    ones = [replace(s, workflow_id="x") for s in await store.step_rows("one")]
    twos = [replace(s, workflow_id="x") for s in await store.step_rows("two")]
    assert ones == twos
    # the lease it got is an ordinary one: the step completes under it
    await store.complete_step(by_one.execution, "b", T0 + 2)
    assert (await store.step_rows("one"))[1].state is StepState.COMPLETED


async def test_advance_of_the_last_step_completes_the_workflow(store: DurableStore) -> None:
    await start(store, "wf", ["only"])
    ex = await claim(store)
    row, claimed = await store.advance_step(ex, 7, T0 + 1, lease_ttl=10.0)
    assert claimed is None and row.state is WorkflowState.COMPLETED
    assert await kinds(store, "wf") == [
        "WorkflowStarted", "StepStarted", "StepCompleted", "WorkflowCompleted"
    ]


async def test_an_advance_past_the_deadline_completes_and_fails_as_the_two_verbs(
    store: DurableStore,
) -> None:
    for wid in ("one", "two"):
        await store.start_workflow(wid, ["a", "b"], None, T0, deadline=T0 + 5)
    ex = await claim(store, "two")
    await store.complete_step(ex, "a", T0 + 6)
    by_two = await store.claim_step("two", 1, "w1", 10.0, T0 + 6)
    ex = await claim(store, "one")
    _, by_one = await store.advance_step(ex, "a", T0 + 6, lease_ttl=10.0)
    assert isinstance(by_one, WorkflowClosed) and isinstance(by_two, WorkflowClosed)
    assert by_one.reason == (by_two.reason or "").replace("'two'", "'one'")
    events = await store.load_events()
    assert seen(events, "one") == seen(events, "two")
    assert (await store.get_workflow("one")).state is WorkflowState.FAILED  # type: ignore[union-attr]


async def assert_nothing_recorded(
    store: DurableStore, ex: Execution, before: list[str]
) -> None:
    """The workflow's log is `before` and step 0 is still leased by `ex` (it completes)."""
    assert await kinds(store, ex.workflow_id) == before
    steps = await store.step_rows(ex.workflow_id)
    assert [s.state for s in steps[:2]] == [StepState.LEASED, StepState.PENDING]
    assert steps[0].lease_token == ex.lease_token


@pytest.mark.parametrize(
    ("output", "ttl", "recoveries", "error"),
    [
        (float("nan"), 10.0, 3, PayloadError),
        ("ok", 0.0, 3, ValueError),
        ("ok", float("inf"), 3, ValueError),
        ("ok", "10", 3, TypeError),
        ("ok", 10.0, -1, ValueError),
    ],
)
async def test_a_refused_advance_records_nothing(
    store: DurableStore, output: Any, ttl: Any, recoveries: Any, error: type[Exception]
) -> None:
    await start(store)
    ex = await claim(store)
    before = await kinds(store, "wf")
    with pytest.raises(error):
        await store.advance_step(ex, output, T0 + 1, lease_ttl=ttl, max_recoveries=recoveries)
    await assert_nothing_recorded(store, ex, before)
    await store.complete_step(ex, "ok", T0 + 1)


async def test_a_stale_or_cancelled_lease_advances_nothing(store: DurableStore) -> None:
    await start(store)
    stale = await claim(store, ttl=1.0)
    new = await claim(store, worker="w2", now=T0 + 5)  # takes the expired lease over
    before = await kinds(store, "wf")
    with pytest.raises(LeaseLostError):
        await store.advance_step(stale, "late", T0 + 6, lease_ttl=10.0)
    await assert_nothing_recorded(store, new, before)
    assert await store.cancel_workflow("wf", "stop", T0 + 7)
    before = await kinds(store, "wf")
    with pytest.raises(WorkflowClosedError):
        await store.advance_step(new, "late", T0 + 8, lease_ttl=10.0)
    assert await kinds(store, "wf") == before
    assert [s.state for s in await store.step_rows("wf")][1] is StepState.PENDING


async def test_an_advance_that_fails_after_the_completion_wrote_keeps_neither(
    store: DurableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash between the two halves: the transaction holds both or neither."""
    await start(store)
    ex = await claim(store)
    before = await kinds(store, "wf")
    claim_rule = rules_lease.claim_loaded

    def claim_then_fail(*args: Any) -> Any:
        claim_rule(*args)  # writes StepStarted of the next step, then the process "dies"
        raise RuntimeError("lost between the halves")

    monkeypatch.setattr("agentq.store.rules.advance.claim_loaded", claim_then_fail)
    with pytest.raises(RuntimeError, match="between the halves"):
        await store.advance_step(ex, "a", T0 + 1, lease_ttl=10.0)
    monkeypatch.undo()
    await assert_nothing_recorded(store, ex, before)
    _, claimed = await store.advance_step(ex, "a", T0 + 2, lease_ttl=10.0)
    assert isinstance(claimed, Claimed) and claimed.execution.lease_token == 1


async def test_each_verb_reads_its_rows_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An advance reads the workflow and both steps in one load (the claim's half works on
    the rows the completion left, not a second read of them); the completion of a one-step
    workflow reads nothing more for `WorkflowCompleted`'s outputs; the last step of a longer
    one reads only the steps before it. The rules are every store's: counted on memory."""
    loads: list[tuple[int, int]] = []
    load = MemoryTx.load

    def counted(self: MemoryTx, workflow_id: str, first: int = 0, last: int = -1) -> Any:
        loads.append((first, last))
        return load(self, workflow_id, first, last)

    monkeypatch.setattr(MemoryTx, "load", counted)
    store = MemoryStore()
    await start(store, "three")
    ex = await claim(store, "three")
    loads.clear()
    _, next_claim = await store.advance_step(ex, 1, T0 + 1, lease_ttl=10.0)
    assert loads == [(0, 1)]
    assert isinstance(next_claim, Claimed)
    _, last_claim = await store.advance_step(next_claim.execution, 2, T0 + 2, lease_ttl=10.0)
    assert isinstance(last_claim, Claimed)
    loads.clear()
    row = await store.complete_step(last_claim.execution, 3, T0 + 3)
    assert loads == [(2, 2), (0, 1)]
    assert row.state is WorkflowState.COMPLETED
    assert (await store.load_events("three"))[-1].data["outputs"] == [1, 2, 3]
    await start(store, "one", ["only"])
    ex = await claim(store, "one")
    loads.clear()
    row = await store.complete_step(ex, "out", T0 + 4)
    assert loads == [(0, 0)]
    assert (await store.load_events("one"))[-1].data["outputs"] == ["out"]
