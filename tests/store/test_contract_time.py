"""Contract: `start_workflow(..., run_at=, deadline=)` and `time_out_workflow`, on every store.

`run_at` keeps the first step from being claimed before it (a `NotBefore`, like a retry
time); a deadline is stored with the workflow, and once it passed the workflow fails with
``WorkflowTimedOut`` by `time_out_workflow` or by the next claim, whoever comes first.
"""

from __future__ import annotations

import pytest

from agentq.errors import LeaseLostError, UnknownWorkflowError, WorkflowClosedError
from agentq.events import EventKind
from agentq.store import (
    AlreadyWaiting,
    Claimed,
    DurableStore,
    NotBefore,
    StepState,
    WorkflowClosed,
    WorkflowState,
)

from .conftest import T0, claim, kinds


async def ready_ids(store: DurableStore, now: float) -> list[str]:
    work = await store.ready_workflows(now, {"d": ("a", "b")}, 50)
    return [w.workflow.workflow_id for w in work]


async def test_run_at_and_deadline_are_in_the_event_only_when_given(store: DurableStore) -> None:
    row, _ = await store.start_workflow(
        "wf", ["a", "b"], None, T0, definition="d", run_at=T0 + 60, deadline=T0 + 600
    )
    assert row.deadline == T0 + 600
    assert await store.get_workflow("wf") == row
    [event] = await store.load_events("wf")
    assert event.data["run_at"] == T0 + 60 and event.data["deadline"] == T0 + 600
    plain, _ = await store.start_workflow("plain", ["a"], None, T0)
    assert plain.deadline is None
    [started] = await store.load_events("plain")
    assert "run_at" not in started.data and "deadline" not in started.data
    again, created = await store.start_workflow("wf", ["a", "b"], None, T0, definition="d")
    assert not created and again.deadline == T0 + 600  # an existing workflow keeps its own


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("run_at", float("nan"), ValueError),
        ("deadline", "soon", TypeError),
        ("deadline", True, TypeError),
        ("run_at", float("inf"), ValueError),
    ],
)
async def test_bad_times_are_refused_and_nothing_is_stored(
    store: DurableStore, field: str, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match=field):
        await store.start_workflow("wf", ["a"], None, T0, **{field: value})  # type: ignore[arg-type]
    assert await store.get_workflow("wf") is None


async def test_run_at_is_not_claimed_before_and_is_ready_from_then(store: DurableStore) -> None:
    await store.start_workflow("wf", ["a", "b"], None, T0, definition="d", run_at=T0 + 60)
    assert await store.claim_step("wf", 0, "w1", 10.0, T0 + 59) == NotBefore(T0 + 60)
    assert await ready_ids(store, T0 + 59) == []
    assert await ready_ids(store, T0 + 60) == ["wf"]
    claimed = await store.claim_step("wf", 0, "w1", 10.0, T0 + 60)
    assert isinstance(claimed, Claimed)
    assert await kinds(store, "wf") == ["WorkflowStarted", "StepStarted"]


async def test_time_out_workflow_fails_it_once_at_its_deadline(store: DurableStore) -> None:
    await store.start_workflow("wf", ["a", "b"], None, T0, definition="d", deadline=T0 + 600)
    assert not await store.time_out_workflow("wf", T0 + 599)  # not yet
    assert await ready_ids(store, T0 + 599) == ["wf"]  # its first step is pending
    execution = await claim(store, "wf", 0, now=T0 + 1)
    assert await ready_ids(store, T0 + 2) == []  # leased
    assert await ready_ids(store, T0 + 600) == ["wf"]  # its deadline passed
    assert await store.time_out_workflow("wf", T0 + 600)
    assert not await store.time_out_workflow("wf", T0 + 601)  # once
    row = await store.get_workflow("wf")
    assert row is not None and row.state is WorkflowState.FAILED
    assert (row.reason or "").startswith("WorkflowTimedOut: ")
    step = (await store.step_rows("wf"))[0]
    assert step.state is StepState.FAILED and step.reason == "WorkflowTimedOut"
    with pytest.raises((LeaseLostError, WorkflowClosedError)):  # the lease is revoked
        await store.renew_lease(execution, 10.0, T0 + 601)
    with pytest.raises((LeaseLostError, WorkflowClosedError)):
        await store.complete_step(execution, "late", T0 + 602)
    last = (await store.load_events("wf"))[-1]
    assert last.kind is EventKind.WORKFLOW_FAILED and last.data["deadline"] == T0 + 600
    assert await ready_ids(store, T0 + 700) == []


async def test_a_claim_after_the_deadline_fails_a_waiting_workflow(store: DurableStore) -> None:
    await store.start_workflow("wf", ["a"], None, T0, deadline=T0 + 60)
    execution = await claim(store, "wf", 0, now=T0)
    await store.wait_step(execution, "sleeping", T0 + 1, key="sleep:0", deadline=T0 + 3600)
    assert await store.claim_step("wf", 0, "w2", 10.0, T0 + 59) == AlreadyWaiting("sleeping")
    result = await store.claim_step("wf", 0, "w2", 10.0, T0 + 60)
    assert isinstance(result, WorkflowClosed) and result.state is WorkflowState.FAILED
    assert (result.reason or "").startswith("WorkflowTimedOut")
    step = (await store.step_rows("wf"))[0]
    assert step.state is StepState.FAILED and step.wait_deadline is None
    assert not await store.time_out_wait("wf", 0, T0 + 3601)  # the sleep never wakes
    assert (await kinds(store, "wf"))[-1] == "WorkflowFailed"


async def test_no_deadline_and_unknown_workflows(store: DurableStore) -> None:
    await store.start_workflow("wf", ["a"], None, T0)
    assert not await store.time_out_workflow("wf", T0 + 1e9)
    with pytest.raises(UnknownWorkflowError):
        await store.time_out_workflow("nope", T0)


async def test_the_projection_rebuilt_from_the_log_keeps_deadlines(store: DurableStore) -> None:
    """Replaying the log gives the same rows (the projection is a fold of the events)."""
    from agentq.store.rules.projection import replay

    await store.start_workflow("wf", ["a", "b"], None, T0, run_at=T0 + 5, deadline=T0 + 9)
    await store.time_out_workflow("wf", T0 + 10)
    [(_, rows)] = replay(await store.load_events("wf"))
    assert rows.workflow == await store.get_workflow("wf")
    assert list(rows.steps.values()) == await store.step_rows("wf")
