"""Approvals: what a resume input means to a step, and the headless demo's approval policy.

Each call that needs approval is asked for with a durable wait of its own,
``ctx.wait_for_input(<call key>/approval, reason, details={"tool": ..., "args": ...})``
(`plan.approval_key`, `plan.approval_details`), before any call of its turn runs. The resume
input has the shape agentq's `ApprovalPanel` sends: ``{"approved": bool, "note": str}`` (a
bare bool is accepted too). A person clicks Approve or Reject in the notebook; the headless
demo has no person, so an `ApprovalPolicy` answers every wait through the same public call,
``engine.resume(workflow_id, step, input, key=<the wait's key>)`` (`ApprovalPolicy.answer`),
and counts the answers this process recorded: a wait another process answered first (the
resume raises `NotWaitingError`) is not counted here.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentq import NotWaitingError, Recorded, RunResult, WorkflowEngine

from .jsontypes import JsonObject


@dataclass(frozen=True)
class Decision:
    """What a resume input says.

    Attributes:
        approved: Whether the calls may run.
        note: The approver's note ('' when none).
    """

    approved: bool
    note: str = ""


def read_decision(value: object) -> Decision:
    """Read a resume input: ``{"approved": bool, "note": str}`` or a bare bool.

    Anything else is read as a rejection whose note says what was received, so a malformed
    input never lets a call through.
    """
    if isinstance(value, bool):
        return Decision(value)
    if isinstance(value, dict) and isinstance(value.get("approved"), bool):
        note = value.get("note", "")
        return Decision(value["approved"], note if isinstance(note, str) else str(note))
    return Decision(False, f"unreadable approval input {value!r:.80}")


@dataclass
class ApprovalPolicy:
    """The headless approver: answers every waiting call the same way, and counts.

    Args:
        approve: True approves every wait (``approve-all``, the demo's policy); False rejects
            every one (``reject-all``: those workflows fail, naming the rejection).

    Attributes:
        approved: Waits (one per call needing approval) whose approval this policy
            recorded, in this process (`answer`; a wait answered first by another process
            is not counted).
        rejected: Waits whose rejection this policy recorded (in this process).
    """

    approve: bool = True
    approved: int = 0
    rejected: int = 0

    @property
    def name(self) -> str:
        """``approve-all`` or ``reject-all``."""
        return "approve-all" if self.approve else "reject-all"

    def describe(self) -> str:
        """One line for the summary: what the policy does and how it answers."""
        verb, button = ("approves", "Approve") if self.approve else ("rejects", "Reject")
        flag = str(self.approve).lower()
        return (
            f"{self.name}: {verb} every waiting call with engine.resume(id, step, "
            f'{{"approved": {flag}, "note": ...}}, key=<its wait key>), as a click on {button} '
            "does"
        )

    def decide(
        self,
        workflow_id: str,
        step: str,
        reason: str,
        *,
        key: str | None = None,
        details: JsonObject | None = None,
    ) -> JsonObject:
        """Decide one wait; return the resume input to send (counted by `answer`, not here).

        Args:
            workflow_id: The waiting workflow.
            step: The waiting step's name.
            reason: The wait's question.
            key: The wait's key (None for a step-level wait).
            details: The wait's details (``{"tool": ..., "args": ...}``), if any.
        """
        return {"approved": self.approve, "note": f"{self.name} policy of the headless demo"}

    async def answer(
        self,
        engine: WorkflowEngine,
        workflow_id: str,
        step: str,
        reason: str,
        *,
        key: str | None = None,
        details: JsonObject | None = None,
    ) -> RunResult | Recorded | None:
        """Decide one wait and resume it through ``engine.resume``; count it if recorded.

        Args:
            engine: The engine to resume through.
            workflow_id: The waiting workflow.
            step: The waiting step's name.
            reason: The wait's question.
            key: The wait's key (None for a step-level wait).
            details: The wait's details, if any.

        Returns:
            What ``engine.resume`` returned, or None when the wait was answered elsewhere
            meanwhile (`NotWaitingError`: not counted). Other errors of ``engine.resume``
            propagate, uncounted.
        """
        answer = self.decide(workflow_id, step, reason, key=key, details=details)
        try:
            resumed = await engine.resume(workflow_id, step, answer, key=key)
        except NotWaitingError:
            return None
        if self.approve:
            self.approved += 1
        else:
            self.rejected += 1
        return resumed
