"""The DurableStore contract: every verb's happy and unhappy paths, on every store.

A store that passes this file (and `test_state_machine.py`) can back a `WorkflowEngine`.
"""

from __future__ import annotations

import asyncio
import math
import unicodedata
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from agentq.codec import MAX_PAYLOAD_BYTES
from agentq.errors import (
    EngineError,
    InvalidKeyError,
    LeaseLostError,
    NotWaitingError,
    PayloadError,
    StoreError,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowClosedError,
    WorkflowMismatchError,
)
from agentq.events import EventKind
from agentq.outcomes import ErrorInfo
from agentq.store import (
    EVENT_COLUMNS,
    AlreadyCompleted,
    AlreadyWaiting,
    Claimed,
    DurableStore,
    HeldByOther,
    StepState,
    WorkflowClosed,
    WorkflowState,
)
from agentq.store.contract.checks import MAX_TEXT_CHARS
from agentq.store.contract.rows import event_row
from agentq.store.rules.projection import replay

from .conftest import T0, claim, kinds, run_step, start

pytestmark = pytest.mark.timeout(30)


async def step(store: DurableStore, index: int, workflow_id: str = "wf") -> Any:
    return (await store.step_rows(workflow_id))[index]


# ---------------------------------------------------------------- start_workflow


async def test_start_creates_the_workflow_and_its_pending_steps(store: DurableStore) -> None:
    row, created = await store.start_workflow("wf", ["a", "b"], {"n": (1, 2)}, T0)
    assert created
    assert row.workflow_id == "wf" and row.state is WorkflowState.RUNNING
    assert row.step_names == ("a", "b") and row.input == {"n": [1, 2]}
    assert (row.created_at, row.updated_at, row.last_seq, row.reason) == (T0, T0, 1, None)
    [event] = await store.load_events("wf")
    assert event.kind is EventKind.WORKFLOW_STARTED and event.seq == 1
    assert event.at == datetime.fromtimestamp(T0, UTC) and event.at.tzinfo is not None
    assert event.data == {"steps": ["a", "b"], "input": {"n": [1, 2]}, "definition": None}
    assert row.definition is None
    rows = await store.step_rows("wf")
    assert [(r.step_index, r.step_name, r.state, r.attempt, r.lease_token) for r in rows] == [
        (0, "a", StepState.PENDING, 0, 0),
        (1, "b", StepState.PENDING, 0, 0),
    ]
    assert await store.get_workflow("wf") == row


async def test_start_again_returns_the_stored_row_and_appends_nothing(store: DurableStore) -> None:
    first, _ = await store.start_workflow("wf", ["a"], 1, T0)
    again, created = await store.start_workflow("wf", ["a"], 1, T0 + 5)
    assert not created and again == first
    assert await store.last_seq() == 1


async def test_start_with_other_steps_is_a_mismatch(store: DurableStore) -> None:
    await start(store, steps=["a", "b"])
    with pytest.raises(WorkflowMismatchError, match=r"'wf'.*\['a', 'b'\].*\['a'\]"):
        await store.start_workflow("wf", ["a"], None, T0)
    assert await store.last_seq() == 1


