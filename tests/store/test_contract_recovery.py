"""The DurableStore contract for retries and crashes, on every store.

Stored retry times (`NotBefore`), the crash budget (``max_recoveries``, lost attempts that do
not count as attempts), taking a dead worker's lease back (`release_dead`) and running a failed
or cancelled workflow again (`retry_workflow`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from agentq.errors import (
    LeaseLostError,
    NotRetryableError,
    UnknownStepError,
    UnknownWorkflowError,
)
from agentq.events import EventKind
from agentq.store import (
    HANDED_BACK_REASON,
    AlreadyCompleted,
    Claimed,
    ClaimResult,
    DurableStore,
    HeldByOther,
    NotBefore,
    StepState,
    WorkflowClosed,
    WorkflowState,
    execution_of,
)
from agentq.store.rules.projection import replay

from .conftest import T0, claim, kinds, run_step, start

pytestmark = pytest.mark.timeout(30)


async def step(store: DurableStore, index: int, workflow_id: str = "wf") -> Any:
    return (await store.step_rows(workflow_id))[index]


# ---------------------------------------------------------------- stored retry times


async def test_no_worker_claims_a_step_before_its_stored_retry_time(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store, worker="w1")
    await store.fail_step(ex, "error", None, T0 + 1, T0 + 30)
    n = await store.last_seq()
    for worker, now in (("w1", T0 + 1), ("w2", T0 + 2), ("w2", T0 + 29.999)):
        result = await store.claim_step("wf", 0, worker, 10.0, now)
        assert result == NotBefore(T0 + 30) == ClaimResult.NotBefore(T0 + 30)
    assert await store.last_seq() == n  # a refused claim records nothing
    assert (await step(store, 0)).retry_at == T0 + 30
    again = await claim(store, worker="w2", now=T0 + 30)  # at the stored time: claimed
    assert (again.attempt, again.lease_token) == (2, 2)
    assert (await step(store, 0)).retry_at is None


async def test_a_retry_time_yields_to_completion_closing_and_step_order(
    store: DurableStore,
) -> None:
    await start(store)
    await store.fail_step(await claim(store), "error", None, T0, T0 + 30)
    await store.cancel_workflow("wf", "stop", T0 + 1)
    assert await store.claim_step("wf", 0, "w1", 10.0, T0 + 1) == WorkflowClosed(
        WorkflowState.CANCELLED, "stop")
    await start(store, "done", ["a"])
    await run_step(store, "done", output=1)
    assert await store.claim_step("done", 0, "w1", 10.0, T0) == AlreadyCompleted(1)


async def test_a_retry_time_of_zero_delay_is_claimable_at_once(store: DurableStore) -> None:
    await start(store)
    await store.fail_step(await claim(store), "error", None, T0 + 1, T0 + 1)
    assert isinstance(await store.claim_step("wf", 0, "w1", 10.0, T0 + 1), Claimed)


# ---------------------------------------------------------------- the crash budget


async def test_a_lost_attempt_is_readmitted_under_its_number_and_counted_apart(
    store: DurableStore,
) -> None:
    await start(store)
    first = await claim(store, ttl=1.0, now=T0)
    await store.fail_step(first, "error", None, T0, T0)  # attempt 1 failed: it counts
    second = await claim(store, ttl=1.0, now=T0)
    assert second.attempt == 2
    result = await store.claim_step("wf", 0, "w2", 1.0, T0 + 2)  # attempt 2 died with w1
    assert isinstance(result, Claimed)
    assert (result.execution.attempt, result.execution.lease_token, result.recoveries) == (
        2, 3, 1)
    await store.fail_step(result.execution, "error", None, T0 + 2, None)
    row = await step(store, 0)
    assert (row.state, row.attempt, row.recoveries) == (StepState.FAILED, 2, 1)
    attempts = [e.attempt for e in await store.load_events("wf") if e.kind == "StepStarted"]
    assert attempts == [1, 2, 2]


async def test_past_max_recoveries_a_takeover_fails_the_workflow(store: DurableStore) -> None:
    await start(store, steps=["boom", "next"])
    now = T0
    for expected in range(3):  # the first run, then two re-admissions
        result = await store.claim_step("wf", 0, f"w{expected}", 1.0, now, max_recoveries=2)
        assert isinstance(result, Claimed), result
        assert (result.execution.attempt, result.recoveries) == (1, expected)
        now += 2.0  # each dies: its lease runs out
    n = await store.last_seq()
    result = await store.claim_step("wf", 0, "w9", 1.0, now, max_recoveries=2)
    reason = "step 'boom' was lost to 3 crashes (max_recoveries=2)"
    assert isinstance(result, WorkflowClosed) and result.state is WorkflowState.FAILED
    assert result.reason is not None and result.reason.startswith(reason)
    events = (await store.load_events("wf"))[n:]
    assert [e.kind for e in events] == [
        EventKind.WORKER_RECOVERED, EventKind.STEP_FAILED, EventKind.WORKFLOW_FAILED]
    assert events[1].reason == events[2].reason == result.reason
    assert (events[1].attempt, events[1].worker_id, events[1].data["error"]) == (1, "w9", None)
    row = await step(store, 0)
    assert (row.state, row.recoveries, row.attempt, row.reason) == (
        StepState.FAILED, 3, 0, result.reason)
    wf = await store.get_workflow("wf")
    assert wf is not None and (wf.state, wf.reason) == (WorkflowState.FAILED, result.reason)
    assert await store.claim_step("wf", 0, "w9", 1.0, now) == WorkflowClosed(
        WorkflowState.FAILED, result.reason)


async def test_past_max_recoveries_after_a_release_the_claim_fails(store: DurableStore) -> None:
    await start(store)
    await claim(store, ttl=1.0, now=T0)
    [expired] = await store.expired_leases(T0 + 2)
    assert await store.release_expired(expired, T0 + 2)
    result = await store.claim_step("wf", 0, "w2", 1.0, T0 + 2, max_recoveries=0)
    assert isinstance(result, WorkflowClosed)
    assert (result.reason or "").startswith("step 'a' was lost to 1 crash (max_recoveries=0)")
    assert (await kinds(store))[-2:] == ["StepFailed", "WorkflowFailed"]


async def test_the_default_budget_is_three_recoveries(store: DurableStore) -> None:
    await start(store)
    now = T0
    for _ in range(4):
        assert isinstance(await store.claim_step("wf", 0, "w", 1.0, now), Claimed)
        now += 2.0
    result = await store.claim_step("wf", 0, "w", 1.0, now)
    assert isinstance(result, WorkflowClosed) and "lost to 4 crashes" in (result.reason or "")


async def test_a_lease_handed_back_by_its_worker_is_not_a_crash(store: DurableStore) -> None:
    # Review 10 #4: a graceful shutdown hands the lease back with HANDED_BACK_REASON; any
    # number of them never spends the crash budget, and replay agrees.
    await start(store)
    now = T0
    for _ in range(5):
        ex = await claim(store, worker="w", ttl=30.0, now=now)
        assert ex.attempt == 1
        assert await store.release_dead(ex, now + 1, HANDED_BACK_REASON)
        now += 2
    row = await step(store, 0)
    assert (row.state, row.attempt, row.recoveries) == (StepState.PENDING, 0, 0)
    result = await store.claim_step("wf", 0, "w", 30.0, now, max_recoveries=0)
    assert isinstance(result, Claimed) and result.recoveries == 0
    recovered = [e for e in await store.load_events("wf") if e.kind == "WorkerRecovered"]
    assert [e.data["crash"] for e in recovered] == [False] * 5
    crash = await claim(store, worker="w2", ttl=1.0, now=now + 31)  # the lease ran out
    row = await step(store, 0)
    assert (crash.attempt, row.recoveries) == (1, 1)
    last = [e for e in await store.load_events("wf") if e.kind == "WorkerRecovered"][-1]
    assert "crash" not in last.data  # absent: a crash
    [(_, rows)] = replay(await store.load_events())
    assert rows.steps[0] == await step(store, 0)  # the projection is a replay


async def test_resume_starts_the_crash_count_over(store: DurableStore) -> None:
    await start(store)
    await claim(store, ttl=1.0, now=T0)
    ex = await claim(store, worker="w2", ttl=1.0, now=T0 + 2)  # one lost attempt
    await store.wait_step(ex, "approve?", T0 + 2)
    await store.resume_step("wf", 0, True, T0 + 3)
    row = await step(store, 0)
    assert (row.attempt, row.recoveries) == (0, 0)
    result = await store.claim_step("wf", 0, "w3", 1.0, T0 + 3, max_recoveries=0)
    assert isinstance(result, Claimed) and result.recoveries == 0


@pytest.mark.parametrize(("limit", "error"), [(-1, ValueError), (True, TypeError),
                                              (1.5, TypeError), ("3", TypeError)])
async def test_a_bad_max_recoveries_is_refused(
    store: DurableStore, limit: Any, error: type[Exception]
) -> None:
    await start(store)
    with pytest.raises(error, match="max_recoveries"):
        await store.claim_step("wf", 0, "w1", 1.0, T0, max_recoveries=limit)
    assert await store.last_seq() == 1


# ---------------------------------------------------------------- release_dead


async def test_release_dead_takes_a_live_lease_back_with_its_reason(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store, ttl=3600.0, now=T0)
    assert await store.release_dead(ex, T0 + 1, "process 42 on host 'h' is gone")
    event = (await store.load_events("wf"))[-1]
    assert (event.kind, event.worker_id, event.attempt, event.reason) == (
        EventKind.WORKER_RECOVERED, None, 1, "process 42 on host 'h' is gone")
    assert event.data["expired_at"] == T0 + 3600 and event.data["previous_worker"] == "w1"
    row = await step(store, 0)
    assert (row.state, row.attempt, row.recoveries) == (StepState.PENDING, 0, 1)
    assert await store.expired_leases(T0 + 7200) == []
    with pytest.raises(LeaseLostError):  # were it alive after all, fencing refuses it
        await store.complete_step(ex, "late", T0 + 2)
    n = await store.last_seq()
    assert not await store.release_dead(ex, T0 + 2, "again")  # no longer its lease
    assert await store.last_seq() == n
    again = await claim(store, worker="w2", now=T0 + 2)
    assert (again.attempt, again.lease_token) == (1, 2)
    assert (await store.event_rows("wf"))[-2][8] == "process 42 on host 'h' is gone"


async def test_release_dead_refuses_other_leases_and_states(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store, ttl=10.0, now=T0)
    for other in (replace(ex, lease_token=7), replace(ex, worker_id="w2")):
        assert not await store.release_dead(other, T0, "gone")
    await store.complete_step(ex, 1, T0)
    assert not await store.release_dead(ex, T0, "gone")
    with pytest.raises(TypeError):
        await store.release_dead("ex", T0, "gone")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await store.release_dead(ex, T0, None)  # type: ignore[arg-type]
    assert "WorkerRecovered" not in await kinds(store)


async def test_execution_of_a_leased_row_is_its_lease(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store, ttl=10.0, now=T0)
    assert execution_of(await step(store, 0)) == ex


# ---------------------------------------------------------------- retry_workflow


async def _failed_at_b(store: DurableStore) -> None:
    """wf: a completed (output "A"), b failed for good after a retry and a lost attempt."""
    await start(store)
    await run_step(store, output="A")
    await store.fail_step(await claim(store, index=1, ttl=1.0), "error", None, T0, T0)
    await claim(store, index=1, ttl=1.0, now=T0)
    ex = await claim(store, index=1, worker="w2", ttl=1.0, now=T0 + 2)  # one lost attempt
    await store.fail_step(ex, "boom", None, T0 + 2, None)


async def test_retry_runs_a_failed_workflow_again_from_its_failed_step(
    store: DurableStore,
) -> None:
    await _failed_at_b(store)
    before = await step(store, 1)
    assert (before.attempt, before.recoveries, before.lease_token) == (2, 1, 3)
    row = await store.retry_workflow("wf", None, T0 + 5)
    assert (row.state, row.reason) == (WorkflowState.RUNNING, None)
    event = (await store.load_events("wf"))[-1]
    assert (event.kind, event.step_index, event.step_name) == (
        EventKind.WORKFLOW_RETRIED, 1, "b")
    assert event.data == {"from_step": 1, "previous_state": "failed",
                          "previous_reason": "boom"}
    a, b, _ = await store.step_rows("wf")
    assert (a.state, a.output) == (StepState.COMPLETED, "A")  # kept
    assert (b.state, b.attempt, b.recoveries, b.reason, b.error, b.worker_id) == (
        StepState.PENDING, 0, 0, None, None, None)
    assert (b.started_at, b.finished_at, b.retry_at, b.lease_token) == (None, None, None, 3)
    again = await claim(store, index=1, now=T0 + 6)
    assert (again.attempt, again.lease_token) == (1, 4)  # counters anew, tokens go on
    await store.complete_step(again, "B", T0 + 6)
    await run_step(store, index=2, output="C", now=T0 + 7)
    wf = await store.get_workflow("wf")
    assert wf is not None and wf.state is WorkflowState.COMPLETED
    assert (await store.load_events("wf"))[-1].data == {"outputs": ["A", "B", "C"]}


async def test_retry_from_an_earlier_step_runs_the_completed_ones_again(
    store: DurableStore,
) -> None:
    await _failed_at_b(store)
    await store.retry_workflow("wf", 0, T0 + 5)
    rows = await store.step_rows("wf")
    assert [(r.state, r.output) for r in rows] == [(StepState.PENDING, None)] * 3
    assert (await store.load_events("wf"))[-1].step_name == "a"
    ex = await claim(store, index=0, now=T0 + 6)
    assert (ex.attempt, ex.lease_token) == (1, 2)


async def test_retry_of_a_cancelled_workflow_and_a_stale_worker(store: DurableStore) -> None:
    await start(store)
    stale = await claim(store)
    await store.cancel_workflow("wf", "oops", T0 + 1)
    await store.retry_workflow("wf", None, T0 + 2)
    event = (await store.load_events("wf"))[-1]
    assert event.data == {"from_step": 0, "previous_state": "cancelled",
                          "previous_reason": "oops"}
    with pytest.raises(LeaseLostError):  # the cancelled attempt never records
        await store.complete_step(stale, "late", T0 + 3)
    # the revoked lease fences the step from other workers until it expires (or is
    # released): the cancelled body may still run
    assert await store.claim_step("wf", 0, "w2", 10.0, T0 + 3) == HeldByOther(
        "w1", stale.expires_at)
    fresh = await claim(store, worker="w2", now=stale.expires_at + 1)
    assert (fresh.attempt, fresh.lease_token) == (1, 2)
    for late in (store.complete_step(stale, "late", T0 + 4),
                 store.renew_lease(stale, 10.0, T0 + 4)):  # no fence any more: taken over
        with pytest.raises(LeaseLostError):
            await late


async def test_retry_of_a_workflow_cancelled_between_steps_starts_at_its_next_step(
    store: DurableStore,
) -> None:
    await start(store)
    await run_step(store, output="A")
    await store.cancel_workflow("wf", "pause", T0)
    await store.retry_workflow("wf", None, T0)
    assert (await store.load_events("wf"))[-1].data["from_step"] == 1


async def test_retry_refusals_append_nothing(store: DurableStore) -> None:
    with pytest.raises(UnknownWorkflowError, match="'nope'"):
        await store.retry_workflow("nope", None, T0)
    await start(store)
    with pytest.raises(NotRetryableError, match=r"'wf'.*running.*failed or cancelled"):
        await store.retry_workflow("wf", None, T0)
    await store.wait_step(await claim(store), "approve?", T0)
    with pytest.raises(NotRetryableError, match="is waiting"):
        await store.retry_workflow("wf", None, T0)
    await start(store, "done", ["a"])
    await run_step(store, "done")
    with pytest.raises(NotRetryableError, match="'done': it is completed"):
        await store.retry_workflow("done", None, T0)
    await start(store, "f", ["a", "b", "c"])
    await store.fail_step(await claim(store, "f"), "boom", None, T0, None)
    n = await store.last_seq()
    with pytest.raises(NotRetryableError, match=r"from step 'b' \(#1\).*'a' \(#0\), is failed"):
        await store.retry_workflow("f", 1, T0)
    for bad in (3, -1):
        with pytest.raises(UnknownStepError, match=r"3 steps"):
            await store.retry_workflow("f", bad, T0)
    with pytest.raises(TypeError):
        await store.retry_workflow("f", "a", T0)  # type: ignore[arg-type]
    assert await store.last_seq() == n


async def test_exactly_one_of_two_concurrent_retries_wins(store: DurableStore) -> None:
    await start(store)
    await store.fail_step(await claim(store), "boom", None, T0, None)
    results = await asyncio.gather(
        store.retry_workflow("wf", None, T0), store.retry_workflow("wf", None, T0),
        return_exceptions=True,
    )
    assert sum(isinstance(r, NotRetryableError) for r in results) == 1
    assert (await kinds(store)).count("WorkflowRetried") == 1


async def test_the_projection_after_crashes_and_retries_is_a_replay(store: DurableStore) -> None:
    await _failed_at_b(store)
    await store.retry_workflow("wf", None, T0 + 5)
    await claim(store, index=1, ttl=1.0, now=T0 + 5)
    [expired] = await store.expired_leases(T0 + 7)
    await store.release_expired(expired, T0 + 7)
    await start(store, "dead")
    await store.release_dead(await claim(store, "dead", ttl=1.0), T0, "gone")
    live_steps, live_workflows = await store.step_rows(), await store.workflows()
    replayed = replay(await store.load_events())
    assert [rows.workflow for _, rows in replayed] == live_workflows
    assert [s for _, rows in replayed for _, s in sorted(rows.steps.items())] == live_steps
    await store.rebuild_projection()
    assert await store.step_rows() == live_steps


async def test_live_leases_lists_the_live_leases_of_worker_ids_with_a_prefix(
    store: DurableStore,
) -> None:
    """What a serving engine reads to take back a dead sibling's leases (issue 20, fault 8)."""
    holders = {"w1": "h_1:10:aaaaaaaa", "w2": "h_1:11:bbbbbbbb", "w3": "hx1:12:cccccccc",
               "w4": "h_1:13:dddddddd"}
    for i, (wid, holder) in enumerate(holders.items()):
        await store.start_workflow(wid, ["x"], None, T0)
        execution = await claim(store, wid, 0, holder, 30.0 - i)
    await store.complete_step(execution, "done", T0)  # w4's: no longer leased
    leases = await store.live_leases(T0, "h_1:")
    assert [(e.workflow_id, e.worker_id, e.expires_at) for e in leases] == [
        ("w2", "h_1:11:bbbbbbbb", T0 + 29.0), ("w1", "h_1:10:aaaaaaaa", T0 + 30.0)]
    assert [e.workflow_id for e in await store.live_leases(T0 + 29.0, "h_1:")] == ["w2", "w1"]
    assert [e.workflow_id for e in await store.live_leases(T0 + 29.5, "h_1:")] == ["w1"]
    assert [e.workflow_id for e in await store.live_leases(T0, "")] == ["w3", "w2", "w1"]
    assert await store.live_leases(T0, "h") != [] and await store.live_leases(T0, "h%") == []
    with pytest.raises(TypeError, match="worker_prefix"):
        await store.live_leases(T0, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await store.live_leases(float("nan"), "h")
