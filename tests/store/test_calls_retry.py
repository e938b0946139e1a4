"""Durable calls and waits across `retry_workflow`, on every store.

A retry runs a failed or cancelled workflow again from a step; its call rows are not touched
(the log keeps what reached the outside world). A completed call is answered from the log, a
call left started or failed starts again, an answered or timed-out wait keeps its answer, and
a wait that the cancellation left unanswered is asked again under the same key.
"""

from __future__ import annotations

import pytest

from agentq.errors import EngineError, KeyConflictError
from agentq.events import EventKind
from agentq.store import CallRow, CallState, DurableStore, StepState, WorkflowState
from agentq.store.rules.projection import replay

from .conftest import T0, claim, kinds, start

pytestmark = pytest.mark.timeout(60)


async def rows(store: DurableStore) -> dict[str, CallRow]:
    return {r.key: r for r in await store.calls("wf")}


async def cancel_and_retry(store: DurableStore, now: float) -> None:
    assert await store.cancel_workflow("wf", "stop", now)
    retried = await store.retry_workflow("wf", None, now)
    assert retried.state is WorkflowState.RUNNING


async def assert_replayed(store: DurableStore) -> None:
    [(_, replayed)] = replay(await store.load_events("wf"))
    assert sorted(replayed.calls.values(), key=lambda r: r.first_seq) == await store.calls("wf")
    assert [replayed.steps[i] for i in sorted(replayed.steps)] == await store.step_rows("wf")


async def test_a_retried_workflow_asks_its_unanswered_wait_again(store: DurableStore) -> None:
    await start(store)
    first = await claim(store)
    await store.wait_step(first, "send it?", T0, key="approve", details={"n": 1}, deadline=T0 + 9)
    await cancel_and_retry(store, T0 + 1)
    before = (await rows(store))["approve"]
    assert before.state is CallState.WAITING  # the cancellation left it unanswered
    step = (await store.step_rows("wf"))[0]
    assert (step.state, step.wait_key, step.wait_deadline) == (StepState.PENDING, None, None)

    again = await claim(store, now=T0 + 2)
    assert again.lease_token == first.lease_token + 1
    await store.wait_step(
        again, "send it?", T0 + 2, key="approve", details={"n": 2}, deadline=T0 + 30
    )
    row = (await rows(store))["approve"]
    assert (row.state, row.runs, row.first_seq, row.attempt) == (
        CallState.WAITING, 2, before.first_seq, again.attempt)
    assert (row.details, row.deadline, row.started_at) == ({"n": 2}, T0 + 30, T0 + 2)
    step = (await store.step_rows("wf"))[0]
    assert (step.state, step.wait_key, step.wait_deadline) == (
        StepState.WAITING, "approve", T0 + 30)
    assert not await store.time_out_wait("wf", 0, T0 + 10)  # the old deadline is gone
    await store.resume_step("wf", 0, "yes", T0 + 11, key="approve")
    answered = (await rows(store))["approve"]
    assert (answered.state, answered.output, answered.duration) == (
        CallState.ANSWERED, "yes", 9.0)
    await assert_replayed(store)
    await store.rebuild_projection()
    assert (await rows(store))["approve"] == answered


async def test_an_unanswered_wait_asked_again_keeps_its_question(store: DurableStore) -> None:
    await start(store)
    await store.wait_step(await claim(store), "send it?", T0, key="approve")
    await cancel_and_retry(store, T0 + 1)
    ex = await claim(store, now=T0 + 2)
    n = await store.last_seq()
    with pytest.raises(KeyConflictError, match=r"'approve'.*'send it\?'.*'pay it\?'"):
        await store.wait_step(ex, "pay it?", T0 + 2, key="approve")
    assert await store.last_seq() == n
    with pytest.raises(KeyConflictError, match="durable wait"):
        await store.start_call(ex, "approve", fingerprint=None, lane=None, label=None, now=T0)
    assert await store.last_seq() == n


async def test_an_answered_wait_keeps_its_answer_after_a_retry(store: DurableStore) -> None:
    await start(store, steps=["a", "b"])
    await store.wait_step(await claim(store), "send it?", T0, key="approve")
    await store.resume_step("wf", 0, "yes", T0 + 1)
    ex = await claim(store, now=T0 + 1)
    await store.fail_step(ex, "error", None, T0 + 1, None)  # the workflow fails
    await store.retry_workflow("wf", 0, T0 + 2)
    ex = await claim(store, now=T0 + 2)
    with pytest.raises(KeyConflictError, match=r"asked already.*answered"):
        await store.wait_step(ex, "send it?", T0 + 2, key="approve")
    row = (await rows(store))["approve"]
    assert (row.state, row.output, row.runs) == (CallState.ANSWERED, "yes", 1)


async def test_calls_across_a_retry(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    for key in ("paid", "flaky", "in-doubt"):
        await store.start_call(ex, key, fingerprint="fp", lane=None, label=None, now=T0)
    await store.complete_call(ex, "paid", output=7, usage=None, duration=0.1, now=T0)
    await store.fail_call(ex, "flaky", reason="error", error=None, duration=0.1, now=T0)
    await cancel_and_retry(store, T0 + 1)
    assert {k: r.state for k, r in (await rows(store)).items()} == {
        "paid": CallState.COMPLETED, "flaky": CallState.FAILED, "in-doubt": CallState.STARTED}

    ex = await claim(store, now=T0 + 2)
    with pytest.raises(EngineError, match="completed already"):  # answered from the log
        await store.start_call(ex, "paid", fingerprint="fp", lane=None, label=None, now=T0)
    for key in ("flaky", "in-doubt"):
        await store.start_call(ex, key, fingerprint="fp", lane=None, label=None, now=T0 + 2)
    started = [e for e in await store.load_events("wf") if e.kind is EventKind.CALL_STARTED]
    assert [(e.data["key"], e.data["rerun"]) for e in started][-2:] == [
        ("flaky", False), ("in-doubt", True)]
    assert (await kinds(store))[-5:] == [  # the claim by the fence's own worker ends it
        "WorkflowRetried", "LeaseReleased", "StepStarted", "CallStarted", "CallStarted"]
    await assert_replayed(store)


async def test_a_failed_call_starts_again_under_a_new_fingerprint_others_conflict(
    store: DurableStore,
) -> None:
    """Fixing a failing tool changes its code, so its fingerprint: a failed call (no output to
    answer another call with) starts again under the new one, and the row keeps it; a
    completed call or one in doubt (it may have reached the world with the old values) still
    refuses another fingerprint."""
    await start(store)
    ex = await claim(store)
    for key in ("paid", "flaky", "in-doubt"):
        await store.start_call(ex, key, fingerprint="v1", lane=None, label=None, now=T0)
    await store.complete_call(ex, "paid", output=7, usage=None, duration=0.1, now=T0)
    await store.fail_call(ex, "flaky", reason="error", error=None, duration=0.1, now=T0)
    await cancel_and_retry(store, T0 + 1)
    ex = await claim(store, now=T0 + 2)
    for key in ("paid", "in-doubt"):
        with pytest.raises(KeyConflictError, match="recorded for another call"):
            await store.start_call(ex, key, fingerprint="v2", lane=None, label=None, now=T0 + 2)
    row = await store.start_call(ex, "flaky", fingerprint="v2", lane=None, label=None, now=T0 + 2)
    assert (row.state, row.fingerprint, row.runs) == (CallState.STARTED, "v2", 2)
    await assert_replayed(store)
