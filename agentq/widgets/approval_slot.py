"""`ApprovalSlot`: the widgets of one waiting step in the `ApprovalPanel` (``approvals``).

A slot shows a waiting step's workflow, step and reason (a keyed wait's key, details and
deadline too), a note box, the JSON editor of a tool call's arguments, Approve / Reject and
the outcome of the last click. It is built once and rebound to the next waiting step; what a
click does (the resume) belongs to the panel.
"""

from __future__ import annotations

import json
from typing import Any

from agentq.store import StepRow
from agentq.widgets.html.results import approval_html
from agentq.widgets.live.refresher import set_value
from agentq.widgets.models.source import StepKey

__all__ = ["ApprovalSlot"]


class ApprovalSlot:
    """The widgets of one waiting step (built once, reused for the next waiting step).

    Attributes:
        key: ``(workflow_id, step_index)`` of the step shown, or None when the slot is free.
        wait_key: The key of the wait shown (``ctx.wait_for_input``), None for a step-level
            wait; a click resumes with it.
        label: HTML: workflow, step, reason, and a keyed wait's key, details and deadline.
        note: Text box whose value goes into the resume input.
        args: JSON editor of the wait's ``details["args"]`` (shown only for such a wait).
        approve: The Approve button.
        reject: The Reject button ("Deny" in the conversation view).
        edit: With ``edit=True``, the Edit button that shows and hides the arguments' editor
            (hidden until clicked, or while what was typed is kept); else None.
        status: HTML: what the last click did.
        box: The container (hidden while the slot is free).
        busy: True while a resume started from this slot runs.
    """

    def __init__(self, w: Any, *, edit: bool = False, reject: str = "Reject") -> None:
        self.key: StepKey | None = None
        self.wait_key: str | None = None
        self.step_name = ""
        self.label = w.HTML("")
        self.note = w.Text(placeholder="note (optional)",
                           layout=w.Layout(width="220px", max_width="100%"))
        self.approve = w.Button(description="Approve", button_style="success", icon="check")
        self.reject = w.Button(description=reject, button_style="danger", icon="times")
        self.edit = w.Button(description="Edit", icon="pencil") if edit else None
        self.editing = not edit  # the editor is shown (when the wait has arguments)
        if self.edit is not None:
            self.edit.on_click(lambda _b: self.toggle_editor())
        self.status = w.HTML("")
        self.args = w.Textarea(
            layout=w.Layout(width="420px", max_width="100%", height="84px", display="none")
        )
        self.args.add_class("agentq-approval-args")
        self.args_shown = ""  # the editor's text as prefilled ("" when hidden)
        self._args_for: tuple[int, str | None] | None = None  # the wait it was filled for
        edit_button = [] if self.edit is None else [self.edit]
        buttons = w.HBox([self.note, self.approve, *edit_button, self.reject],
                         layout=w.Layout(flex_flow="row wrap"))
        self.box = w.VBox([self.label, self.args, buttons, self.status])
        self.box.add_class("agentq-approval")
        self.box.layout.display = "none"
        self.box.layout.border = "1px solid #fcd34d"
        self.box.layout.padding = "4px 8px"
        self.box.layout.margin = "0 0 6px 0"
        self.busy = False
        self.row: StepRow | None = None  # the waiting step shown
        self.wait_seq = 0  # seq of the StepWaiting event shown
        self.clicked_seq = -1  # the wait a click was applied to (buttons stay off for it)
        self._typed: tuple[StepKey, str | None, str] | None = None  # see `keep_typed`

    def bind(
        self, key: StepKey, row: StepRow, wait_seq: int, now: float | None = None
    ) -> bool:
        """Show a newly waiting step in this slot."""
        self.key, self.step_name = key, row.step_name
        self.note.value = ""
        self.status.value = ""
        self.clicked_seq = -1
        self.box.layout.display = None
        self.show(row, wait_seq, now)
        return True

    def keep_typed(self, key: StepKey, wait_key: str | None) -> None:
        """Keep the editor's text for the wait `wait_key` of step `key`, which asks the
        answered question again (`show` puts the text back when it shows that wait).

        The panel calls this when an answer was not accepted (arguments of the wrong type):
        the wait is recorded anew, and refilling the editor with the model's arguments
        would drop what the person typed (issue 22 fault 6).
        """
        self._typed = (key, wait_key, self.args.value)

    def show(self, row: StepRow, wait_seq: int, now: float | None = None) -> bool:
        """Update the label, and enable the buttons for a wait not yet answered."""
        self.wait_seq = wait_seq
        self.wait_key = row.wait_key
        self.row = row
        changed = set_value(self.label, approval_html(row, now=now))
        if self._args_for != (wait_seq, row.wait_key):  # a new wait: fill the editor anew
            self._args_for = (wait_seq, row.wait_key)
            args = (row.wait_details or {}).get("args")
            text = json.dumps(args, indent=1, ensure_ascii=False) if isinstance(args, dict) else ""
            self.args_shown = text
            typed, self._typed = self._typed, None
            self.editing = self.edit is None
            if text and typed is not None and typed[:2] == (self.key, row.wait_key):
                text = typed[2]  # the same wait, asked again: what was typed stays
                self.editing = True
            self.args.value = text
            self.args.layout.display = None if text and self.editing else "none"
            changed = True
        return self.set_enabled(not self.busy and self.clicked_seq < wait_seq) or changed

    def toggle_editor(self) -> None:
        """Show the arguments' editor, or hide it (the Edit button; what was typed stays)."""
        if not self.args_shown:
            return
        self.editing = not self.editing
        self.args.layout.display = None if self.editing else "none"

    def edited_args(self) -> dict[str, Any] | None:
        """Return the edited arguments, or None when the editor is hidden or unchanged.

        Raises:
            ValueError: The text is not a JSON object (the message says why).
        """
        if not self.args_shown or self.args.value.strip() == self.args_shown.strip():
            return None
        try:
            value = json.loads(self.args.value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments are not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError(f"the arguments must be a JSON object, got {_json_kind(value)}")
        return value

    def tick(self, now: float) -> bool:
        """Redraw the label of a wait with a deadline (its countdown); no I/O."""
        if self.key is None or self.row is None or self.row.wait_deadline is None:
            return False
        return set_value(self.label, approval_html(self.row, now=now))

    def release(self) -> bool:
        """Free the slot (its step no longer waits)."""
        self.key = None
        self.box.layout.display = "none"
        return True

    def set_enabled(self, enabled: bool) -> bool:
        """Enable or disable both buttons; return whether that changed anything."""
        changed = False
        buttons = (self.approve, self.reject) if self.edit is None else (
            self.approve, self.reject, self.edit)
        for button in buttons:
            if button.disabled == enabled:
                button.disabled = not enabled
                changed = True
        return changed


def _json_kind(value: object) -> str:
    """Name a parsed JSON value in JSON's words: ``null``, ``true``, ``a string "x"``, ``an
    array [1, 2]``, ``a number 3`` (review 14 #9: Python's None/True read like a bug)."""
    text = json.dumps(value, ensure_ascii=False)  # plain text: the banner escapes it
    text = text if len(text) <= 60 else f"{text[:59]}…"
    if value is None or isinstance(value, bool):
        return text
    kind = ("a string" if isinstance(value, str) else "an array" if isinstance(value, list)
            else "a number")
    return f"{kind} {text}"
