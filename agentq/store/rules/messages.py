"""Rules of messages: `send_message`, and how a wait takes a kept message or input.

A message is sent to a workflow on a topic (`send_message`, the rule of
`DurableStore.send_message`) and kept in the ``messages`` projection until a receive takes
it, first in first out per topic. A receive is a keyed wait whose `StepWaiting` names its
topic (its wait row's label is ``{"topic": topic}``), so both sides meet in one transaction:

- a send to a workflow whose step waits on a receive of that topic (and whose deadline has
  not passed) delivers the message at once: ``MessageSent`` then ``StepResumed`` with the
  wait's key, the payload as input and the message's seq (``message``), which consumes it;
- a wait that finds a kept message on its topic (`take_kept`, called by ``wait_step``) is
  answered in the same transaction: ``StepWaiting`` then ``StepResumed``; the step is pending
  again and its next attempt finds the answer in its wait row.

An input given to ``resume`` with a ``key`` before the step waits on it is kept the same way
(`keep_input`, called by ``resume_step``): a ``MessageSent`` with no topic and the wait key as
its key, which the wait of that key takes (`take_kept`). So no wake-up can be lost: whichever
of the send and the wait comes second finds the other in the store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentq.errors import NotWaitingError, UnknownWorkflowError, WorkflowClosedError
from agentq.events import EventKind
from agentq.keys import validate_key
from agentq.store.contract.checks import check_now, check_payload
from agentq.store.contract.messages import MessageRow, Sent
from agentq.store.contract.rows import CallKind, CallRow, CallState, StepRow, StepState, WorkflowRow
from agentq.store.rules.projection import Rows
from agentq.store.rules.tx import Draft, Tx, apply, apply_rows, describe_closed, describe_step

__all__ = ["keep_input", "send_message", "take_kept"]

_K = EventKind


def send_message(
    tx: Tx, workflow_id: str, topic: str, payload: Any, now: float, key: str | None = None
) -> Sent:
    """Rule of `DurableStore.send_message` (see the module docstring).

    Raises:
        InvalidKeyError / TypeError: A bad workflow id, topic or key.
        PayloadError: `payload` is not JSON or too large.
        UnknownWorkflowError: No such workflow.
        WorkflowClosedError: The workflow has ended (completed, failed or cancelled): nothing
            would ever receive the message.
    """
    workflow_id = validate_key(workflow_id, "workflow id")
    topic = validate_key(topic, "topic")
    if key is not None:
        key = validate_key(key, "message key")
    now, at = check_now(now)
    value, text = check_payload(payload, "payload")
    wf, steps = tx.load(workflow_id, 0, 1 << 30)
    if wf is None:
        raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
    if wf.state.closed:
        raise WorkflowClosedError(
            f"cannot send a message on topic {topic!r}: {describe_closed(wf)}; an ended "
            "workflow receives nothing (nothing was recorded)"
        )
    if key is not None and tx.keyed_message(workflow_id, key, False) is not None:
        return Sent(False)
    data: dict[str, Any] = {"topic": topic, "key": key, "payload": value}
    sent = Draft.build(_K.MESSAGE_SENT, workflow_id, at, data, raw={"payload": text})
    after = apply_rows(tx, Rows(wf, {}), [sent])
    assert after.workflow is not None
    seq = after.workflow.last_seq
    receiver = _receiver(tx, steps.values(), topic, now)
    if receiver is None:
        return Sent(True, seq)
    step, wait = receiver
    _deliver(tx, after.workflow, step, wait, after.messages[seq], at)
    return Sent(True, seq, step.step_index)


def _receiver(
    tx: Tx, steps: Iterable[StepRow], topic: str, now: float
) -> tuple[StepRow, CallRow] | None:
    """The step waiting on a receive of `topic` whose deadline has not passed, with its wait."""
    for step in steps:
        if step.state is not StepState.WAITING or step.wait_key is None:
            continue
        if step.wait_deadline is not None and step.wait_deadline <= now:
            return None  # too late: the wait times out, the message stays kept
        wait = tx.load_call(step.workflow_id, step.wait_key)
        if (
            wait is not None
            and wait.kind is CallKind.WAIT
            and wait.state is CallState.WAITING
            and wait.label == {"topic": topic}
        ):
            return step, wait
        return None
    return None


def _deliver(
    tx: Tx, wf: WorkflowRow, step: StepRow, wait: CallRow, message: MessageRow, at: float
) -> WorkflowRow:
    """Answer the waiting `step`'s wait with the kept `message` (`StepResumed`)."""
    data = {"input": message.payload, "key": wait.key, "message": message.seq}
    draft = Draft.build(_K.STEP_RESUMED, wf.workflow_id, at, data, step=step)
    rows = Rows(wf, {step.step_index: step}, {wait.key: wait}, {message.seq: message})
    return apply(tx, rows, [draft])


def take_kept(
    tx: Tx, wf: WorkflowRow, step: StepRow, wait: CallRow, topic: str | None, at: float
) -> WorkflowRow | None:
    """Answer the wait `step` has just started (its `StepWaiting` applied) from a kept
    message: the oldest on `topic` (a receive), or the input kept for the wait's key (no
    topic). Returns the workflow's row after the delivery, or None if nothing is kept."""
    if topic is not None:
        message = tx.next_message(wf.workflow_id, topic)
    else:
        message = tx.keyed_message(wf.workflow_id, wait.key, True)
        if message is not None and message.consumed:
            message = None
    if message is None:
        return None
    return _deliver(tx, wf, step, wait, message, at)


def keep_input(
    tx: Tx, wf: WorkflowRow, step: StepRow, key: str, value: Any, text: str, at: float
) -> WorkflowRow:
    """Keep the input of a ``resume`` with `key` on `step`, which does not wait on `key`
    (yet): a ``MessageSent`` with no topic that the wait `key` takes when it starts.

    Raises:
        NotWaitingError: The step has completed (its waits will not be asked again), the
            wait `key` was answered before, or an input is already kept for it.
    """
    where = describe_step(wf.workflow_id, step.step_index, step.step_name)
    if step.state is StepState.COMPLETED:
        raise NotWaitingError(
            f"cannot resume {where} with wait key {key!r}: it is completed, not waiting"
        )
    row = tx.load_call(wf.workflow_id, key)
    if row is not None and (row.kind is not CallKind.WAIT or row.state is CallState.ANSWERED):
        what = "answered before" if row.kind is CallKind.WAIT else "a call's key"
        raise NotWaitingError(f"cannot resume {where} with wait key {key!r}: it is {what}")
    if tx.keyed_message(wf.workflow_id, key, True) is not None:
        raise NotWaitingError(
            f"cannot resume {where} with wait key {key!r}: an input for it was given "
            "before and is kept until the wait takes it"
        )
    data: dict[str, Any] = {"topic": None, "key": key, "payload": value}
    draft = Draft.build(_K.MESSAGE_SENT, wf.workflow_id, at, data, raw={"payload": text})
    return apply(tx, Rows(wf, {}), [draft])