@pytest.mark.parametrize(
    ("workflow_id", "steps", "error"),
    [
        ("", ["a"], InvalidKeyError),
        ("\ud83d", ["a"], InvalidKeyError),
        ("x" * 1025, ["a"], InvalidKeyError),
        (42, ["a"], TypeError),
        ("wf", [], ValueError),
        ("wf", ["a", "a"], ValueError),
        ("wf", "ab", TypeError),
        ("wf", ["a", ""], InvalidKeyError),
        ("wf", ["a", 3], TypeError),
    ],
)
async def test_start_refuses_bad_ids_and_steps(
    store: DurableStore, workflow_id: Any, steps: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await store.start_workflow(workflow_id, steps, None, T0)
    assert await store.last_seq() == 0


@pytest.mark.parametrize("now", [math.nan, math.inf, "now", True, 1e20])
async def test_a_bad_time_is_refused(store: DurableStore, now: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        await store.start_workflow("wf", ["a"], None, now)
    assert await store.last_seq() == 0


# ---------------------------------------------------------------- claim_step


async def test_claim_leases_the_step(store: DurableStore) -> None:
    await start(store)
    result = await store.claim_step("wf", 0, "w1", 10.0, T0 + 1)
    assert isinstance(result, Claimed)
    ex = result.execution
    assert (ex.workflow_id, ex.step_index, ex.step_name, ex.worker_id) == ("wf", 0, "a", "w1")
    assert (ex.lease_token, ex.attempt, ex.expires_at) == (1, 1, T0 + 11)
    assert (result.resume_input, result.resumed) == (None, False)
    event = (await store.load_events("wf"))[-1]
    assert event.kind is EventKind.STEP_STARTED
    assert (event.step_index, event.step_name, event.attempt, event.worker_id) == (0, "a", 1, "w1")
    assert event.data == {"lease_token": 1, "expires_at": T0 + 11}
    row = await step(store, 0)
    assert (row.state, row.worker_id, row.lease_token, row.lease_expires_at, row.attempt) == (
        StepState.LEASED, "w1", 1, T0 + 11, 1)
    assert row.started_at == T0 + 1


async def test_a_live_lease_is_never_taken_over_not_even_at_its_expiry_tick(
    store: DurableStore,
) -> None:
    await start(store)
    await claim(store, ttl=10.0, now=T0)
    for now in (T0, T0 + 5, T0 + 10):
        assert await store.claim_step("wf", 0, "w2", 10.0, now) == HeldByOther("w1", T0 + 10)
    # the holder itself gets HeldByOther too: one worker id may run two claims concurrently
    assert await store.claim_step("wf", 0, "w1", 10.0, T0 + 10) == HeldByOther("w1", T0 + 10)
    assert await kinds(store) == ["WorkflowStarted", "StepStarted"]
    assert await store.expired_leases(T0 + 10) == []


async def test_an_expired_lease_is_taken_over_with_worker_recovered(store: DurableStore) -> None:
    await start(store)
    await claim(store, ttl=10.0, now=T0)
    ex = await claim(store, worker="w2", ttl=10.0, now=T0 + 10.5)
    # the lost attempt is re-admitted under its own number: it does not count as an attempt
    assert (ex.lease_token, ex.attempt, ex.worker_id) == (2, 1, "w2")
    events = await store.load_events("wf")
    assert [e.kind for e in events[-2:]] == [EventKind.WORKER_RECOVERED, EventKind.STEP_STARTED]
    recovered = events[-2]
    assert recovered.data == {
        "previous_worker": "w1", "lease_token": 1, "expired_at": T0 + 10,
        "reason": "lease expired"}
    assert (recovered.attempt, recovered.worker_id) == (1, "w2")
    row = await step(store, 0)
    assert (row.attempt, row.recoveries, row.lease_token) == (1, 1, 2)


async def test_claim_of_a_completed_step_returns_its_output(store: DurableStore) -> None:
    await start(store)
    await run_step(store, output={"x": [1]})
    n = await store.last_seq()
    assert await store.claim_step("wf", 0, "w2", 10.0, T0) == AlreadyCompleted({"x": [1]})
    assert await store.last_seq() == n


async def test_claim_in_order_only(store: DurableStore) -> None:
    await start(store)
    with pytest.raises(EngineError, match=r"'b' \(#1\) of workflow 'wf'.*'a' \(#0\), is pending"):
        await store.claim_step("wf", 1, "w1", 10.0, T0)
    await claim(store)
    with pytest.raises(EngineError, match="is leased"):
        await store.claim_step("wf", 1, "w1", 10.0, T0)
    assert await store.last_seq() == 2


async def test_claim_unknowns_and_bad_arguments(store: DurableStore) -> None:
    with pytest.raises(UnknownWorkflowError, match="'nope'"):
        await store.claim_step("nope", 0, "w1", 10.0, T0)
    await start(store)
    for index in (3, -1):
        with pytest.raises(UnknownStepError, match=r"'wf'.*3 steps \['a', 'b', 'c'\]"):
            await store.claim_step("wf", index, "w1", 10.0, T0)
    for ttl in (0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="lease_ttl"):
            await store.claim_step("wf", 0, "w1", ttl, T0)
    with pytest.raises(TypeError):
        await store.claim_step("wf", True, "w1", 10.0, T0)
    with pytest.raises(InvalidKeyError):
        await store.claim_step("wf", 0, "", 10.0, T0)
    assert await store.last_seq() == 1


async def test_claim_of_a_closed_workflow(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    await store.fail_step(ex, "boom", None, T0, None)
    assert await store.claim_step("wf", 0, "w1", 10.0, T0) == WorkflowClosed(
        WorkflowState.FAILED, "boom")
    await start(store, "wf2")
    await store.cancel_workflow("wf2", "stop", T0)
    assert await store.claim_step("wf2", 0, "w1", 10.0, T0) == WorkflowClosed(
        WorkflowState.CANCELLED, "stop")


# ---------------------------------------------------------------- renew_lease


async def test_renew_extends_the_lease_without_an_event(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store, ttl=10.0, now=T0)
    renewed = await store.renew_lease(ex, 10.0, T0 + 8)
    assert renewed == replace(ex, expires_at=T0 + 18)
    assert await store.last_seq() == 2
    assert (await step(store, 0)).lease_expires_at == T0 + 18
    assert isinstance(await store.claim_step("wf", 0, "w2", 10.0, T0 + 15), HeldByOther)
    assert await store.expired_leases(T0 + 15) == []
    # a lease that expired but was not taken over is still held, and can be renewed
    assert (await store.renew_lease(renewed, 10.0, T0 + 30)).expires_at == T0 + 40


async def test_renew_after_a_takeover_is_refused(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store, ttl=10.0, now=T0)
    await claim(store, worker="w2", now=T0 + 11)
    with pytest.raises(LeaseLostError, match=r"lease #1 of worker 'w1'.*#2 of worker 'w2'"):
        await store.renew_lease(ex, 10.0, T0 + 12)


# ---------------------------------------------------------------- complete_step


async def test_complete_records_output_then_the_workflow(store: DurableStore) -> None:
    await start(store, steps=["a", "b"])
    ex = await claim(store)
    row = await store.complete_step(ex, {"v": (1,)}, T0 + 1)
    assert row.state is WorkflowState.RUNNING and row.last_seq == 3
    s = await step(store, 0)
    assert (s.state, s.output, s.finished_at, s.lease_expires_at) == (
        StepState.COMPLETED, {"v": [1]}, T0 + 1, None)
    event = (await store.load_events())[-1]
    assert (event.kind, event.output, event.attempt, event.worker_id) == (
        EventKind.STEP_COMPLETED, {"v": [1]}, 1, "w1")
    row = await store.complete_step(await claim(store, index=1), "done", T0 + 2)
    assert row.state is WorkflowState.COMPLETED
    assert await kinds(store) == [
        "WorkflowStarted", "StepStarted", "StepCompleted", "StepStarted", "StepCompleted",
        "WorkflowCompleted",
    ]
    assert (await store.load_events())[-1].data == {"outputs": [{"v": [1]}, "done"]}


async def test_a_stale_workers_late_completion_is_refused(store: DurableStore) -> None:
    """BH-04, store side: after a takeover the old lease's result fails the fencing check."""
    await start(store)
    stale = await claim(store, ttl=1.0, now=T0)
    fresh = await claim(store, worker="w2", ttl=1.0, now=T0 + 1.5)
    n = await store.last_seq()
    for late in (
        store.complete_step(stale, "late", T0 + 5),
        store.fail_step(stale, "error", None, T0 + 5, None),
        store.wait_step(stale, "late", T0 + 5),
    ):
        with pytest.raises(LeaseLostError, match="taken over"):
            await late
    assert await store.last_seq() == n
    await store.complete_step(fresh, "fresh", T0 + 6)
    with pytest.raises(LeaseLostError):
        await store.complete_step(stale, "late", T0 + 7)
    assert (await step(store, 0)).output == "fresh"
    assert (await kinds(store)).count("StepCompleted") == 1
    assert "WorkerRecovered" in await kinds(store)


async def test_complete_twice_is_refused(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    await store.complete_step(ex, 1, T0)
    with pytest.raises(LeaseLostError, match="the step is completed"):
        await store.complete_step(ex, 2, T0)
    await start(store, "one", ["a"])
    ex = await claim(store, "one")
    await store.complete_step(ex, 1, T0)
    with pytest.raises(WorkflowClosedError, match="'one' is completed"):
        await store.complete_step(ex, 2, T0)


async def test_a_lease_that_expired_untaken_can_still_complete(store: DurableStore) -> None:
    await start(store, steps=["a"])
    ex = await claim(store, ttl=1.0, now=T0)
    row = await store.complete_step(ex, "ok", T0 + 100)
    assert row.state is WorkflowState.COMPLETED


# ---------------------------------------------------------------- fail_step


async def test_fail_with_retry_makes_the_step_pending_again(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    error = ErrorInfo("builtins.ValueError", "bad", "Traceback…")
    row = await store.fail_step(ex, "error", error, T0 + 1, T0 + 3)
    assert row.state is WorkflowState.RUNNING
    events = await store.load_events()
    assert [e.kind for e in events[-2:]] == [EventKind.STEP_FAILED, EventKind.RETRY_SCHEDULED]
    assert events[-2].data == {"reason": "error", "error": error.to_dict()}
    assert events[-1].data == {"retry_at": T0 + 3, "delay": 2.0}
    s = await step(store, 0)
    assert (s.state, s.reason, s.error, s.retry_at, s.attempt) == (
        StepState.PENDING, "error", error, T0 + 3, 1)
    again = await claim(store, now=T0 + 3)
    assert (again.attempt, again.lease_token) == (2, 2)


async def test_fail_for_good_fails_the_workflow(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    row = await store.fail_step(ex, "no way", None, T0 + 1, None)
    assert (row.state, row.reason) == (WorkflowState.FAILED, "no way")
    assert (await kinds(store))[-2:] == ["StepFailed", "WorkflowFailed"]
    failed = (await store.load_events())[-1]
    assert (failed.step_index, failed.reason) == (0, "no way")
    s = await step(store, 0)
    assert (s.state, s.reason, s.finished_at) == (StepState.FAILED, "no way", T0 + 1)


async def test_reasons_are_always_storable(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    error = ErrorInfo("X", "bad \ud83d byte \x00", "t" * (MAX_TEXT_CHARS + 10))
    await store.fail_step(ex, "why \udc80\x00", error, T0, T0)
    s = await step(store, 0)
    assert s.reason == "why \\udc80\\x00"
    assert s.error is not None and s.error.message == "bad \\ud83d byte \\x00"
    assert s.error.traceback.endswith("[10 more characters]")


# ---------------------------------------------------------------- wait and resume


async def test_wait_then_resume(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    row = await store.wait_step(ex, "approve?", T0 + 1)
    assert row.state is WorkflowState.WAITING
    s = await step(store, 0)
    assert (s.state, s.reason, s.lease_expires_at) == (StepState.WAITING, "approve?", None)
    assert await store.claim_step("wf", 0, "w2", 10.0, T0 + 2) == AlreadyWaiting("approve?")
    row = await store.resume_step("wf", 0, {"ok": True}, T0 + 3)
    assert row.state is WorkflowState.RUNNING
    event = (await store.load_events())[-1]
    assert (event.kind, event.input, event.attempt) == (EventKind.STEP_RESUMED, {"ok": True}, None)
    s = await step(store, 0)
    assert (s.state, s.attempt, s.resumed, s.resume_input) == (
        StepState.PENDING, 0, True, {"ok": True})
    result = await store.claim_step("wf", 0, "w2", 10.0, T0 + 4)
    assert isinstance(result, Claimed)
    assert (result.execution.attempt, result.execution.lease_token) == (1, 2)
    assert (result.resume_input, result.resumed) == ({"ok": True}, True)


async def test_resume_refusals_append_nothing(store: DurableStore) -> None:
    await start(store)
    with pytest.raises(NotWaitingError, match=r"'a' \(#0\) of workflow 'wf'.*pending"):
        await store.resume_step("wf", 0, 1, T0)
    with pytest.raises(UnknownWorkflowError):
        await store.resume_step("nope", 0, 1, T0)
    with pytest.raises(UnknownStepError):
        await store.resume_step("wf", 7, 1, T0)
    ex = await claim(store)
    await store.wait_step(ex, "why", T0)
    await store.resume_step("wf", 0, {"approve": True}, T0)
    n = await store.last_seq()
    with pytest.raises(NotWaitingError, match="pending, not waiting"):
        await store.resume_step("wf", 0, {"approve": False}, T0)
    await store.cancel_workflow("wf", "stop", T0)
    with pytest.raises(WorkflowClosedError, match="'wf' is cancelled"):
        await store.resume_step("wf", 0, 1, T0)
    assert await store.last_seq() == n + 1


async def test_resume_after_completion_is_not_waiting(store: DurableStore) -> None:
    """BH-17, store side: the second resume, after the step completed, names its state."""
    await start(store, steps=["a"])
    await store.wait_step(await claim(store), "approve?", T0)
    await store.resume_step("wf", 0, {"approve": True}, T0)
    await store.complete_step(await claim(store), "done", T0)
    n = await store.last_seq()
    with pytest.raises(NotWaitingError, match=r"'a' \(#0\) of workflow 'wf'.*completed"):
        await store.resume_step("wf", 0, {"approve": False}, T0)
    assert await store.last_seq() == n
    assert (await step(store, 0)).resume_input == {"approve": True}


async def test_exactly_one_of_two_concurrent_resumes_wins(store: DurableStore) -> None:
    """BH-17, store side."""
    await start(store)
    await store.wait_step(await claim(store), "approve?", T0)
    results = await asyncio.gather(
        store.resume_step("wf", 0, {"approve": True}, T0),
        store.resume_step("wf", 0, {"approve": False}, T0),
        return_exceptions=True,
    )
    assert sum(isinstance(r, NotWaitingError) for r in results) == 1
    resumed = [e for e in await store.load_events() if e.kind is EventKind.STEP_RESUMED]
    assert len(resumed) == 1
    winner = 0 if not isinstance(results[0], Exception) else 1
    assert resumed[0].input == {"approve": winner == 0}


# ---------------------------------------------------------------- cancel_workflow


async def test_cancel_revokes_the_lease_and_refuses_late_writes(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    assert await store.cancel_workflow("wf", "user said stop", T0 + 1)
    row = await store.get_workflow("wf")
    assert row is not None and (row.state, row.reason) == (
        WorkflowState.CANCELLED, "user said stop")
    s = await step(store, 0)
    # revoked, but kept as a fence until it is released or expires (test_contract_fences)
    assert (s.state, s.reason, s.worker_id, s.lease_expires_at) == (
        StepState.FAILED, "cancelled", ex.worker_id, ex.expires_at)
    n = await store.last_seq()
    for late in (
        store.complete_step(ex, "late", T0 + 2),
        store.fail_step(ex, "error", None, T0 + 2, T0 + 3),
        store.wait_step(ex, "late", T0 + 2),
    ):
        with pytest.raises(WorkflowClosedError, match="'wf' is cancelled"):
            await late
    # the renewal tells the worker of the cancel, and extends only the fence (its body may
    # still run): no event, no live lease
    fence = await store.renew_lease(ex, 10.0, T0 + 2)
    assert (fence.revoked, fence.expires_at, fence.lease_token) == (True, T0 + 12, ex.lease_token)
    assert await store.last_seq() == n
    assert "WorkflowCompleted" not in await kinds(store)
    assert await store.expired_leases(T0 + 100) == []


async def test_cancel_is_idempotent_and_never_reopens(store: DurableStore) -> None:
    await start(store)
    assert await store.cancel_workflow("wf", "one", T0)
    assert not await store.cancel_workflow("wf", "two", T0)
    assert (await kinds(store)).count("WorkflowCancelled") == 1
    await start(store, "done", ["a"])
    await run_step(store, "done")
    assert not await store.cancel_workflow("done", "late", T0)
    assert "WorkflowCancelled" not in await kinds(store, "done")
    with pytest.raises(UnknownWorkflowError):
        await store.cancel_workflow("nope", "x", T0)


async def test_cancel_of_a_waiting_workflow(store: DurableStore) -> None:
    await start(store)
    await store.wait_step(await claim(store), "approve?", T0)
    assert await store.cancel_workflow("wf", "no", T0)
    assert (await step(store, 0)).state is StepState.FAILED
    assert (await step(store, 1)).state is StepState.PENDING


# ---------------------------------------------------------------- expiry and recovery


async def test_expired_leases_and_release(store: DurableStore) -> None:
    for wid, ttl in (("w-late", 5.0), ("w-early", 2.0), ("w-live", 50.0)):
        await start(store, wid)
        await claim(store, wid, ttl=ttl, now=T0)
    assert await store.expired_leases(T0 + 2) == []
    expired = await store.expired_leases(T0 + 6)
    assert [(e.workflow_id, e.expires_at, e.lease_token) for e in expired] == [
        ("w-early", T0 + 2, 1), ("w-late", T0 + 5, 1)]
    live = await claim(store, "w-live", index=0, worker="w9", now=T0 + 51)  # taken over
    assert await store.release_expired(expired[0], T0 + 6)
    assert not await store.release_expired(expired[0], T0 + 6)
    assert not await store.release_expired(live, T0 + 52)  # live
    event = (await store.load_events("w-early"))[-1]
    assert (event.kind, event.worker_id, event.attempt) == (EventKind.WORKER_RECOVERED, None, 1)
    assert event.data == {
        "previous_worker": "w1", "lease_token": 1, "expired_at": T0 + 2,
        "reason": "lease expired"}
    released = await step(store, 0, "w-early")
    assert (released.state, released.attempt, released.recoveries) == (StepState.PENDING, 0, 1)
    with pytest.raises(LeaseLostError, match="no longer holds it"):
        await store.complete_step(expired[0], "late", T0 + 7)
    again = await claim(store, "w-early", now=T0 + 7)
    assert (again.attempt, again.lease_token) == (1, 2)  # the lost attempt, re-admitted


async def test_release_of_a_renewed_lease_is_refused(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store, ttl=2.0, now=T0)
    [expired] = await store.expired_leases(T0 + 3)
    await store.renew_lease(ex, 10.0, T0 + 3)
    assert not await store.release_expired(expired, T0 + 4)


# ---------------------------------------------------------------- payloads (BH-14)

BAD_VALUES = [
    pytest.param({"ids": {1, 2}}, "set", id="set"),
    pytest.param({"raw": b"\x00\xff"}, "bytes", id="bytes"),
    pytest.param({"at": datetime(2026, 1, 1, tzinfo=UTC)}, "datetime", id="datetime"),
    pytest.param({"obj": object()}, "object", id="object"),
    pytest.param({"x": math.nan}, "nan", id="nan"),
    pytest.param([math.inf], "inf", id="inf"),
    pytest.param({1: "x"}, "int", id="non-str-key"),
    pytest.param({"s": "\ud83d"}, "surrogate", id="lone-surrogate"),
    pytest.param("x" * (MAX_PAYLOAD_BYTES + 1), "limit", id="too-large"),
]


@pytest.mark.parametrize(("value", "named"), BAD_VALUES)
async def test_a_bad_output_appends_nothing_and_the_step_can_still_fail(
    store: DurableStore, value: Any, named: str
) -> None:
    await start(store)
    ex = await claim(store)
    n = await store.last_seq()
    with pytest.raises(PayloadError, match=named) as info:
        await store.complete_step(ex, value, T0)
    assert info.value.field.startswith("output")
    assert await store.last_seq() == n
    assert (await step(store, 0)).state is StepState.LEASED
    row = await store.fail_step(ex, f"payload: {info.value}", None, T0, None)
    assert row.state is WorkflowState.FAILED
    assert (await step(store, 0)).state is StepState.FAILED
    await start(store, "other", ["a"])  # other work continues
    await run_step(store, "other")


@pytest.mark.parametrize(("value", "named"), BAD_VALUES)
async def test_bad_inputs_append_nothing(store: DurableStore, value: Any, named: str) -> None:
    with pytest.raises(PayloadError, match=named):
        await store.start_workflow("bad", ["a"], value, T0)
    await start(store)
    await store.wait_step(await claim(store), "?", T0)
    n = await store.last_seq()
    with pytest.raises(PayloadError, match=named):
        await store.resume_step("wf", 0, value, T0)
    assert await store.last_seq() == n
    assert (await step(store, 0)).state is StepState.WAITING
    assert await store.get_workflow("bad") is None


async def test_a_payload_at_the_limit_is_stored(store: DurableStore) -> None:
    await start(store)
    big = "é" * ((MAX_PAYLOAD_BYTES - 2) // 2)  # 2 bytes each, plus the quotes
    await store.complete_step(await claim(store), big, T0)
    assert (await step(store, 0)).output == big


# ---------------------------------------------------------------- keys (BH-15)


async def test_ids_are_byte_exact(store: DurableStore) -> None:
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    ids = [nfc, nfd, "a\x00b", "a", "🦜 k", "k", "k ", "x" * 1024]
    for i, wid in enumerate(ids):
        await start(store, wid, ["s"], input=i)
    for i, wid in enumerate(ids):
        row = await store.get_workflow(wid)
        assert row is not None and row.workflow_id == wid and row.input == i
        [event] = await store.load_events(wid)
        assert event.workflow_id == wid and event.input == i
        assert [r.workflow_id for r in await store.step_rows(wid)] == [wid]
    assert [w.workflow_id for w in await store.workflows()] == ids
    assert await store.get_workflow("a\x00") is None


# ---------------------------------------------------------------- the read side


async def test_events_after_a_sequence_number(store: DurableStore) -> None:
    await start(store, "one")
    await start(store, "two")
    await run_step(store, "one")
    all_events = await store.load_events()
    assert [e.seq for e in all_events] == [1, 2, 3, 4]
    assert [e.seq for e in await store.load_events(after_seq=2)] == [3, 4]
    assert [e.seq for e in await store.load_events(after_seq=1, limit=2)] == [2, 3]
    assert [e.seq for e in await store.load_events("one", after_seq=1)] == [3, 4]
    assert await store.load_events(after_seq=4) == []
    assert await store.last_seq() == 4
    with pytest.raises(ValueError):
        await store.load_events(after_seq=-1)
    with pytest.raises(TypeError):
        await store.load_events(limit="2")  # type: ignore[arg-type]


async def test_event_rows_match_the_events(store: DurableStore) -> None:
    await start(store, input={"q": [1, 2.5, "é\n"]})
    ex = await claim(store)
    await store.fail_step(ex, "error", ErrorInfo("E", "m"), T0, T0 + 1)
    await store.wait_step(await claim(store, now=T0 + 1), "ok?", T0 + 1)
    await store.resume_step("wf", 0, 0.30000000000000004, T0 + 2)
    await store.complete_step(await claim(store, now=T0 + 3), {"out": None}, T0 + 3)
    await store.complete_step(await claim(store, index=1, now=T0 + 3), None, T0 + 3)
    await store.cancel_workflow("wf", "enough", T0 + 4)
    rows = await store.event_rows()
    assert rows == [event_row(e) for e in await store.load_events()]
    assert all(len(r) == len(EVENT_COLUMNS) for r in rows)
    by_kind = {r[5]: dict(zip(EVENT_COLUMNS, r, strict=True)) for r in rows}
    assert by_kind["WorkflowStarted"]["input"] == '{"q":[1,2.5,"é\\n"]}'
    assert by_kind["StepResumed"]["input"] == "0.30000000000000004"
    assert by_kind["StepFailed"]["reason"] == "error"
    assert by_kind["WorkflowCancelled"]["reason"] == "enough"
    assert [r[9] for r in rows if r[5] == "StepCompleted"] == ['{"out":null}', "null"]
    assert await store.event_rows("wf", after_seq=len(rows) - 1) == rows[-1:]


async def test_workflows_and_step_rows_in_start_order(store: DurableStore) -> None:
    for wid in ("z", "a", "m"):
        await start(store, wid, ["s0", "s1"])
    await run_step(store, "a")
    await store.cancel_workflow("m", "x", T0)
    assert [w.workflow_id for w in await store.workflows()] == ["z", "a", "m"]
    assert [w.workflow_id for w in await store.workflows(WorkflowState.RUNNING)] == ["z", "a"]
    assert [w.workflow_id for w in await store.workflows(WorkflowState.CANCELLED)] == ["m"]
    assert [(r.workflow_id, r.step_index) for r in await store.step_rows()] == [
        ("z", 0), ("z", 1), ("a", 0), ("a", 1), ("m", 0), ("m", 1)]
    assert await store.step_rows("nope") == []
    with pytest.raises(ValueError):
        await store.workflows("nope")  # type: ignore[arg-type]


async def test_a_read_sees_every_write_started_before_it(store: DurableStore) -> None:
    await start(store, steps=["a"])
    *_, steps = await asyncio.gather(
        store.claim_step("wf", 0, "w1", 10.0, T0),
        store.start_workflow("wf2", ["a"], None, T0),
        store.step_rows(),
    )
    assert [(s.workflow_id, s.state) for s in steps] == [
        ("wf", StepState.LEASED), ("wf2", StepState.PENDING)]


async def test_returned_values_are_copies(store: DurableStore) -> None:
    value = {"list": [1]}
    await start(store, input=value)
    value["list"].append(2)
    row = await store.get_workflow("wf")
    assert row is not None and row.input == {"list": [1]}
    row.input["list"].append(3)
    again = await store.get_workflow("wf")
    assert again is not None and again.input == {"list": [1]}


async def test_a_closed_store_refuses_every_call(store: DurableStore) -> None:
    await start(store)
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.start_workflow("x", ["a"], None, T0)
    with pytest.raises(StoreError, match="closed"):
        await store.load_events()


# ---------------------------------------------------------------- the projection


async def test_rebuild_equals_the_live_projection(store: DurableStore) -> None:
    await start(store, "done", ["a", "b"])
    await run_step(store, "done", 0, {"x": 1})
    await run_step(store, "done", 1, [1, 2])
    await start(store, "retry")
    await store.fail_step(await claim(store, "retry"), "e", ErrorInfo("E", "m", "t"), T0, T0 + 1)
    await claim(store, "retry", now=T0 + 1)
    await start(store, "wait")
    await store.wait_step(await claim(store, "wait"), "why", T0)
    await store.resume_step("wait", 0, {"ok": 1}, T0)
    await start(store, "cancel")
    await claim(store, "cancel")
    await store.cancel_workflow("cancel", "stop", T0)
    await start(store, "renewed")
    ex = await claim(store, "renewed", ttl=5.0, now=T0)
    await store.renew_lease(ex, 50.0, T0 + 1)

    live_steps, live_workflows = await store.step_rows(), await store.workflows()
    replayed = replay(await store.load_events())
    assert [rows.workflow for _, rows in replayed] == live_workflows
    replayed_steps = [s for _, rows in replayed for _, s in sorted(rows.steps.items())]
    renewed = next(i for i, s in enumerate(live_steps) if s.workflow_id == "renewed")
    assert replayed_steps[renewed].lease_expires_at == T0 + 5  # as of StepStarted
    live_steps[renewed] = replace(live_steps[renewed], lease_expires_at=T0 + 5)
    assert replayed_steps == live_steps

    await store.rebuild_projection()
    assert await store.step_rows() == live_steps
    assert await store.workflows() == live_workflows


async def test_a_workflow_id_reused_with_another_input_is_refused(store: DurableStore) -> None:
    await store.start_workflow("wf-in", ["a"], {"user": "alice", "ids": (1, 2)}, T0)
    row, created = await store.start_workflow("wf-in", ["a"], {"ids": [1, 2], "user": "alice"}, T0)
    assert not created and row.input == {"user": "alice", "ids": [1, 2]}
    with pytest.raises(WorkflowMismatchError, match="another input"):
        await store.start_workflow("wf-in", ["a"], {"user": "bob", "ids": [1, 2]}, T0)
    assert await kinds(store, "wf-in") == ["WorkflowStarted"]
