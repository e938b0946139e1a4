"""Messages to a workflow: `MessageRow` (one row of the ``messages`` projection) and `Sent`.

A message is sent to a workflow on a *topic* (``engine.send``) and kept until a step of the
workflow receives it (``ctx.receive``), first in first out per topic. An input given to
``engine.resume(..., key=K)`` before the step waits on ``K`` is kept the same way, as a
message with no topic that the wait ``K`` takes. Both are rows of the ``messages``
projection, made by ``MessageSent`` and consumed by the ``StepResumed`` that delivers them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MessageRow", "Sent"]


@dataclass(frozen=True, slots=True)
class MessageRow:
    """One message of a workflow (a row of the ``messages`` projection).

    Attributes:
        workflow_id: The workflow it was sent to.
        seq: Sequence number of its ``MessageSent`` event (its order: oldest first).
        topic: Its topic; None for an input kept for a keyed wait (an early ``resume``).
        key: The sender's key (unique per workflow among messages, and among kept inputs,
            where it is the wait key), or None.
        payload: The JSON value sent.
        sent_at: When it was sent (Unix seconds).
        consumed_by: The wait key of the receive (or wait) that took it; None while kept.
        consumed_at: When it was taken (Unix seconds), else None.
    """

    workflow_id: str
    seq: int
    topic: str | None
    key: str | None
    payload: Any
    sent_at: float
    consumed_by: str | None = None
    consumed_at: float | None = None

    @property
    def consumed(self) -> bool:
        """Whether a receive (or a wait) took it."""
        return self.consumed_by is not None


@dataclass(frozen=True, slots=True)
class Sent:
    """What `DurableStore.send_message` did.

    Attributes:
        sent: False when the key was used before by a message of the workflow: nothing was
            recorded.
        seq: The ``MessageSent`` event's sequence number (None when not sent).
        delivered_to: The index of the step whose waiting receive took the message in the
            same transaction (the step is pending again: a run must continue it), else None.
    """

    sent: bool
    seq: int | None = None
    delivered_to: int | None = None
