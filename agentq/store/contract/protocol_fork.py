"""The fork verb of `DurableStore`: `DurableForks`.

`DurableStore` (``agentq.store.contract.protocol``) inherits this protocol; it lives apart
only to keep each module short. A fork is a new workflow whose history up to a chosen point
is another's, copied into its own log in one transaction (`WorkflowEngine.fork` runs it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from agentq.store.contract.rows import WorkflowRow

__all__ = ["DurableForks"]


class DurableForks(Protocol):
    """Forks: `fork_workflow` (see `DurableStore` for what every verb shares)."""

    async def fork_workflow(
        self,
        workflow_id: str,
        new_workflow_id: str,
        *,
        step: int,
        key: str | None = None,
        replace: Mapping[str, Any] | None = None,
        now: float,
    ) -> WorkflowRow:
        """Create `new_workflow_id` as a fork of `workflow_id` at a step or a call, atomically.

        In one transaction: ``WorkflowStarted`` (the parent's steps, input and definition),
        ``WorkflowForked`` (``parent``, ``at``, ``replaced``), then copies of the parent's
        history before the fork point, each marked ``forked_from``: every step before
        `step` completed with its recorded output (and its calls and waits copied), and the
        calls and waits of `step` recorded before `key` (none when `key` is None). A
        `replace` value stands for the recorded output of its call (or the answer of its
        wait), which may be a call of `step` at or before `key`, or any call of `step` when
        `key` is None; a replaced call is copied as completed with that value, so a run of
        the fork answers it from the log and goes on after it. Completed calls and answered
        or timed-out waits are copied; failed or in-doubt calls and unanswered waits are
        not (a run of the fork makes them again). The parent is only read.

        Args:
            workflow_id: The parent workflow (any state).
            new_workflow_id: The fork's id (`agentq.keys` rules); must not exist.
            step: The 0-based index of the step from which the fork runs live.
            key: A call or wait key of that step: the fork runs live from that call on
                (the calls of the step recorded before it answer from the copies); None:
                the whole step runs live.
            replace: Call (or wait) key to output (JSON), as described above.
            now: Unix seconds.

        Returns:
            The fork's `WorkflowRow` (running).

        Raises:
            UnknownWorkflowError: No workflow `workflow_id`.
            WorkflowMismatchError: `new_workflow_id` exists (or is `workflow_id`).
            ValueError: `step` is not a step of the parent, a step before it did not
                complete, `key` is not a call or wait of that step, or a `replace` key is
                not at or before the fork point; the message names it.
            PayloadError: A `replace` value is not JSON or is too large.
            InvalidKeyError / TypeError: A bad id, key or argument type.
            Nothing is written when any of these is raised.
        """
        ...
