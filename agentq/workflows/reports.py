"""What a run reports: `StepStatus`, `RunStatus`, `RunResult`, and `Recorded`.

`RunResult` and `StepStatus` show as HTML at the end of a notebook cell; their
``_repr_html_`` is built from `agentq.markup`, a foundation module, so the model never imports
the notebook layer (`agentq.widgets`) that shows it. Re-exported by `agentq.workflows.model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from agentq.markup import (
    COLORS,
    FONT,
    MUTED,
    badge,
    clock_text,
    esc,
    json_text,
    more_html,
    short,
)

__all__ = ["Recorded", "RunResult", "RunStatus", "StepStatus"]


class StepStatus:
    """A step's status, as `WorkflowEngine.status` reports it.

    One of `StepStatus.Pending`, `StepStatus.Leased(worker_id, expires_at)`,
    `StepStatus.Completed(output)`, `StepStatus.Failed(reason, attempt)` or
    `StepStatus.Waiting(reason)`; all frozen dataclasses usable with `match`.
    """

    Pending: ClassVar[type[StepPending]]
    Leased: ClassVar[type[StepLeased]]
    Completed: ClassVar[type[StepCompleted]]
    Failed: ClassVar[type[StepFailed]]
    Waiting: ClassVar[type[StepWaiting]]

    __slots__ = ()

    def _repr_html_(self) -> str:
        """A status badge with its details, for a bare value at the end of a notebook cell."""
        match self:
            case StepCompleted(output=output):
                return f"{badge('completed')} <code>{json_text(output)}</code>"
            case StepFailed(reason=reason, attempt=attempt):
                return f"{badge('failed')} after {attempt} attempt(s): {short(reason, 200)}"
            case StepWaiting(reason=reason):
                return f"{badge('waiting')} {short(reason, 200)}"
            case StepLeased(worker_id=worker, expires_at=expires):
                return f"{badge('leased')} by {short(worker, 60)} until {clock_text(expires)}"
            case StepPending():
                return badge("pending")
        return esc(repr(self))


@dataclass(frozen=True, slots=True)
class StepPending(StepStatus):
    """Not started yet, or waiting for its next attempt."""


@dataclass(frozen=True, slots=True)
class StepLeased(StepStatus):
    """Running under a lease held by `worker_id` until `expires_at` (Unix seconds)."""

    worker_id: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class StepCompleted(StepStatus):
    """Finished with `output`."""

    output: Any


@dataclass(frozen=True, slots=True)
class StepFailed(StepStatus):
    """Failed for good after `attempt` attempts, for `reason`."""

    reason: str
    attempt: int


@dataclass(frozen=True, slots=True)
class StepWaiting(StepStatus):
    """Waiting for outside input; `reason` says what for.

    A wait of `StepContext.wait_for_input` also has its `key`, its `deadline` (Unix seconds,
    or None) and its `details` (a JSON object, or None); a step-level ``raise
    WaitForInput(reason)`` has None for all three.
    """

    reason: str
    key: str | None = None
    deadline: float | None = None
    details: dict[str, Any] | None = None


StepStatus.Pending = StepPending
StepStatus.Leased = StepLeased
StepStatus.Completed = StepCompleted
StepStatus.Failed = StepFailed
StepStatus.Waiting = StepWaiting


_OUTPUTS_SHOWN = 20
"""Outputs a `RunResult` card lists; the others are counted in an "n more" line."""


class RunStatus(StrEnum):
    """How a run ended (from the caller's point of view)."""

    COMPLETED = "completed"
    WAITING = "waiting"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class RunResult:
    """What `WorkflowEngine.run` and `resume` return.

    Attributes:
        workflow_id: The workflow.
        status: completed, waiting, failed or cancelled.
        step: Name of the step that is waiting or failed (None when completed or cancelled
            between steps).
        reason: Why it waits, failed or was cancelled (None when completed): the same text
            the store keeps, live or read back, so at most `agentq.codec.MAX_TEXT_CHARS`
            characters (longer text is cut and says how much was left out).
        outputs: Outputs of the completed steps, in order.
    """

    workflow_id: str
    status: RunStatus
    step: str | None = None
    reason: str | None = None
    outputs: tuple[Any, ...] = ()

    @property
    def output(self) -> Any:
        """The last step's output when completed, else None."""
        return self.outputs[-1] if self.status is RunStatus.COMPLETED and self.outputs else None

    def _repr_html_(self) -> str:
        """A small card (status, step, reason, outputs), for a bare value at the end of a cell."""
        status = self.status.value
        lines = [f"<b>{short(self.workflow_id, 80)}</b> {badge(status)}"]
        if self.step:
            lines.append(f"step <b>{short(self.step, 60)}</b>")
        if self.reason:
            lines.append(f'<span style="{MUTED}">reason:</span> {short(self.reason, 200)}')
        for i, output in enumerate(self.outputs[:_OUTPUTS_SHOWN]):
            lines.append(
                f'<span style="{MUTED}">output {i}:</span> <code>{json_text(output)}</code>'
            )
        if len(self.outputs) > _OUTPUTS_SHOWN:
            lines.append(more_html(len(self.outputs) - _OUTPUTS_SHOWN, "outputs"))
        return (
            f'<div data-agentq="run-result" data-workflow="{esc(self.workflow_id)}" '
            f'data-status="{status}" style="{FONT};border-left:3px solid '
            f'{COLORS.get(status, COLORS["pending"])[0]};padding:2px 10px">'
            + "<br>".join(lines)
            + "</div>"
        )


@dataclass(frozen=True, slots=True)
class Recorded:
    """What `WorkflowEngine.resume` and `retry` return when this engine cannot run the workflow.

    The workflow is an instance of a `WorkflowDef` that this engine has not registered: its
    step bodies are elsewhere. The change is stored all the same (`StepResumed` with the
    input, or `WorkflowRetried`), and a serving engine that registered the definition
    (`WorkflowEngine.serve`) runs the workflow on: there is no `RunResult` to return yet.
    ``await engine.status(workflow_id)`` (or the store's rows) tells how it goes on.

    Attributes:
        workflow_id: The workflow.
        definition: The name of the definition that runs it.
        change: ``"resumed"`` or ``"retried"``.
    """

    workflow_id: str
    definition: str
    change: str

