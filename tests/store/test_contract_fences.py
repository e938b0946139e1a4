"""Fences, on every store: a lease a cancel revoked keeps other workers off its step.

A cancel revokes the running step's lease, but the attempt's body may run on until its worker
notices (its next renewal). The revoked lease fences the step (failed, then pending after a
retry) until `LeaseReleased` (its worker handed it back once the body stopped, or is gone) or
until the lease's expiry, as renewed and recorded by the cancel (``fenced_until``). Both are
in the log, so the projection stays a replay of it (issue 20, item 5).
"""

from __future__ import annotations

from typing import Any

import pytest

from agentq.errors import EngineError, LeaseLostError
from agentq.events import EventKind
from agentq.store import (
    CANCEL_HANDED_BACK_REASON,
    HANDED_BACK_REASON,
    CallState,
    Claimed,
    DurableStore,
    Execution,
    HeldByOther,
    StepState,
    WorkflowState,
)
from agentq.store.rules.lease import EXPIRED_REASON
from agentq.store.rules.projection import replay

from .conftest import T0, claim, kinds

pytestmark = pytest.mark.timeout(30)


async def cancelled_and_retried(store: DurableStore) -> Execution:
    """A one-step workflow of definition "d": claimed by w1 (lease until T0 + 10), cancelled
    at T0 + 1, retried at T0 + 2; return w1's (revoked) execution."""
    _, created = await store.start_workflow("wf", ["a"], None, T0, definition="d")
    assert created
    ex = await claim(store)
    assert await store.cancel_workflow("wf", "stop", T0 + 1)
    await store.retry_workflow("wf", None, T0 + 2)
    return ex


async def assert_a_replay(store: DurableStore) -> None:
    """The projection equals a replay of the log, and a rebuild leaves it as it is."""
    live_steps, live_workflows = await store.step_rows(), await store.workflows()
    replayed = replay(await store.load_events())
    assert [rows.workflow for _, rows in replayed] == live_workflows
    assert [s for _, rows in replayed for _, s in sorted(rows.steps.items())] == live_steps
    await store.rebuild_projection()
    assert (await store.step_rows(), await store.workflows()) == (live_steps, live_workflows)


async def ready(store: DurableStore, now: float, steps: tuple[str, ...] = ("a",)) -> list[str]:
    """The ids of the ready instances of definition "d" (of `steps`)."""
    return [r.workflow.workflow_id for r in await store.ready_workflows(now, {"d": steps}, 10)]


@pytest.mark.parametrize("lifted_by", ["hand_back", "a_dead_worker", "expiry"])
async def test_a_lease_a_cancel_revoked_fences_a_retried_step_from_other_workers(
    store: DurableStore, lifted_by: str
) -> None:
    ex = await cancelled_and_retried(store)
    s = (await store.step_rows("wf"))[0]
    assert (s.state, s.worker_id, s.lease_expires_at) == (StepState.PENDING, "w1", ex.expires_at)
    assert await store.claim_step("wf", 0, "w2", 10.0, T0 + 3) == HeldByOther("w1", ex.expires_at)
    assert await ready(store, T0 + 3) == []
    assert await store.expired_leases(ex.expires_at + 1) == []  # a fence is no lease
    await assert_a_replay(store)
    if lifted_by == "expiry":
        now = ex.expires_at + 1
        assert await ready(store, ex.expires_at) == []  # live while now <= expires_at
    else:
        now = T0 + 4
        reason = HANDED_BACK_REASON if lifted_by == "hand_back" else "its process is gone"
        assert await store.release_dead(ex, now, reason)
        event = (await store.load_events("wf"))[-1]
        assert (event.kind, event.step_index, event.worker_id, event.attempt) == (
            "LeaseReleased", 0, "w1", None)
        if lifted_by == "hand_back":  # its own worker's: it says the cancel interrupted it
            reason = CANCEL_HANDED_BACK_REASON
        assert event.data == {"lease_token": ex.lease_token, "reason": reason}
        assert event.reason == reason
        assert not await store.release_dead(ex, now, reason)  # once: nothing more recorded
        assert (await kinds(store)).count("LeaseReleased") == 1
        await assert_a_replay(store)
    assert await ready(store, now) == ["wf"]
    got = await store.claim_step("wf", 0, "w2", 10.0, now)
    assert isinstance(got, Claimed) and (got.execution.worker_id, got.recoveries) == ("w2", 0)
    assert "WorkerRecovered" not in await kinds(store)
    events = await store.load_events("wf")
    assert [str(e.kind) for e in events].count("LeaseReleased") == 1  # lease #1 ends once
    if lifted_by == "expiry":  # the claim ends the expired fence in the log
        assert [str(e.kind) for e in events[-2:]] == ["LeaseReleased", "StepStarted"]
        assert events[-2].data == {"lease_token": ex.lease_token, "reason": EXPIRED_REASON}
    with pytest.raises(LeaseLostError):  # the revoked lease stays revoked
        await store.complete_step(ex, "late", now)
    await assert_a_replay(store)


