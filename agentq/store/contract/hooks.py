"""End-of-run hooks: `HookRow`, one row of the ``end_hooks`` outbox.

The transaction that ends a workflow (completed, failed, cancelled, timed out) also writes
one outbox row for that end (`pending_hook`), keyed by the sequence number of the event
that ended it. Engines that hold a hook for the workflow claim due rows under a lease
(``claim_hooks``), call their hooks with the final `RunResult`, then mark the row delivered
(``finish_hook``) or, if a hook raised, due again later (``retry_hook``). The outbox is not a
projection of the log: delivery attempts are not events, and ``rebuild_projection`` leaves
it as it is (like ``job_outcomes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentq.store.contract.rows import WorkflowRow

__all__ = ["MAX_HOOK_ERROR_CHARS", "HookRow", "pending_hook"]

MAX_HOOK_ERROR_CHARS = 2000
"""The longest error text kept for a failed delivery (longer ones are cut)."""


@dataclass(frozen=True, slots=True)
class HookRow:
    """One workflow end to tell the end-of-run hooks about (a row of ``end_hooks``).

    Attributes:
        seq: The sequence number of the event that ended the workflow (the row's key; a
            workflow retried after its end and ended again has one row per end).
        workflow_id: The workflow that ended.
        definition: Its definition's name, or None for a plain `Workflow`.
        state: How it ended: ``"completed"``, ``"failed"`` or ``"cancelled"``.
        ended_at: When it ended (Unix seconds).
        attempts: Claims so far (each a delivery started, unless the engine stopped and
            handed the claim back before its turn), the current one included.
        due_at: When the next delivery may start (Unix seconds): the end, then the time a
            retry's backoff gives.
        worker_id: The engine that claimed it last, or None before any claim.
        lease_expires_at: Until when that claim holds (Unix seconds), or None when nobody
            delivers it now.
        delivered_at: When every hook returned (Unix seconds), or None while pending.
        error: What the last failed delivery raised (``Type: message``), or None.
    """

    seq: int
    workflow_id: str
    definition: str | None
    state: str
    ended_at: float
    attempts: int = 0
    due_at: float = 0.0
    worker_id: str | None = None
    lease_expires_at: float | None = None
    delivered_at: float | None = None
    error: str | None = None

    @property
    def delivered(self) -> bool:
        """Whether the hooks returned for this end."""
        return self.delivered_at is not None


def pending_hook(wf: WorkflowRow) -> HookRow:
    """The outbox row of `wf`, which its last event (``last_seq``) has just ended."""
    return HookRow(
        wf.last_seq,
        wf.workflow_id,
        wf.definition,
        wf.state.value,
        wf.updated_at,
        due_at=wf.updated_at,
    )
