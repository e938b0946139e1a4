"""`Actions`: cancel or retry the selected workflow from the widget, after a confirmation.

The buttons act on the workflow the `DetailPane` shows. **Cancel** is enabled while it runs or
waits, **Retry** once it failed or was cancelled. A click asks first ("Cancel workflow
order-3? …" with **Yes** / **No**); **Yes** then

1. disables every button of the bar at once (a second click does nothing: one action),
2. schedules ``engine.cancel(workflow_id)`` or ``engine.retry(workflow)`` as a task on the
   running loop (the callback never awaits it: the kernel stays responsive),
3. shows the outcome ("cancelled", "had already ended", the retried run's status, or
   "recorded" when the engine does not hold the workflow's definition and a serving engine will
   run it: `Recorded`) or the error
   (`NotRetryableError`, `UnknownWorkflowError`, …) in the bar, and enables what the
   workflow's new state allows.

Retrying needs the step bodies, which are code: the engine keeps them while the workflow is
registered, and drops them when a run ends failed or cancelled. Pass ``workflow_for`` (id →
`Workflow`) to let the widget find them; otherwise register the workflow again
(``engine.register_workflow(wf)``) or the bar shows the engine's `UnknownWorkflowError`, which
says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentq.errors import AgentqError
from agentq.markup import MUTED, esc, esc_text
from agentq.store import WorkflowRow, WorkflowState
from agentq.widgets.live.refresher import Confirmation, Spawner, widgets
from agentq.workflows import Recorded

__all__ = ["Actions"]

_CANCELLABLE = frozenset({WorkflowState.RUNNING, WorkflowState.WAITING})
_RETRYABLE = frozenset({WorkflowState.FAILED, WorkflowState.CANCELLED})

_QUESTIONS = {
    "cancel": "Cancel workflow {id}? No further step starts and a running attempt is "
              "interrupted (it can be retried later).",
    "retry": "Retry workflow {id}? It runs again from the step that failed or was cancelled.",
}


class Actions:
    """Cancel and Retry buttons for one workflow, each asking for a confirmation.

    Args:
        engine: The `WorkflowEngine` that cancels and retries.
        workflow_for: Optional ``workflow_id -> Workflow | None``: where Retry finds the step
            bodies of a workflow the engine no longer has registered.

    Attributes:
        cancel: The Cancel button.
        retry: The Retry button.
        yes: The confirmation's Yes button (hidden until a Cancel or Retry click).
        no: The confirmation's No button.
        question: HTML: what Yes will do.
        status: HTML: the outcome of the last action.
        workflow: The workflow row acted on, or None.
        busy: True while an action runs.
    """

    def __init__(
        self, engine: Any, *, workflow_for: Callable[[str], Any] | None = None
    ) -> None:
        w = widgets()
        self.engine = engine
        self.workflow_for = workflow_for
        wide = w.Layout(width="auto")
        self.cancel = w.Button(description="Cancel workflow…", icon="stop", disabled=True,
                               layout=wide)
        self.retry = w.Button(description="Retry…", icon="redo", disabled=True, layout=wide)
        self._asking = Confirmation(w)
        self.yes, self.no = self._asking.yes, self._asking.no
        self.question, self.confirm = self._asking.question, self._asking.box
        self.status = w.HTML("")
        self.widget = w.VBox([w.HBox([self.cancel, self.retry]), self.confirm, self.status])
        self.widget.add_class("agentq-actions")
        self.workflow: WorkflowRow | None = None
        self.busy = False
        self.asked: str | None = None
        self.error: BaseException | None = None
        """An unexpected error of an action (not an `AgentqError`), re-raised by ``stop()``."""
        self._spawner = Spawner()
        self.cancel.on_click(lambda _b: self.ask("cancel"))
        self.retry.on_click(lambda _b: self.ask("retry"))
        self.yes.on_click(lambda _b: self.confirmed())
        self.no.on_click(lambda _b: self._close_question())

    def target(self, workflow: WorkflowRow | None) -> None:
        """Act on `workflow` from now on (the selection changed, or its state did).

        Called on the kernel's loop (by the detail pane): its loop is the one actions run on.
        """
        self._spawner.bind()
        if workflow is None or self.workflow is None or (
            workflow.workflow_id != self.workflow.workflow_id
        ):
            self._close_question()
            if not self.busy:
                self.status.value = ""
        self.workflow = workflow
        self._enable()

    def _enable(self) -> None:
        state = self.workflow.state if self.workflow is not None else None
        idle = not self.busy and self.asked is None
        self.cancel.disabled = not (idle and state in _CANCELLABLE)
        self.retry.disabled = not (idle and state in _RETRYABLE)

    def ask(self, action: str) -> None:
        """Show the confirmation of `action` ("cancel" or "retry")."""
        if self.workflow is None or self.busy:
            return
        self.asked = action
        text = _QUESTIONS[action].format(id=self.workflow.workflow_id)
        self._asking.show(
            f'<span data-agentq="confirm" data-action="{action}" '
            f'data-workflow="{esc(self.workflow.workflow_id)}" style="font-size:12px">'
            f"{esc_text(text)}</span>",
            "Yes, cancel it" if action == "cancel" else "Yes, retry it",
        )
        self._enable()

    def _close_question(self) -> None:
        self.asked = None
        self._asking.hide()
        self._enable()

    def confirmed(self) -> None:
        """What Yes does: schedule the action asked for as a task, buttons disabled."""
        action, row = self.asked, self.workflow
        if action is None or row is None or self.busy:
            return  # a second click: nothing more to do
        self.busy = True
        self._close_question()
        self.status.value = _status(action, row.workflow_id, "pending", "…")
        workflow_id = row.workflow_id
        try:
            self._spawner.spawn(lambda: self._run(action, workflow_id),
                                f"agentq.{action}:{workflow_id}")
        except RuntimeError as exc:  # no loop known or running: say so, allow another try
            self._done(action, workflow_id, "error", f"{type(exc).__name__}: {exc}")

    async def _run(self, action: str, workflow_id: str) -> None:
        try:
            if action == "cancel":
                done = await self.engine.cancel(workflow_id, "cancelled from the dashboard")
                outcome, text = ("cancelled", "cancelled") if done else (
                    "unchanged", "had already ended: nothing to cancel")
            else:
                target = self.workflow_for(workflow_id) if self.workflow_for else None
                result = await self.engine.retry(target or workflow_id)
                if isinstance(result, Recorded):  # a serving engine with its definition runs it
                    outcome = "recorded"
                    text = (f"retry recorded: an engine serving definition "
                            f"{result.definition!r} runs it")
                else:
                    outcome = str(getattr(result.status, "value", result.status))
                    text = f"retried: the workflow is {outcome}"
        except AgentqError as exc:  # an outcome: not waiting, not retryable, unknown, …
            self._done(action, workflow_id, "error", f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug: shown, and re-raised by the dashboard's stop()
            self.error = self.error or exc
            self._done(action, workflow_id, "error", f"{type(exc).__name__}: {exc}")
        else:
            self._done(action, workflow_id, outcome, text)

    def _done(self, action: str, workflow_id: str, outcome: str, text: str) -> None:
        self.busy = False
        self.status.value = _status(action, workflow_id, outcome, text)
        self._enable()

    async def join(self) -> None:
        """Wait for the actions started by clicks (their outcome is shown, not raised)."""
        await self._spawner.join()


def _status(action: str, workflow_id: str, outcome: str, text: str) -> str:
    color = "#b91c1c" if outcome == "error" else "inherit"
    return (
        f'<div data-agentq="action-outcome" data-action="{action}" '
        f'data-workflow="{esc(workflow_id)}" data-outcome="{esc(outcome)}" '
        f'style="font-size:12px;color:{color}"><span style="{MUTED}">{esc_text(action)} '
        f"{esc_text(workflow_id)}:</span> {esc_text(text)}</div>"
    )