async def test_the_fence_is_the_renewed_lease_and_a_replay_fences_alike(
    store: DurableStore,
) -> None:
    """A renewal is not logged, so the cancel records the lease's expiry as renewed: a replay
    (and a rebuilt projection) fences until the same time as the live projection."""
    _, created = await store.start_workflow("wf", ["a"], None, T0, definition="d")
    assert created
    ex = await claim(store)  # until T0 + 10
    renewed = await store.renew_lease(ex, 30.0, T0 + 5)  # until T0 + 35
    assert await store.cancel_workflow("wf", "stop", T0 + 6)
    cancel = (await store.load_events("wf"))[-1]
    assert cancel.data == {"reason": "stop", "fenced_until": T0 + 35}
    await assert_a_replay(store)
    await store.retry_workflow("wf", None, T0 + 7)
    await assert_a_replay(store)
    assert await store.claim_step("wf", 0, "w2", 10.0, T0 + 20) == HeldByOther("w1", T0 + 35)
    assert await ready(store, T0 + 35) == [] and await ready(store, T0 + 36) == ["wf"]
    assert await store.release_dead(renewed, T0 + 20, HANDED_BACK_REASON)
    await assert_a_replay(store)
    assert isinstance(await store.claim_step("wf", 0, "w2", 10.0, T0 + 20), Claimed)


async def test_a_hand_back_before_the_retry_lifts_the_fence_of_the_cancelled_step(
    store: DurableStore,
) -> None:
    """The common order: the body stops, its worker hands the lease back; a later retry
    finds the step free at once."""
    _, created = await store.start_workflow("wf", ["a"], None, T0, definition="d")
    assert created
    ex = await claim(store)
    assert await store.cancel_workflow("wf", "stop", T0 + 1)
    assert await store.release_dead(ex, T0 + 2, HANDED_BACK_REASON)
    s = (await store.step_rows("wf"))[0]
    assert (s.state, s.reason, s.lease_expires_at) == (StepState.FAILED, "cancelled", None)
    row = await store.get_workflow("wf")
    assert row is not None and row.state is WorkflowState.CANCELLED  # still: no reopening
    await store.retry_workflow("wf", None, T0 + 3)
    assert await ready(store, T0 + 3) == ["wf"]
    assert isinstance(await store.claim_step("wf", 0, "w2", 10.0, T0 + 3), Claimed)
    await assert_a_replay(store)


async def test_only_the_revoked_lease_lifts_its_fence(store: DurableStore) -> None:
    """Another worker's execution, or an older lease of the same worker, lifts nothing; the
    fence's own worker may claim the step again (its engine waits for its old body)."""
    ex = await cancelled_and_retried(store)
    n = await store.last_seq()
    others: list[Any] = [
        Execution(ex.workflow_id, 0, ex.step_name, "w2", ex.lease_token, 1, ex.expires_at),
        Execution(ex.workflow_id, 0, ex.step_name, "w1", ex.lease_token - 1, 1, ex.expires_at),
    ]
    for other in others:
        assert not await store.release_dead(other, T0 + 3, HANDED_BACK_REASON)
        assert not await store.release_expired(other, ex.expires_at + 1)
    assert not await store.release_expired(ex, ex.expires_at + 1)  # no lease: a fence
    assert await store.last_seq() == n
    got = await store.claim_step("wf", 0, "w1", 10.0, T0 + 3)
    assert isinstance(got, Claimed) and got.execution.lease_token == ex.lease_token + 1
    assert not await store.release_dead(ex, T0 + 4, HANDED_BACK_REASON)  # no longer a fence
    # the claim ended the revoked lease in the log first: its worker claims only once its
    # old body has stopped
    assert (await kinds(store))[-2:] == ["LeaseReleased", "StepStarted"]
    released = (await store.load_events("wf"))[-2]
    assert released.data == {"lease_token": ex.lease_token, "reason": CANCEL_HANDED_BACK_REASON}
    assert released.worker_id == "w1"
    await assert_a_replay(store)
    await assert_a_replay(store)


