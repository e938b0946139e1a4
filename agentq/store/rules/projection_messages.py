"""The ``messages`` projection as a pure function of the log: `project_message`.

`agentq.store.rules.projection.project` hands every event that concerns a message to
`project_message`, which returns the workflow's message rows after it:

=====================  =================================================================
MessageSent            creates the message row (kept: not consumed), keyed by the event's
                       sequence number
StepResumed (message)  the message it delivers is consumed: ``consumed_by`` is the wait
                       key it answered, ``consumed_at`` the event's time
=====================  =================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from agentq.events import Event, EventKind
from agentq.store.contract.messages import MessageRow

__all__ = ["message_seq", "project_message", "touches_messages"]

_K = EventKind


def touches_messages(event: Event) -> bool:
    """Whether `event` changes a message row (`MessageSent`; a `StepResumed` delivering one)."""
    kind = event.kind
    if kind is _K.MESSAGE_SENT:
        return True
    return kind is _K.STEP_RESUMED and event.data.get("message") is not None


def message_seq(event: Event) -> int:
    """The sequence number of the message `event` (see `touches_messages`) concerns."""
    return event.seq if event.kind is _K.MESSAGE_SENT else int(event.data["message"])


def project_message(event: Event, messages: Mapping[int, MessageRow]) -> Mapping[int, MessageRow]:
    """Apply one event to a workflow's message rows; pure (returns a new mapping).

    Args:
        event: An event for which `touches_messages` is true.
        messages: The workflow's message rows by ``seq``; the row a `StepResumed` delivers
            must be present (a verb loads it; a replay holds them all).

    Returns:
        The rows after the event; unchanged rows are the same objects.

    Raises:
        ValueError: The event does not fit the rows (a corrupt log): a delivery of a message
            that was never sent or was consumed before.
    """
    data = event.data
    if event.kind is _K.MESSAGE_SENT:
        topic = data.get("topic")
        key = data.get("key")
        row = MessageRow(
            event.workflow_id,
            event.seq,
            None if topic is None else str(topic),
            None if key is None else str(key),
            data.get("payload"),
            event.timestamp,
        )
        return {**messages, event.seq: row}
    seq = message_seq(event)
    sent = messages.get(seq)
    if sent is None or sent.consumed:
        raise ValueError(
            f"event #{event.seq} delivers message #{seq} of workflow {event.workflow_id!r}, "
            "which is not kept (never sent, or consumed before)"
        )
    consumed = replace(sent, consumed_by=str(data.get("key")), consumed_at=event.timestamp)
    return {**messages, seq: consumed}
