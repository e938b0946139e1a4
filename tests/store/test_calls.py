"""The DurableStore contract for durable calls and waits, on every store.

start_call / complete_call / fail_call, keyed wait_step / resume_step, time_out_wait, and the
``calls`` projection they write (rebuilt from the log like ``steps``).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from agentq.codec import MAX_PAYLOAD_BYTES
from agentq.errors import (
    EngineError,
    InvalidKeyError,
    KeyConflictError,
    LeaseLostError,
    NotWaitingError,
    PayloadError,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowClosedError,
)
from agentq.events import EventKind
from agentq.outcomes import ErrorInfo
from agentq.store import (
    AlreadyWaiting,
    CallKind,
    CallRow,
    CallState,
    Claimed,
    DurableStore,
    Execution,
    StepState,
    WorkflowState,
)
from agentq.store.contract.rows import EVENT_COLUMNS, event_row
from agentq.store.rules.projection import replay

from .conftest import T0, claim, kinds, run_step, start

pytestmark = pytest.mark.timeout(60)


async def begin(
    store: DurableStore, ex: Execution, key: str = "k", *, fingerprint: str | None = "fp",
    lane: str | None = "medium", label: dict[str, Any] | None = None, now: float = T0,
) -> CallRow:
    return await store.start_call(
        ex, key, fingerprint=fingerprint, lane=lane, label=label, now=now
    )


async def finish(
    store: DurableStore, ex: Execution, key: str = "k", output: Any = "out", *,
    usage: dict[str, Any] | None = None, duration: float = 0.5, now: float = T0,
) -> CallRow:
    return await store.complete_call(
        ex, key, output=output, usage=usage, duration=duration, now=now
    )


async def one(store: DurableStore, key: str, workflow_id: str = "wf") -> CallRow:
    [row] = [r for r in await store.calls(workflow_id) if r.key == key]
    return row


async def step(store: DurableStore, index: int = 0, workflow_id: str = "wf") -> Any:
    return (await store.step_rows(workflow_id))[index]


async def unchanged(store: DurableStore, n: int) -> None:
    assert await store.last_seq() == n


# ---------------------------------------------------------------- start / complete / fail


async def test_start_records_the_call_before_it_runs(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    label = {"kind": "tool", "tool": "send_email", "args": (1, 2)}
    row = await begin(store, ex, "mail-1", label=label, now=T0 + 1)
    event = (await store.load_events("wf"))[-1]
    assert event.kind is EventKind.CALL_STARTED
    assert (event.step_index, event.step_name, event.attempt, event.worker_id) == (0, "a", 1, "w1")
    assert event.at == datetime.fromtimestamp(T0 + 1, UTC)
    assert event.data == {
        "key": "mail-1", "lane": "medium", "attempt": 1, "fingerprint": "fp", "rerun": False,
        "label": {"kind": "tool", "tool": "send_email", "args": [1, 2]},
    }
    assert row == CallRow(
        "wf", "mail-1", CallKind.CALL, 0, CallState.STARTED, fingerprint="fp", lane="medium",
        attempt=1, label={"kind": "tool", "tool": "send_email", "args": [1, 2]},
        started_at=T0 + 1, runs=1, last_seq=event.seq, first_seq=event.seq,
    )
    assert await store.calls("wf") == [row]
    assert (await step(store)).state is StepState.LEASED  # the step row is untouched
    wf = await store.get_workflow("wf")
    assert wf is not None and (wf.state, wf.last_seq, wf.updated_at) == (
        WorkflowState.RUNNING, event.seq, T0 + 1)


async def test_complete_records_the_output_with_label_and_lane(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex, label={"tool": "t"}, now=T0 + 1)
    row = await finish(
        store, ex, output={"ids": (1, 2), "text": "é"}, usage={"tokens": 12, "cost": 0.25},
        duration=1.5, now=T0 + 2,
    )
    event = (await store.load_events("wf"))[-1]
    assert event.kind is EventKind.CALL_COMPLETED and event.attempt == 1
    assert event.data == {
        "key": "k", "output": {"ids": [1, 2], "text": "é"}, "duration": 1.5,
        "usage": {"tokens": 12, "cost": 0.25}, "label": {"tool": "t"}, "lane": "medium",
        "attempt": 1,
    }
    assert event.output == {"ids": [1, 2], "text": "é"}
    assert (row.state, row.output, row.usage, row.duration) == (
        CallState.COMPLETED, {"ids": [1, 2], "text": "é"}, {"tokens": 12, "cost": 0.25}, 1.5)
    assert (row.started_at, row.finished_at, row.runs, row.last_seq) == (
        T0 + 1, T0 + 2, 1, event.seq)
    assert await store.calls("wf") == [row]


async def test_fail_then_start_again_is_not_a_rerun(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex)
    error = ErrorInfo("TimeoutError", "slow", "Traceback…")
    row = await store.fail_call(
        ex, "k", reason="timeout", error=error, duration=30.0, now=T0 + 30
    )
    event = (await store.load_events("wf"))[-1]
    assert event.kind is EventKind.CALL_FAILED and event.reason == "timeout"
    assert event.data["error"] == error.to_dict() and event.data["duration"] == 30.0
    assert (row.state, row.reason, row.error, row.duration, row.finished_at) == (
        CallState.FAILED, "timeout", error, 30.0, T0 + 30)
    again = await begin(store, ex, now=T0 + 31)
    assert (await store.load_events("wf"))[-1].data["rerun"] is False
    assert (again.state, again.runs, again.reason, again.error, again.finished_at) == (
        CallState.STARTED, 2, None, None, None)
    assert again.first_seq == row.first_seq and again.started_at == T0 + 31
    done = await finish(store, ex, output=None, now=T0 + 32)
    assert (done.state, done.output, done.usage) == (CallState.COMPLETED, None, None)


async def test_a_start_that_never_finished_runs_again_as_a_rerun(store: DurableStore) -> None:
    await start(store)
    crashed = await claim(store, ttl=5.0)
    await begin(store, crashed, "charge")
    ex = await claim(store, worker="w2", now=T0 + 6)  # the lease expired: taken over
    row = await begin(store, ex, "charge", now=T0 + 6)
    started = [e for e in await store.load_events("wf") if e.kind is EventKind.CALL_STARTED]
    # The attempt lost to the crash is re-admitted under its own number (a crash does not
    # count toward max_attempts), with a new lease token.
    assert [(e.attempt, e.worker_id, e.data["rerun"]) for e in started] == [
        (1, "w1", False), (1, "w2", True)]
    assert ex.lease_token == crashed.lease_token + 1
    assert (row.state, row.runs, row.attempt, row.started_at) == (
        CallState.STARTED, 2, 1, T0 + 6)
    n = await store.last_seq()
    with pytest.raises(LeaseLostError, match="taken over"):  # the crashed attempt, late
        await finish(store, crashed, "charge")
    await unchanged(store, n)
    done = await finish(store, ex, "charge", output="paid", now=T0 + 7)
    assert (done.state, done.output, done.attempt) == (CallState.COMPLETED, "paid", 1)


async def test_a_completed_key_is_answered_from_the_log_never_started(
    store: DurableStore,
) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex)
    await finish(store, ex)
    n = await store.last_seq()
    with pytest.raises(EngineError, match=r"'k' of workflow 'wf' completed already"):
        await begin(store, ex)
    with pytest.raises(KeyConflictError, match="another call"):
        await begin(store, ex, fingerprint="other")
    with pytest.raises(EngineError, match="completed, not started"):
        await finish(store, ex)
    await unchanged(store, n)


async def test_a_key_names_one_call(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex, "k", fingerprint="send(alice)")
    n = await store.last_seq()
    with pytest.raises(KeyConflictError, match=r"'k' of workflow 'wf'.*'send\(alice\)'.*bob"):
        await begin(store, ex, "k", fingerprint="send(bob)")
    await unchanged(store, n)
    row = await begin(store, ex, "k", fingerprint=None)  # None is not compared ...
    assert row.fingerprint == "send(alice)" and row.runs == 2  # ... and keeps the stored one
    await start(store, "other")  # keys are scoped to their workflow
    other = await begin(store, await claim(store, "other"), "k", fingerprint="send(bob)")
    assert (other.workflow_id, other.fingerprint) == ("other", "send(bob)")


async def test_outcomes_need_a_started_call_of_this_step(store: DurableStore) -> None:
    await start(store, steps=["a", "b"])
    ex = await claim(store)
    n = await store.last_seq()
    with pytest.raises(EngineError, match="never started"):
        await finish(store, ex, "nope")
    with pytest.raises(EngineError, match="never started"):
        await store.fail_call(ex, "nope", reason="error", error=None, duration=0, now=T0)
    await begin(store, ex, "k")
    await store.complete_step(ex, None, T0)
    second = await claim(store, index=1)
    n = await store.last_seq()
    with pytest.raises(EngineError, match=r"started by step #0, not by step #1"):
        await finish(store, second, "k")
    await unchanged(store, n)
    row = await begin(store, second, "k")  # a later step may run the key again: a rerun
    assert (row.step_index, row.runs) == (1, 2)
    assert (await store.load_events())[-1].data["rerun"] is True


# ---------------------------------------------------------------- fencing


async def test_a_stale_attempt_records_nothing(store: DurableStore) -> None:
    await start(store)
    old = await claim(store, ttl=1.0)
    await begin(store, old, "a")
    new = await claim(store, worker="w2", now=T0 + 2)
    n = await store.last_seq()
    for call in (
        lambda: begin(store, old, "b"),
        lambda: finish(store, old, "a"),
        lambda: store.fail_call(old, "a", reason="error", error=None, duration=0, now=T0 + 2),
        lambda: store.wait_step(old, "?", T0 + 2, key="w"),
    ):
        with pytest.raises(LeaseLostError, match="taken over"):
            await call()
    await unchanged(store, n)
    assert [r.key for r in await store.calls("wf")] == ["a"]
    await begin(store, new, "b")


async def test_a_released_lease_records_nothing(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store, ttl=1.0)
    await begin(store, ex)
    assert await store.release_expired(ex, T0 + 2)
    n = await store.last_seq()
    with pytest.raises(LeaseLostError, match="no longer holds it"):
        await finish(store, ex)
    with pytest.raises(LeaseLostError):
        await begin(store, ex, "other")
    await unchanged(store, n)
    assert (await one(store, "k")).state is CallState.STARTED


async def test_a_call_running_when_the_workflow_is_cancelled_is_still_recorded(
    store: DurableStore,
) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex, "paid")
    await begin(store, ex, "flaky")
    assert await store.cancel_workflow("wf", "stop", T0 + 1)
    n = await store.last_seq()
    with pytest.raises(WorkflowClosedError, match="'wf' is cancelled"):
        await begin(store, ex, "new")  # nothing new starts in a closed workflow
    with pytest.raises(WorkflowClosedError):
        await store.complete_step(ex, None, T0 + 1)
    await unchanged(store, n)
    row = await finish(store, ex, "paid", output={"receipt": 7}, now=T0 + 2)
    assert (row.state, row.output) == (CallState.COMPLETED, {"receipt": 7})
    failed = await store.fail_call(
        ex, "flaky", reason="cancelled", error=None, duration=1.0, now=T0 + 2
    )
    assert failed.state is CallState.FAILED
    assert (await store.get_workflow("wf")).state is WorkflowState.CANCELLED  # type: ignore[union-attr]
    assert (await step(store)).state is StepState.FAILED


# ---------------------------------------------------------------- keyed waits


async def wait(
    store: DurableStore, key: str | None = "approve-1", *, deadline: float | None = None,
    details: dict[str, Any] | None = None, reason: str = "send it?", now: float = T0,
) -> Execution:
    ex = await claim(store, now=now)
    await store.wait_step(ex, reason, now, key=key, details=details, deadline=deadline)
    return ex


async def test_a_keyed_wait_is_recorded_on_the_step_and_as_a_wait_row(
    store: DurableStore,
) -> None:
    await start(store)
    details = {"tool": "send_email", "args": {"to": "a@b"}}
    await wait(store, details=details, deadline=T0 + 60)
    event = (await store.load_events("wf"))[-1]
    assert event.kind is EventKind.STEP_WAITING and event.attempt == 1
    assert event.data == {
        "reason": "send it?", "key": "approve-1", "details": details, "deadline": T0 + 60}
    s = await step(store)
    assert (s.state, s.reason, s.wait_key, s.wait_details, s.wait_deadline) == (
        StepState.WAITING, "send it?", "approve-1", details, T0 + 60)
    assert await store.calls("wf") == [CallRow(
        "wf", "approve-1", CallKind.WAIT, 0, CallState.WAITING, attempt=1, reason="send it?",
        details=details, deadline=T0 + 60, started_at=T0, runs=1, last_seq=event.seq,
        first_seq=event.seq,
    )]
    assert await store.claim_step("wf", 0, "w2", 10.0, T0 + 1) == AlreadyWaiting("send it?")


async def test_the_step_level_wait_is_unchanged(store: DurableStore) -> None:
    await start(store)
    await wait(store, key=None)
    assert (await store.load_events("wf"))[-1].data == {"reason": "send it?"}
    s = await step(store)
    assert (s.wait_key, s.wait_details, s.wait_deadline) == (None, None, None)
    await store.resume_step("wf", 0, "yes", T0)
    assert (await store.load_events("wf"))[-1].data == {"input": "yes"}
    assert await store.calls("wf") == []


@pytest.mark.parametrize("given", [None, "approve-1"])
async def test_resume_answers_the_wait(store: DurableStore, given: str | None) -> None:
    await start(store)
    await wait(store, deadline=T0 + 60)
    await store.resume_step("wf", 0, {"ok": True}, T0 + 5, key=given)
    event = (await store.load_events("wf"))[-1]
    assert event.kind is EventKind.STEP_RESUMED and event.attempt is None
    assert event.data == {"input": {"ok": True}, "key": "approve-1"}
    row = await one(store, "approve-1")
    assert (row.state, row.output, row.finished_at, row.duration, row.last_seq) == (
        CallState.ANSWERED, {"ok": True}, T0 + 5, 5.0, event.seq)
    s = await step(store)
    assert (s.state, s.attempt, s.resume_input, s.wait_key, s.wait_deadline) == (
        StepState.PENDING, 0, {"ok": True}, None, None)
    claimed = await store.claim_step("wf", 0, "w1", 10.0, T0 + 6)
    assert isinstance(claimed, Claimed) and claimed.execution.attempt == 1


async def test_resume_with_another_key_keeps_the_input_for_that_wait(store: DurableStore) -> None:
    # Before messages, this was refused (NotWaitingError naming both keys); now the input is
    # kept for the wait "approve-2" and the step's current wait is left as it is.
    await start(store)
    await wait(store, "approve-1")
    n = await store.last_seq()
    await store.resume_step("wf", 0, True, T0, key="approve-2")
    assert await store.last_seq() == n + 1
    [kept] = await store.messages("wf")
    assert (kept.topic, kept.key, kept.payload, kept.consumed) == (None, "approve-2", True, False)
    assert (await step(store)).wait_key == "approve-1"  # still waiting on its own wait
    with pytest.raises(NotWaitingError, match="'approve-2': an input for it was given before"):
        await store.resume_step("wf", 0, False, T0, key="approve-2")
    await store.resume_step("wf", 0, True, T0, key="approve-1")
    with pytest.raises(NotWaitingError, match="'approve-1': it is answered before"):
        await store.resume_step("wf", 0, True, T0, key="approve-1")
    with pytest.raises(NotWaitingError, match="it is pending, not waiting"):
        await store.resume_step("wf", 0, True, T0)  # without a key: refused as before
    assert await store.last_seq() == n + 2


async def test_a_wait_key_asks_one_question_once(store: DurableStore) -> None:
    await start(store)
    await wait(store, "approve-1")
    await store.resume_step("wf", 0, "yes", T0)
    ex = await claim(store)
    n = await store.last_seq()
    with pytest.raises(KeyConflictError, match=r"'approve-1'.*asked already.*answered"):
        await store.wait_step(ex, "send it?", T0, key="approve-1")
    with pytest.raises(KeyConflictError, match="asked already"):
        await store.wait_step(ex, "another question", T0, key="approve-1")
    await unchanged(store, n)
    await store.wait_step(ex, "and this?", T0, key="approve-2")  # a new key: a new question
    assert [(r.key, r.state) for r in await store.calls("wf")] == [
        ("approve-1", CallState.ANSWERED), ("approve-2", CallState.WAITING)]


async def test_call_keys_and_wait_keys_never_mix(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex, "call-1")
    n = await store.last_seq()
    with pytest.raises(KeyConflictError, match=r"'call-1'.*durable call's key"):
        await store.wait_step(ex, "?", T0, key="call-1")
    await unchanged(store, n)
    await store.wait_step(ex, "?", T0, key="wait-1")
    await store.resume_step("wf", 0, 1, T0)
    ex = await claim(store)
    with pytest.raises(KeyConflictError, match=r"'wait-1'.*durable wait"):
        await begin(store, ex, "wait-1")
    await unchanged(store, n + 3)  # StepWaiting, StepResumed, StepStarted


async def test_time_out_wait_before_and_after_the_deadline(store: DurableStore) -> None:
    await start(store)
    await wait(store, deadline=T0 + 60)
    n = await store.last_seq()
    assert not await store.time_out_wait("wf", 0, T0 + 59.999)
    await unchanged(store, n)
    assert await store.time_out_wait("wf", 0, T0 + 60)  # the deadline itself has passed
    event = (await store.load_events("wf"))[-1]
    assert event.kind is EventKind.WAIT_TIMED_OUT and event.data == {"key": "approve-1"}
    assert (event.step_index, event.attempt, event.worker_id) == (0, None, None)
    row = await one(store, "approve-1")
    assert (row.state, row.output, row.finished_at, row.duration) == (
        CallState.TIMED_OUT, None, T0 + 60, 60.0)
    s = await step(store)
    assert (s.state, s.attempt, s.reason, s.wait_key, s.resumed) == (
        StepState.PENDING, 0, None, None, False)
    assert (await store.get_workflow("wf")).state is WorkflowState.RUNNING  # type: ignore[union-attr]
    assert not await store.time_out_wait("wf", 0, T0 + 61)  # once
    with pytest.raises(NotWaitingError):
        await store.resume_step("wf", 0, "late", T0 + 61)
    claimed = await store.claim_step("wf", 0, "w1", 10.0, T0 + 61)
    assert isinstance(claimed, Claimed) and claimed.execution.attempt == 1


async def test_a_resume_after_the_deadline_is_refused_whether_or_not_timed_out(
    store: DurableStore,
) -> None:
    # Review 10 #8: before, a late resume was accepted if nobody had timed the wait out yet,
    # and refused ("it is pending, not waiting") if somebody had: it depended on uptime.
    deadline = datetime.fromtimestamp(T0 + 60, UTC).isoformat(timespec="milliseconds")
    words = rf"its wait 'approve-1' timed out at {re.escape(deadline)}"
    await start(store)
    await wait(store, deadline=T0 + 60)
    n = await store.last_seq()
    for key in (None, "approve-1"):  # not timed out yet: refused all the same
        with pytest.raises(NotWaitingError, match=words):
            await store.resume_step("wf", 0, "late", T0 + 60, key=key)
    await unchanged(store, n)
    await store.resume_step("wf", 0, "late", T0 + 60, key="other")  # kept for wait "other"
    n += 1
    assert await store.time_out_wait("wf", 0, T0 + 61)
    with pytest.raises(NotWaitingError, match=words):  # timed out: the same refusal
        await store.resume_step("wf", 0, "late", T0 + 62, key="approve-1")
    await store.claim_step("wf", 0, "w1", 10.0, T0 + 62)
    with pytest.raises(NotWaitingError, match=words):  # the step moved on: still
        await store.resume_step("wf", 0, "late", T0 + 63, key="approve-1")
    await unchanged(store, n + 2)  # WaitTimedOut, StepStarted


async def test_a_resume_just_before_the_deadline_is_accepted(store: DurableStore) -> None:
    await start(store)
    await wait(store, deadline=T0 + 60)
    await store.resume_step("wf", 0, "in time", T0 + 59.999, key="approve-1")
    assert (await one(store, "approve-1")).state is CallState.ANSWERED


async def test_time_out_wait_needs_a_keyed_wait_with_a_deadline(store: DurableStore) -> None:
    await start(store, "plain")
    await store.wait_step(await claim(store, "plain"), "?", T0)
    await start(store, "forever")
    await store.wait_step(await claim(store, "forever"), "?", T0, key="k")
    await start(store, "running")
    await claim(store, "running")
    n = await store.last_seq()
    for wid in ("plain", "forever", "running"):
        assert not await store.time_out_wait(wid, 0, T0 + 10**6)
    await unchanged(store, n)
    await start(store, "cancelled")
    await store.wait_step(await claim(store, "cancelled"), "?", T0, key="k", deadline=T0)
    await store.cancel_workflow("cancelled", "stop", T0)
    n = await store.last_seq()
    assert not await store.time_out_wait("cancelled", 0, T0 + 1)
    await unchanged(store, n)
    with pytest.raises(UnknownWorkflowError):
        await store.time_out_wait("nope", 0, T0)
    with pytest.raises(UnknownStepError):
        await store.time_out_wait("plain", 5, T0)


async def test_a_resume_and_a_time_out_racing_one_wins(store: DurableStore) -> None:
    await start(store)
    await wait(store, deadline=T0)
    results = await asyncio.gather(
        store.time_out_wait("wf", 0, T0 + 1),
        store.resume_step("wf", 0, "yes", T0 + 1),
        return_exceptions=True,
    )
    timed_out = results[0] is True
    assert timed_out == isinstance(results[1], NotWaitingError)
    assert (await one(store, "approve-1")).state is (
        CallState.TIMED_OUT if timed_out else CallState.ANSWERED)


async def test_cancel_ends_a_keyed_wait_and_leaves_the_rows(store: DurableStore) -> None:
    await start(store)
    await wait(store, deadline=T0 + 60, details={"x": 1})
    await store.cancel_workflow("wf", "stop", T0 + 1)
    s = await step(store)
    assert (s.state, s.reason, s.wait_key, s.wait_details, s.wait_deadline) == (
        StepState.FAILED, "cancelled", None, None, None)
    assert (await one(store, "approve-1")).state is CallState.WAITING  # never answered
    with pytest.raises(WorkflowClosedError):
        await store.resume_step("wf", 0, "late", T0 + 2, key="approve-1")


# ---------------------------------------------------------------- argument checks

BAD_KEYS = [
    pytest.param("", InvalidKeyError, id="empty"),
    pytest.param("x" * 1025, InvalidKeyError, id="too-long"),
    pytest.param("é" * 513, InvalidKeyError, id="too-many-bytes"),
    pytest.param("a\ud83d", InvalidKeyError, id="surrogate"),
    pytest.param(7, TypeError, id="int"),
]


@pytest.mark.parametrize(("key", "error"), BAD_KEYS)
async def test_bad_keys_are_refused_before_anything_is_written(
    store: DurableStore, key: Any, error: type[Exception]
) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex, "ok")
    n = await store.last_seq()
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: begin(store, ex, key),
        lambda: finish(store, ex, key),
        lambda: store.fail_call(ex, key, reason="e", error=None, duration=0, now=T0),
        lambda: store.wait_step(ex, "?", T0, key=key),
        lambda: store.resume_step("wf", 0, None, T0, key=key),
    ]
    for call in calls:
        with pytest.raises(error, match="key"):
            await call()
    await unchanged(store, n)
    assert (await step(store)).state is StepState.LEASED


async def test_keys_are_byte_exact(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    keys = ["café", "cafe\u0301", "k", "k ", "a\x00b", "🦜", "x" * 1024]
    for i, key in enumerate(keys):
        await begin(store, ex, key, fingerprint=str(i))
    assert [(r.key, r.fingerprint) for r in await store.calls("wf")] == [
        (k, str(i)) for i, k in enumerate(keys)]


BAD_OBJECTS = [
    pytest.param([1, 2], TypeError, "list", id="list"),
    pytest.param("text", TypeError, "str", id="str"),
    pytest.param({1: "x"}, PayloadError, "int", id="non-str-key"),
    pytest.param({"s": {1, 2}}, PayloadError, "set", id="set"),
    pytest.param({"x": math.nan}, PayloadError, "nan", id="nan"),
    pytest.param({"s": "\udc80"}, PayloadError, "surrogate", id="surrogate"),
]


@pytest.mark.parametrize(("value", "error", "named"), BAD_OBJECTS)
async def test_label_usage_and_details_must_be_json_objects(
    store: DurableStore, value: Any, error: type[Exception], named: str
) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex, "ok")
    n = await store.last_seq()
    with pytest.raises(error, match=f"label.*{named}|{named}.*label"):
        await begin(store, ex, "k", label=value)
    with pytest.raises(error, match=f"usage.*{named}|{named}.*usage"):
        await finish(store, ex, "ok", usage=value)
    with pytest.raises(error, match=f"details.*{named}|{named}.*details"):
        await store.wait_step(ex, "?", T0, key="w", details=value)
    await unchanged(store, n)
    assert (await one(store, "ok")).state is CallState.STARTED


BAD_OUTPUTS = [
    pytest.param({"ids": {1, 2}}, "set", id="set"),
    pytest.param({"raw": b"\x00"}, "bytes", id="bytes"),
    pytest.param({"at": datetime(2026, 1, 1, tzinfo=UTC)}, "datetime", id="datetime"),
    pytest.param([math.inf], "inf", id="inf"),
    pytest.param({1: "x"}, "int", id="non-str-key"),
    pytest.param("x" * (MAX_PAYLOAD_BYTES + 1), "limit", id="too-large"),
]


@pytest.mark.parametrize(("value", "named"), BAD_OUTPUTS)
async def test_a_non_json_output_writes_nothing_and_the_call_can_fail(
    store: DurableStore, value: Any, named: str
) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex)
    n = await store.last_seq()
    with pytest.raises(PayloadError, match=named) as info:
        await finish(store, ex, output=value)
    assert info.value.field.startswith("output")
    await unchanged(store, n)
    assert (await one(store, "k")).state is CallState.STARTED
    row = await store.fail_call(
        ex, "k", reason=f"payload: {info.value}", error=None, duration=0.1, now=T0
    )
    assert row.state is CallState.FAILED and row.reason is not None
    assert row.reason.startswith("payload: output")
    with pytest.raises(PayloadError, match=named):
        await store.resume_step("wf", 0, value, T0)  # resume inputs too, checked first


@pytest.mark.parametrize(
    ("duration", "error"),
    [(-1, ValueError), (math.nan, ValueError), (math.inf, ValueError), ("1", TypeError),
     (True, TypeError), (None, TypeError)],
)
async def test_a_bad_duration_is_refused(
    store: DurableStore, duration: Any, error: type[Exception]
) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex)
    n = await store.last_seq()
    with pytest.raises(error, match="duration"):
        await finish(store, ex, duration=duration)
    with pytest.raises(error, match="duration"):
        await store.fail_call(ex, "k", reason="e", error=None, duration=duration, now=T0)
    await unchanged(store, n)


async def test_other_bad_arguments_are_refused(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    n = await store.last_seq()
    for deadline, error in ((math.nan, ValueError), (math.inf, ValueError), ("soon", TypeError)):
        with pytest.raises(error, match="deadline"):
            await store.wait_step(ex, "?", T0, key="w", deadline=deadline)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="give a key"):
        await store.wait_step(ex, "?", T0, details={"a": 1})
    with pytest.raises(ValueError, match="give a key"):
        await store.wait_step(ex, "?", T0, deadline=T0 + 1)
    with pytest.raises(TypeError, match="fingerprint"):
        await begin(store, ex, fingerprint=b"fp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fingerprint"):
        await begin(store, ex, fingerprint="x\udc80")
    with pytest.raises(InvalidKeyError, match="lane"):
        await begin(store, ex, lane="")
    with pytest.raises(TypeError, match="error"):
        await store.fail_call(ex, "k", reason="e", error="boom", duration=0, now=T0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Execution"):
        await begin(store, "wf")  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError)):
        await begin(store, ex, now=math.nan)
    await unchanged(store, n)
    assert await store.calls("wf") == []


async def test_failure_reasons_are_always_storable(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex)
    error = ErrorInfo("E", "bad \ud83d \x00", "t" * 70_000)
    row = await store.fail_call(
        ex, "k", reason="why \udc80\x00", error=error, duration=0, now=T0
    )
    assert row.reason == "why \\udc80\\x00"
    assert row.error is not None and row.error.message == "bad \\ud83d \\x00"
    assert row.error == (await one(store, "k")).error


# ---------------------------------------------------------------- reads and projection


async def test_calls_are_listed_in_first_record_order(store: DurableStore) -> None:
    await start(store, "one", ["a", "b"])
    await start(store, "two")
    ex = await claim(store, "one")
    for key in ("z", "a", "m"):
        await begin(store, ex, key)
    await finish(store, ex, "a")
    await store.fail_call(ex, "z", reason="e", error=None, duration=0, now=T0)
    await begin(store, ex, "z")  # started again: keeps its place
    await begin(store, await claim(store, "two"), "b")
    await finish(store, ex, "m")
    await store.complete_step(ex, None, T0)
    await begin(store, await claim(store, "one", 1), "y")
    assert [r.key for r in await store.calls("one")] == ["z", "a", "m", "y"]
    assert [r.key for r in await store.calls("one", 1)] == ["y"]
    assert [r.key for r in await store.calls("one", step_index=0)] == ["z", "a", "m"]
    assert [(r.workflow_id, r.key) for r in await store.calls()] == [
        ("one", "z"), ("one", "a"), ("one", "m"), ("two", "b"), ("one", "y")]
    assert [r.key for r in await store.calls(step_index=1)] == ["y"]
    assert await store.calls("nope") == []
    with pytest.raises(TypeError):
        await store.calls("one", "0")  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError):
        await store.calls("")


async def test_calls_returns_copies(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex, label={"tags": [1]})
    await finish(store, ex, output={"list": [1]})
    row = await one(store, "k")
    assert row.output is not None and row.label is not None
    row.output["list"].append(2)
    row.label["tags"].append(2)
    again = await one(store, "k")
    assert (again.output, again.label) == ({"list": [1]}, {"tags": [1]})


async def test_event_rows_show_call_outputs_and_failure_reasons(store: DurableStore) -> None:
    await start(store)
    ex = await claim(store)
    await begin(store, ex, "a", label={"kind": "tool", "tool": "<search>", "n": [1, 2.5]})
    await finish(store, ex, "a", output={"x": [1, 2.5]})
    await begin(store, ex, "b")
    await store.fail_call(ex, "b", reason="timeout", error=None, duration=1, now=T0)
    await store.wait_step(ex, "ok?", T0, key="w", deadline=T0)
    await store.time_out_wait("wf", 0, T0)
    rows = await store.event_rows("wf")
    assert rows == [event_row(e) for e in await store.load_events("wf")]
    by_kind = {r[5]: dict(zip(EVENT_COLUMNS, r, strict=True)) for r in rows}
    assert by_kind["CallCompleted"]["output"] == '{"x":[1,2.5]}'
    assert by_kind["CallFailed"]["reason"] == "timeout"
    assert by_kind["CallStarted"]["output"] is None and by_kind["WaitTimedOut"]["reason"] is None
    # The key of every call and keyed-wait event, and the call's label, as their own columns.
    assert [(r[5], r[11]) for r in rows if r[11] is not None] == [
        ("CallStarted", "a"), ("CallCompleted", "a"), ("CallStarted", "b"), ("CallFailed", "b"),
        ("StepWaiting", "w"), ("WaitTimedOut", "w"),
    ]
    labels = [r[12] for r in rows if r[5] in ("CallStarted", "CallCompleted")]
    assert labels == ['{"kind":"tool","tool":"<search>","n":[1,2.5]}'] * 2 + [None]
    assert all(r[12] is None for r in rows if not r[5].startswith("Call"))


async def test_event_rows_without_a_keyed_wait_have_no_key(store: DurableStore) -> None:
    await start(store)
    await store.wait_step(await claim(store), "ok?", T0)
    await store.resume_step("wf", 0, {"yes": True}, T0)
    rows = await store.event_rows("wf")
    assert rows == [event_row(e) for e in await store.load_events("wf")]
    assert [r[11] for r in rows] == [None] * len(rows)


async def test_the_calls_projection_is_a_replay_of_the_log(store: DurableStore) -> None:
    await start(store, "calls", ["a", "b"])
    crashed = await claim(store, "calls", ttl=1.0)
    await begin(store, crashed, "c1", label={"tool": "t"})
    await finish(store, crashed, "c1", usage={"tokens": 3})
    await begin(store, crashed, "c2")
    ex = await claim(store, "calls", worker="w2", now=T0 + 2)
    await begin(store, ex, "c2", now=T0 + 2)
    await store.fail_call(ex, "c2", reason="e", error=ErrorInfo("E", "m", "t"), duration=1,
                          now=T0 + 3)
    await store.wait_step(ex, "ok?", T0 + 3, key="w1", details={"d": [1]}, deadline=T0 + 9)
    await store.resume_step("calls", 0, {"yes": 1}, T0 + 4)
    ex = await claim(store, "calls", now=T0 + 5)
    await store.wait_step(ex, "again?", T0 + 5, key="w2", deadline=T0 + 6)
    await store.time_out_wait("calls", 0, T0 + 7)
    ex = await claim(store, "calls", now=T0 + 8)
    await store.wait_step(ex, "still?", T0 + 8, key="w3", details={"n": 3}, deadline=T0 + 99)
    await start(store, "plain", ["a"])
    await run_step(store, "plain")

    live_calls, live_steps = await store.calls(), await store.step_rows()
    live_workflows = await store.workflows()
    replayed = replay(await store.load_events())
    assert [c for _, rows in replayed for c in rows.calls.values()] == live_calls
    assert [s for _, rows in replayed for _, s in sorted(rows.steps.items())] == live_steps
    assert [rows.workflow for _, rows in replayed] == live_workflows
    assert live_steps[0].wait_key == "w3" and live_steps[0].wait_details == {"n": 3}
    await store.rebuild_projection()
    assert await store.calls() == live_calls
    assert await store.step_rows() == live_steps
    assert await store.workflows() == live_workflows
    await store.resume_step("calls", 0, "go", T0 + 10, key="w3")  # still works after it
    assert (await one(store, "w3", "calls")).state is CallState.ANSWERED


async def test_thousands_of_calls_in_one_step(store: DurableStore) -> None:
    await start(store, steps=["a"])
    ex = await claim(store, ttl=3600.0)
    count = 2_000
    for i in range(count):
        await begin(store, ex, f"call-{i}", fingerprint=f"f{i}", label={"i": i})
        await finish(store, ex, f"call-{i}", output={"i": i}, now=T0 + i / 1000)
    rows = await store.calls("wf")
    assert [r.key for r in rows] == [f"call-{i}" for i in range(count)]
    assert all(r.state is CallState.COMPLETED and r.output == {"i": i}
               for i, r in enumerate(rows))
    await store.complete_step(ex, len(rows), T0 + 3)
    assert (await kinds(store))[-2:] == ["StepCompleted", "WorkflowCompleted"]
    replayed = replay(await store.load_events())
    assert list(replayed[0][1].calls.values()) == rows
