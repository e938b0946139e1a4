"""`DurableMessages`: the message verbs of a `DurableStore` (inherited by it).

See `agentq.store.rules.messages` for how a send and a receive meet in one transaction.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentq.store.contract.messages import MessageRow, Sent

__all__ = ["DurableMessages"]


class DurableMessages(Protocol):
    """Messages sent to a workflow, kept until a receive takes them."""

    async def send_message(
        self, workflow_id: str, topic: str, payload: Any, now: float, *, key: str | None = None
    ) -> Sent:
        """Record a message to `workflow_id` on `topic` (``MessageSent``), atomically.

        The message is kept until a receive of the workflow takes it, first in first out
        per topic. If a step of the workflow waits on a receive of `topic` (its deadline not
        passed), the message is delivered to it in the same transaction (``StepResumed``
        with the wait's key, the payload as input and the message's seq): the step is
        pending again and `Sent.delivered_to` names it, so that a run continues it.

        Args:
            workflow_id: The workflow.
            topic: The topic (a non-empty str, `agentq.keys` rules).
            payload: Any JSON value (None included).
            now: Unix seconds.
            key: The sender's idempotency key, unique per workflow among messages, or None.

        Returns:
            `Sent`; ``sent`` is False (nothing recorded) when `key` was used before by a
            message to this workflow, consumed or not.

        Raises:
            UnknownWorkflowError: The workflow is not in the store.
            WorkflowClosedError: The workflow has ended (completed, failed, cancelled).
            PayloadError: `payload` is not JSON or too large; nothing is recorded.
            InvalidKeyError / TypeError: A bad workflow id, topic or key.
        """
        ...

    async def messages(self, workflow_id: str) -> list[MessageRow]:
        """Return the messages of `workflow_id` (kept and consumed), oldest first (by seq)."""
        ...