async def test_a_cancel_between_steps_or_during_a_wait_fences_nothing(
    store: DurableStore,
) -> None:
    _, created = await store.start_workflow("wf", ["a", "b"], None, T0, definition="d")
    assert created
    ex = await claim(store)
    await store.wait_step(ex, "input?", T0 + 1)
    assert await store.cancel_workflow("wf", "stop", T0 + 2)
    assert (await store.load_events("wf"))[-1].data == {"reason": "stop"}
    await store.retry_workflow("wf", None, T0 + 3)
    assert await ready(store, T0 + 3, ("a", "b")) == ["wf"]
    await assert_a_replay(store)


async def test_a_call_of_the_old_body_that_ends_after_the_retry_is_still_recorded(
    store: DurableStore,
) -> None:
    """A durable call running when the workflow was cancelled keeps its outcome even if the
    workflow was retried meanwhile (the fence: nobody else has run the step since), so the
    retried step answers it from the log rather than making it twice."""
    _, created = await store.start_workflow("wf", ["a"], None, T0, definition="d")
    assert created
    ex = await claim(store)
    await store.start_call(ex, "charge", fingerprint=None, lane=None, label=None, now=T0)
    assert await store.cancel_workflow("wf", "stop", T0 + 1)
    await store.retry_workflow("wf", None, T0 + 2)
    row = await store.complete_call(
        ex, "charge", output={"receipt": 7}, usage=None, duration=3.0, now=T0 + 3
    )
    assert (row.state, row.output) == (CallState.COMPLETED, {"receipt": 7})
    assert await store.release_dead(ex, T0 + 4, HANDED_BACK_REASON)
    got = await store.claim_step("wf", 0, "w2", 10.0, T0 + 4)
    assert isinstance(got, Claimed)
    with pytest.raises(EngineError, match="charge"):  # answered from the log, never rerun
        await store.start_call(
            got.execution, "charge", fingerprint=None, lane=None, label=None, now=T0 + 5
        )
    with pytest.raises(LeaseLostError):  # once another claim took the step, no more
        await store.fail_call(ex, "charge", reason="late", error=None, duration=1.0, now=T0 + 5)
    await assert_a_replay(store)


async def test_its_worker_renews_a_fence_until_it_hands_it_back(store: DurableStore) -> None:
    """Review A #1: the body a cancel interrupted may run on for longer than the lease:
    its worker renews the fence (told ``revoked``) and no other worker claims the step until
    it hands the lease back; another worker's renewal, or one after the hand-back, is
    refused."""
    ex = await cancelled_and_retried(store)  # fenced until T0 + 10
    n = await store.last_seq()
    fence = ex
    for now in (T0 + 8, T0 + 16, T0 + 24):
        fence = await store.renew_lease(fence, 10.0, now)
        assert (fence.revoked, fence.expires_at) == (True, now + 10)
        assert await store.claim_step("wf", 0, "w2", 10.0, now + 5) == HeldByOther("w1", now + 10)
        assert await ready(store, now + 5) == []
    assert await store.last_seq() == n  # a renewal logs nothing
    other = Execution(ex.workflow_id, 0, ex.step_name, "w2", ex.lease_token, 1, ex.expires_at)
    with pytest.raises(LeaseLostError):
        await store.renew_lease(other, 10.0, T0 + 25)
    assert await store.release_dead(fence, T0 + 30, HANDED_BACK_REASON)
    with pytest.raises(LeaseLostError):
        await store.renew_lease(fence, 10.0, T0 + 31)
    assert isinstance(await store.claim_step("wf", 0, "w2", 10.0, T0 + 31), Claimed)
    await assert_a_replay(store)


async def test_live_leases_lists_the_fence_of_a_retried_step_until_it_is_lifted(
    store: DurableStore,
) -> None:
    """A serving engine reads the fences too, to lift a gone holder's at once (review F7)."""
    stale = await cancelled_and_retried(store)
    _, created = await store.start_workflow("kept", ["a"], None, T0)  # cancelled, not retried
    assert created
    await claim(store, "kept", 0, "w1:2")
    await store.cancel_workflow("kept", "stop", T0 + 1)
    [fence] = await store.live_leases(T0 + 3, "w1")
    assert (fence.workflow_id, fence.lease_token, fence.worker_id, fence.revoked) == (
        "wf", stale.lease_token, "w1", True)
    assert fence.attempt == 1 and fence.expires_at >= T0 + 3  # "kept" is cancelled: not listed
    assert await store.live_leases(T0 + 3, "w2") == []
    assert await store.release_dead(fence, T0 + 4, "gone")  # LeaseReleased lifts it
    assert (await store.load_events("wf"))[-1].kind is EventKind.LEASE_RELEASED
    assert await store.live_leases(T0 + 4, "w1") == []
    assert isinstance(await store.claim_step("wf", 0, "w2", 10.0, T0 + 4), Claimed)
