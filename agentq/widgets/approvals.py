"""`ApprovalPanel`: approve or reject waiting steps with a click.

Each waiting step (``raise WaitForInput`` or ``ctx.wait_for_input``) gets a slot: its
workflow, step and reason, for a keyed wait also its key, details (the tool and its arguments,
say; escaped and shortened) and deadline, a text box for a note, and Approve / Reject buttons.
A click

1. disables both buttons at once (a second click, however quick, does nothing: one resume),
2. schedules ``engine.resume(workflow_id, step_name, input, key=wait_key)`` as a task on the
   running loop (the callback never awaits it, so the cell and the kernel stay responsive);
   ``wait_key`` is the key of the wait the slot shows (None for a step-level wait), so a
   click answers that wait and no other: if the step moved on to another wait meanwhile,
   the engine refuses with `NotWaitingError`, which the slot shows,
3. shows the outcome in the slot and in the panel's log: the workflow's new status, or the
   error (for example `NotWaitingError`, after which the buttons are enabled again).

The resume input is ``{"approved": True, "note": "<text box>"}`` for Approve and
``{"approved": False, "note": "<text box>"}`` for Reject; pass ``input_for`` to shape it
differently.

A keyed wait whose details hold the arguments of a call (``details["args"]``, a JSON object:
an agent's tool call, see docs/agents.md) also gets a small JSON editor prefilled with them.
Approve after editing adds ``"override_args": {...}`` (the edited object) to the input; text
that is not a JSON object is refused in the slot (nothing is sent, the buttons stay enabled).
Unedited arguments add nothing; Reject ignores the editor.

A slot's widgets are an `ApprovalSlot` (``agentq.widgets.approval_slot``).

Under the slots, the bulk bar (`BulkBar`, ``agentq.widgets.bulk``) approves or denies every
wait that matches a filter, after a confirmation; `approve_matching` / `deny_matching` do the
same from code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from agentq.clock import Clock
from agentq.errors import AgentqError
from agentq.markup import more_html
from agentq.store import StepRow, StepState, engine_wait, waited_child
from agentq.widgets.approval_slot import ApprovalSlot
from agentq.widgets.bulk import BulkBar
from agentq.widgets.html.results import outcome_html
from agentq.widgets.live.refresher import DEFAULT_INTERVAL, Live, check_count, set_value, widgets
from agentq.widgets.models.bulk import BulkReport, WaitFilter, default_input, pending_waits
from agentq.widgets.models.source import Source, StepKey
from agentq.workflows import Recorded, RunResult

__all__ = ["ApprovalPanel", "ApprovalSlot", "default_input"]

_EMPTY = (
    '<div data-agentq="approvals-empty" style="color:var(--jp-ui-font-color2,#6b7280);'
    'font-size:12px;padding:4px">Nothing is waiting for approval.</div>'
)


class ApprovalPanel(Live):
    """Every `Waiting` step with its reason, and Approve / Reject buttons that resume it.

    A keyed wait (``ctx.wait_for_input``) also shows its key, details and deadline, and a
    click resumes with ``key=`` that wait's key.

    At most `slots` waiting steps are shown at once (oldest wait first), with a visible
    "n more"; the slot widgets are built once and reused. See the module docstring for what
    a click does and the resume input it sends.

    Args:
        engine: The `WorkflowEngine` that resumes (the workflows must be registered with it).
        slots: How many waiting steps are shown at once.
        input_for: ``input_for(approved, note) -> JSON``: the resume input of a click;
            default `default_input` (``{"approved": bool, "note": str}``).
        interval: Seconds between refreshes; default 0.25.
        clock: Time source of the interval; default the engine's clock.
        source: The `Source` (what changed in the store since the last refresh) to share
            with other views of the same store, which then read it once per tick (the
            `Dashboard` passes its own); default a new one.
        workflow: Show only the waits of this workflow and of its child runs (ids
            ``<workflow>/...``); None: every wait (the conversation view passes its run).
        edit: Give each slot an Edit button that shows the arguments' editor (hidden until
            then) and call Reject "Deny" (the conversation view's controls).

    Raises:
        MissingExtraError: ipywidgets is not installed.
        TypeError: `slots` is not an int.
        ValueError: `slots` < 1 or a bad `interval`.

    Example:
        >>> panel = ApprovalPanel(engine).start()
        >>> panel.slots[0].approve.click()     # what the Approve button does
    """

    takes_clicks = True

    def __init__(
        self,
        engine: Any,
        *,
        slots: int = 5,
        input_for: Callable[[bool, str], Any] = default_input,
        interval: float = DEFAULT_INTERVAL,
        clock: Clock | None = None,
        source: Source | None = None,
        workflow: str | None = None,
        edit: bool = False,
    ) -> None:
        super().__init__(interval=interval, clock=clock or engine.clock)
        self.workflow = workflow
        """Only the waits of this workflow and its child runs are shown (None: all)."""
        check_count(slots, "slots")
        w = widgets()
        self.engine = engine
        self.input_for = input_for
        self.source = source or Source(engine.store)
        self.steps = self.source.want_steps()
        cap = self.steps.waiting_cap
        self.steps.waiting_cap = slots if cap is None else max(cap, slots)
        self.slots = tuple(ApprovalSlot(w, edit=edit, reject="Deny" if edit else "Reject")
                           for _ in range(slots))
        """The slot widgets, in display order."""
        for slot in self.slots:
            slot.approve.on_click(lambda _b, s=slot: self._click(s, True))
            slot.reject.on_click(lambda _b, s=slot: self._click(s, False))
        self.empty = w.HTML(_EMPTY)
        self.more = w.HTML("")
        self.log = w.HTML("")
        """HTML: the latest outcomes of clicks, newest first."""
        self._log: list[str] = []
        self.bulk = BulkBar(engine, input_for=input_for,
                            on_bug=lambda exc: self._fail(exc, "bulk approval failed"))
        """The "all matching" bar: filter, count, Approve / Deny all matching (`BulkBar`)."""
        self.source.folds.append(self.bulk.note_rows)
        self.widget = w.VBox([
            self._banner, self.empty, *(s.box for s in self.slots), self.more, self.log,
            self.bulk.widget,
        ])
        self._tasks: set[asyncio.Task[None]] = set()
        try:
            self._event_loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._event_loop = None

    @property
    def waiting(self) -> list[StepRow]:
        """The waiting steps known at the last refresh, oldest wait first; not a parent's
        wait on a child run (key ``child:<key>``: the child's end answers it, the child's own
        waits are listed instead)."""
        seq = self.steps.wait_seq
        rows = [r for r in self.steps.waiting.values()
                if waited_child(r.workflow_id, r.wait_key) is None
                and engine_wait(r.wait_key) is None]
        if self.workflow is not None:
            mine, prefix = self.workflow, f"{self.workflow}/"
            rows = [r for r in rows if r.workflow_id == mine or r.workflow_id.startswith(prefix)]
        return sorted(rows, key=lambda r: seq.get(_key(r), 0))

    def sync(self) -> bool:
        """Match the slots to the waiting steps (no I/O); return whether anything changed."""
        changed = False
        now = self.clock.time()
        waiting = self.waiting
        keys = {_key(row) for row in waiting}
        for slot in self.slots:
            if slot.key is not None and slot.key not in keys and not slot.busy:
                changed = slot.release() or changed
        by_key = {slot.key: slot for slot in self.slots if slot.key is not None}
        free = [slot for slot in self.slots if slot.key is None]
        hidden = 0
        for row in waiting:
            key = _key(row)
            seq = self.steps.wait_seq.get(key, 0)
            if key in by_key:
                changed = by_key[key].show(row, seq, now) or changed
            elif free:
                changed = free.pop(0).bind(key, row, seq, now) or changed
            else:
                hidden += 1
        # waiting workflows not read yet (see `StepCache`); a view of one run reads its own
        if self.steps.unread_waiting and self.workflow is None:
            text = more_html(hidden + self.steps.unread_waiting, "waiting")
        else:
            text = more_html(hidden, "waiting steps")
        changed = set_value(self.more, text) or changed
        display = "none" if any(slot.key is not None for slot in self.slots) else None
        if self.empty.layout.display != display:
            self.empty.layout.display = display
            changed = True
        return changed

    async def refresh(self) -> bool:
        """Read what changed in the store and update the slots (see `Live.refresh`)."""
        if self._event_loop is None:
            self._event_loop = asyncio.get_running_loop()
        if await self.source.poll() is None:
            return self.tick()
        return self.sync()

    def tick(self) -> bool:
        """Count the deadlines of the waits shown down (no I/O; whole seconds, so the page
        hears of it once a second at most); while the bulk bar is filtered, have it read its
        list again every `REREAD_SECONDS` (`BulkBar.tick`: a task, one read)."""
        now = self.clock.time()
        changed = False
        for slot in self.slots:
            changed = slot.tick(now) or changed
        self.bulk.tick(now)  # while filtered, the list is read again now and then
        return changed

    def _click(self, slot: ApprovalSlot, approved: bool) -> None:
        key = slot.key
        if key is None or slot.busy or slot.clicked_seq >= slot.wait_seq:
            return  # a second click on the same wait (BH-19): nothing more to do
        verb = "approve" if approved else "reject"
        try:
            edited = slot.edited_args() if approved else None
        except ValueError as exc:  # refused in the slot: nothing sent, the buttons stay on
            slot.status.value = outcome_html(verb, key[0], slot.step_name, None, exc)
            return
        slot.busy = True
        slot.clicked_seq = slot.wait_seq
        slot.set_enabled(False)
        slot.status.value = outcome_html(verb, key[0], slot.step_name, None)
        try:
            value = self.input_for(approved, slot.note.value)
            if edited is not None and isinstance(value, dict):
                value = {**value, "override_args": edited}
            loop = self._event_loop or asyncio.get_running_loop()
            asked = slot.row.wait_details if slot.row is not None else None
            coro = self._resume(slot, key, slot.step_name, verb, value, slot.wait_key, asked)
            task = loop.create_task(coro, name=f"agentq.resume:{key[0]}:{key[1]}")
        except Exception as exc:  # no loop, or input_for failed: show it, allow a retry
            self._finish(slot, key, verb, None, exc)
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resume(
        self, slot: ApprovalSlot, key: StepKey, step: str, verb: str, value: Any,
        wait_key: str | None, asked: dict[str, Any] | None,
    ) -> None:
        try:
            result = await self.engine.resume(key[0], step, value, key=wait_key)
        except Exception as exc:
            self._finish(slot, key, verb, None, exc)
            return
        again = await self._asks_again(key, wait_key, asked, result)
        if again is not None:  # keep what was typed for the same question, asked again
            slot.keep_typed(key, again)
        refused = again is not None
        self._finish(slot, key, verb, result, None, refused=refused)

    async def _asks_again(
        self, key: StepKey, wait_key: str | None, asked: dict[str, Any] | None,
        result: RunResult | Recorded,
    ) -> str | None:
        """Return the key of the wait that asks the same question again after the answer,
        or None: the answer was not accepted (an agent's tool refuses arguments of the
        wrong type and asks again under ``approval:<call>#1``). The same question: the same
        step waits on the same key, or on a keyed wait with the same details."""
        if wait_key is None or not isinstance(result, RunResult):
            return None
        if result.status.value != "waiting":
            return None
        try:
            rows: Sequence[StepRow] = await self.engine.store.step_rows(key[0])
        except Exception:  # the answer was recorded: say what it did, not this read
            return None
        for r in rows:
            if (r.step_index == key[1] and r.state is StepState.WAITING
                    and r.wait_key is not None
                    and (r.wait_key == wait_key or (asked and r.wait_details == asked))):
                return r.wait_key
        return None

    def _finish(
        self,
        slot: ApprovalSlot,
        key: StepKey,
        verb: str,
        result: RunResult | Recorded | None,
        error: Exception | None,
        *,
        refused: bool = False,
    ) -> None:
        slot.busy = False
        text = outcome_html(verb, key[0], slot.step_name, result, error, refused=refused)
        slot.status.value = text
        self._log = [text, *self._log][:5]
        self.log.value = f'<div data-agentq="approval-log">{"".join(self._log)}</div>'
        if error is not None:
            slot.clicked_seq = -1  # the wait was not answered: allow another click
            if not isinstance(error, AgentqError):
                self._fail(error, "approval failed")  # a bug, not an outcome: stop() raises
        self.sync()  # the slot shows the outcome now, not at the next refresh

    async def join(self) -> None:
        """Wait until every resume started by a click has finished (its outcome is shown),
        those of the bulk bar included (`BulkBar.join`).

        A click returns at once and the resume runs as a task; a cell that wants the result
        of its own ``slot.approve.click()`` awaits this before reading the workflow's status.
        Errors of the resumes are shown in the panel, not raised here.
        """
        while self._tasks:
            await asyncio.gather(*tuple(self._tasks), return_exceptions=True)
        await self.bulk.join()

    async def approve_matching(
        self, where: WaitFilter | None = None, *, note: str = ""
    ) -> BulkReport:
        """Approve every waiting step matching `where` now (all when None), each by its own
        resume (`answer_waits`: one that ended meanwhile is skipped with the reason, a
        failing one stops no other); show the summary in the bar and return the report.
        Step-level waits and waits past their deadline are not answered (`pending_waits`).

        Raises:
            StoreError: Reading the waits failed.
            TypeError: `where` is not a `WaitFilter` or None, or `note` is not a str.
        """
        return await self._answer_matching(True, where, note)

    async def deny_matching(
        self, where: WaitFilter | None = None, *, note: str = ""
    ) -> BulkReport:
        """Deny every waiting step matching `where` now, `note` the message; see
        `approve_matching`."""
        return await self._answer_matching(False, where, note)

    async def _answer_matching(
        self, approved: bool, where: WaitFilter | None, note: str
    ) -> BulkReport:
        rows = tuple(await pending_waits(self.engine.store, where, now=self.clock.time()))
        return await self.bulk.answer(rows, approved=approved, note=note)

    async def _drain(self) -> None:
        await self.join()

    def close(self) -> None:
        """Close the widgets (`LiveView.close`); the bulk bar's buttons then do nothing."""
        self.bulk.shut()
        super().close()


def _key(row: StepRow) -> StepKey:
    return (row.workflow_id, row.step_index)
