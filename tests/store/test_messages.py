"""The DurableStore contract for messages, on every store: send_message, a receive's wait
(wait_step with a topic) taking a kept message, a send delivering to a waiting receive, an
early resume's input kept for its wait, and the ``messages`` projection rebuilt from the log.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentq.errors import (
    InvalidKeyError,
    PayloadError,
    UnknownWorkflowError,
    WorkflowClosedError,
)
from agentq.events import EventKind
from agentq.store import CallState, Claimed, DurableStore, StepState, WorkflowState
from agentq.store.contract.messages import MessageRow, Sent

from .conftest import T0, claim, kinds, start

pytestmark = pytest.mark.timeout(60)

REASON = "waiting for a message on go"


async def receive(
    store: DurableStore, key: str = "receive:0:go:0", topic: str = "go", *,
    deadline: float | None = None, now: float = T0,
) -> Any:
    """Claim step 0 and park it on a receive of `topic`; return the workflow row."""
    ex = await claim(store, now=now)
    return await store.wait_step(ex, REASON, now, key=key, deadline=deadline, topic=topic)


async def test_a_message_sent_before_the_receive_is_kept_then_taken_by_the_wait(
    store: DurableStore,
) -> None:
    await start(store)
    sent = await store.send_message("wf", "go", {"n": 1}, T0 + 1)
    assert sent.sent and sent.seq is not None and sent.delivered_to is None
    assert await store.messages("wf") == [
        MessageRow("wf", sent.seq, "go", None, {"n": 1}, T0 + 1)
    ]
    wf = await receive(store, now=T0 + 2)
    assert wf.state is WorkflowState.RUNNING  # answered in the same transaction
    assert (await kinds(store))[-3:] == ["StepStarted", "StepWaiting", "StepResumed"]
    resumed = (await store.load_events("wf"))[-1]
    assert resumed.data == {"input": {"n": 1}, "key": "receive:0:go:0", "message": sent.seq}
    [row] = await store.calls("wf")
    assert (row.state, row.output, row.label) == (CallState.ANSWERED, {"n": 1}, {"topic": "go"})
    [message] = await store.messages("wf")
    assert (message.consumed_by, message.consumed_at) == ("receive:0:go:0", T0 + 2)
    step = (await store.step_rows("wf"))[0]
    assert (step.state, step.resume_input, step.wait_key) == (StepState.PENDING, {"n": 1}, None)
    claimed = await store.claim_step("wf", 0, "w1", 10.0, T0 + 3)
    assert isinstance(claimed, Claimed) and claimed.resumed


async def test_a_send_delivers_to_the_waiting_receive_in_one_transaction(
    store: DurableStore,
) -> None:
    await start(store)
    wf = await receive(store, deadline=T0 + 60)
    assert wf.state is WorkflowState.WAITING
    step = (await store.step_rows("wf"))[0]
    assert (step.state, step.reason, step.wait_key) == (StepState.WAITING, REASON, "receive:0:go:0")
    other = await store.send_message("wf", "other", "x", T0 + 1)  # another topic: kept
    assert other.delivered_to is None
    assert (await store.get_workflow("wf")).state is WorkflowState.WAITING  # type: ignore[union-attr]
    sent = await store.send_message("wf", "go", [1, 2], T0 + 2)
    assert sent == Sent(True, sent.seq, 0)
    assert (await kinds(store))[-2:] == ["MessageSent", "StepResumed"]
    assert (await store.get_workflow("wf")).state is WorkflowState.RUNNING  # type: ignore[union-attr]
    messages = await store.messages("wf")
    assert [(m.topic, m.consumed_by) for m in messages] == [
        ("other", None), ("go", "receive:0:go:0")
    ]
    [row] = await store.calls("wf")
    assert (row.state, row.output) == (CallState.ANSWERED, [1, 2])


async def test_messages_are_first_in_first_out_per_topic(store: DurableStore) -> None:
    await start(store)
    for n, topic in enumerate(["go", "stop", "go", "go"]):
        await store.send_message("wf", topic, n, T0)
    taken = []
    for i in range(3):
        await receive(store, key=f"receive:0:go:{i}")
        taken.append((await store.calls("wf"))[-1].output)
    assert taken == [0, 2, 3]
    assert [m.payload for m in await store.messages("wf") if not m.consumed] == [1]
    await receive(store, key="receive:0:go:3")  # nothing kept: it waits
    assert (await store.step_rows("wf"))[0].state is StepState.WAITING


async def test_a_used_key_makes_a_send_a_no_op(store: DurableStore) -> None:
    await start(store)
    assert (await store.send_message("wf", "go", 1, T0, key="order-7")).sent
    n = await store.last_seq()
    assert await store.send_message("wf", "go", 2, T0, key="order-7") == Sent(False)
    assert await store.send_message("wf", "other", 3, T0, key="order-7") == Sent(False)
    assert await store.last_seq() == n
    await receive(store)  # taken: the key stays used
    assert not (await store.send_message("wf", "go", 4, T0, key="order-7")).sent
    assert [m.payload for m in await store.messages("wf")] == [1]
    event = next(e for e in await store.load_events("wf") if e.kind is EventKind.MESSAGE_SENT)
    assert event.data == {"topic": "go", "key": "order-7", "payload": 1}
    assert event.step_index is None


async def test_a_late_receive_does_not_take_a_message(store: DurableStore) -> None:
    await start(store)
    await receive(store, deadline=T0 + 60)
    sent = await store.send_message("wf", "go", "late", T0 + 60)  # at its deadline: too late
    assert sent.delivered_to is None
    assert await store.time_out_wait("wf", 0, T0 + 61)
    [row] = await store.calls("wf")
    assert row.state is CallState.TIMED_OUT
    [message] = await store.messages("wf")
    assert not message.consumed  # kept for the next receive


async def test_refusals_record_nothing(store: DurableStore) -> None:
    with pytest.raises(UnknownWorkflowError, match="'nope'"):
        await store.send_message("nope", "go", 1, T0)
    await start(store)
    n = await store.last_seq()
    with pytest.raises(PayloadError):
        await store.send_message("wf", "go", object(), T0)
    with pytest.raises(InvalidKeyError):
        await store.send_message("wf", "", 1, T0)
    with pytest.raises(TypeError):
        await store.send_message("wf", "go", 1, T0, key=5)  # type: ignore[arg-type]
    assert await store.last_seq() == n
    await store.cancel_workflow("wf", "stop", T0)
    with pytest.raises(WorkflowClosedError, match="cancelled"):
        await store.send_message("wf", "go", 1, T0)
    assert await store.messages("wf") == []


async def test_an_early_resume_input_is_kept_for_its_wait(store: DurableStore) -> None:
    await start(store)
    await store.resume_step("wf", 1, {"ok": True}, T0, key="approve")  # step 1 is pending
    [kept] = await store.messages("wf")
    assert (kept.topic, kept.key, kept.payload) == (None, "approve", {"ok": True})
    assert not (await store.send_message("wf", "go", 1, T0, key="approve2")).delivered_to
    # a message's key and a kept input's key are apart: the same text may be both
    assert (await store.send_message("wf", "go", 2, T0, key="approve")).sent
    ex = await claim(store)
    wf = await store.wait_step(ex, "approve?", T0, key="other")  # another key: waits
    assert wf.state is WorkflowState.WAITING
    await store.resume_step("wf", 0, None, T0, key="other")
    ex = await claim(store)
    await store.complete_step(ex, "a", T0)
    ex = await claim(store, index=1)
    wf = await store.wait_step(ex, "approve?", T0 + 1, key="approve")
    assert wf.state is WorkflowState.RUNNING
    row = next(r for r in await store.calls("wf") if r.key == "approve")
    assert (row.state, row.output) == (CallState.ANSWERED, {"ok": True})
    kept = next(m for m in await store.messages("wf") if m.topic is None)
    assert kept.consumed_by == "approve"


async def test_the_messages_projection_is_a_replay_of_the_log(store: DurableStore) -> None:
    await start(store)
    await store.send_message("wf", "go", 1, T0, key="a")
    await store.send_message("wf", "go", 2, T0 + 1)
    await receive(store, now=T0 + 2)
    await store.resume_step("wf", 2, "later", T0 + 3, key="approve")
    before = await store.messages("wf")
    assert len(before) == 3 and before[0].consumed and not before[1].consumed
    await store.rebuild_projection()
    assert await store.messages("wf") == before
