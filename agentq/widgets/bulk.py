"""`BulkBar`: approve or deny every pending wait that matches a filter, after a confirmation.

The approval panel's "All matching" bar. Three filter boxes (*workflow id contains*, *step or
tool contains*, *arguments contain*; see `WaitFilter`) list the matching waiting steps and
their count ("4 waits match"); **Approve all matching…** / **Deny all matching…** (with the
note box's text as the message) then ask first, stating the count ("Approve the 4 waits
listed? …", **Yes, approve 4** / **No**). **Yes** freezes the list shown, disables the bar,
and answers exactly those waits as a task on the kernel's loop (`answer_waits`: each its own
``engine.resume``, a wait that ended meanwhile skipped with the reason, a failing resume not
stopping the others); the bar then shows the summary ("3 approved (1 workflow then failed), 1
answered elsewhere, 1 timed out") with a line per wait that was not simply answered (skipped,
failed, unknown, or whose workflow then failed).

The list is read only once a filter box is used (or `find` is called): reading every waiting
workflow's steps is linear in the backlog of waits, which the first render must not pay
(`StepCache.waiting_cap`). While a filter is set, each batch of new events that starts or ends
a wait re-reads the list (coalesced: one read at a time); not while a confirmation is open or an
answer runs (the list is frozen then: the count the question states is the set that Yes
answers), and once when it closes or the answer ends.

Once the panel is stopped or closed (`shut`), the bar is disabled and its buttons do nothing,
also when clicked from code (``bar.yes.click()`` on an old panel answers nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentq.errors import AgentqError
from agentq.events import EventKind
from agentq.markup import MUTED, esc, esc_text, json_text, more_html, short
from agentq.store import StepRow
from agentq.widgets.live.refresher import Confirmation, Spawner, check_count, widgets
from agentq.widgets.models.bulk import (
    BulkOutcome,
    BulkReport,
    WaitFilter,
    answer_waits,
    pending_waits,
)

__all__ = ["BulkBar"]

_TEXT = "font-size:12px"
_WAIT_KINDS = frozenset({
    EventKind.STEP_WAITING, EventKind.STEP_RESUMED, EventKind.WAIT_TIMED_OUT,
    EventKind.WORKFLOW_CANCELLED, EventKind.WORKFLOW_FAILED, EventKind.WORKFLOW_COMPLETED,
})
"""Events that start or end a wait (the kind is ``row[5]`` of an event row)."""

REREAD_SECONDS = 5.0
"""While a filter is set, the list is also read again this often (clock seconds): a wait's
deadline passes without an event, and a read that raced an answer is mended."""


class BulkBar:
    """The filter, the matching waits, and Approve / Deny all matching (with a confirmation).

    Args:
        engine: The `WorkflowEngine` that resumes (its ``store`` is read for the list).
        input_for: ``input_for(approved, note) -> JSON``: the resume input (as the panel's).
        listed: How many matching waits the list shows (the count covers all).
        on_bug: Called with an error that is not an `AgentqError` (the panel's banner, and
            its ``stop()`` re-raises it).

    Raises:
        TypeError, ValueError: `listed` is not an int >= 1.

    Attributes:
        workflow: Text box: workflow id contains.
        tool: Text box: step name, wait key or tool contains.
        text: Text box: the wait's details (arguments) or reason contain.
        note: Text box: the note sent with each answer (a denial's message).
        approve: The "Approve all matching…" button.
        deny: The "Deny all matching…" button.
        matches: HTML: the count and the first `listed` matching waits.
        question: HTML: what Yes will do; ``yes`` / ``no``: its buttons.
        status: HTML: the summary of the last bulk answer.
        matching: The matching waits as last read (oldest wait first).
        report: The `BulkReport` of the last bulk answer, or None.
    """

    def __init__(
        self,
        engine: Any,
        *,
        input_for: Callable[[bool, str], Any],
        listed: int = 10,
        on_bug: Callable[[BaseException], None] | None = None,
    ) -> None:
        w = widgets()
        self.engine = engine
        self.input_for = input_for
        self.listed = check_count(listed, "listed")
        self.on_bug = on_bug
        box = w.Layout(width="170px")
        self.workflow = w.Text(placeholder="workflow id contains", layout=box)
        self.tool = w.Text(placeholder="step or tool contains", layout=box)
        self.text = w.Text(placeholder="arguments contain", layout=box)
        self.note = w.Text(placeholder="note / denial message", layout=w.Layout(width="220px"))
        wide = w.Layout(width="auto")
        self.approve = w.Button(description="Approve all matching…", button_style="success",
                                icon="check", disabled=True, layout=wide)
        self.deny = w.Button(description="Deny all matching…", button_style="danger",
                             icon="times", disabled=True, layout=wide)
        self.matches = w.HTML(
            f'<div style="{MUTED};{_TEXT}">Filter the waits to approve or deny all that '
            "match.</div>"
        )
        self._asking = Confirmation(w, stacked=True)
        self.yes, self.no = self._asking.yes, self._asking.no
        self.question, self.confirm = self._asking.question, self._asking.box
        self.status = w.HTML("")
        title = w.HTML(f'<div style="{_TEXT};font-weight:600">All that match</div>')
        self.widget = w.VBox([
            title,
            w.HBox([self.workflow, self.tool, self.text], layout=w.Layout(flex_flow="row wrap")),
            self.matches,
            self.note,
            w.HBox([self.approve, self.deny], layout=w.Layout(flex_flow="row wrap")),
            self.confirm,
            self.status,
        ])
        self.widget.add_class("agentq-bulk")
        self.widget.layout.border = "1px dashed #d1d5db"
        self.widget.layout.padding = "4px 8px"
        self.widget.layout.margin = "0 0 6px 0"
        self.matching: tuple[StepRow, ...] = ()
        self.report: BulkReport | None = None
        self.asked: bool | None = None  # approve (True) / deny (False) asked, not answered
        self.busy = False
        self.closed = False  # shut: the buttons do nothing
        self.active = False  # a filter was used: keep the list current
        self._reading = False
        self._again = False
        self._read_at: float | None = None  # clock time of the last timed re-read
        self._spawner = Spawner()
        for box_ in (self.workflow, self.tool, self.text):
            box_.observe(lambda _change: self.stale(), names="value")
        self.approve.on_click(lambda _b: self.ask(True))
        self.deny.on_click(lambda _b: self.ask(False))
        self.yes.on_click(lambda _b: self.confirmed())
        self.no.on_click(lambda _b: self._close_question())

    @property
    def where(self) -> WaitFilter:
        """The filter the boxes hold."""
        return WaitFilter(self.workflow.value, self.tool.value, self.text.value)

    def shut(self) -> None:
        """Disable the bar for good (its panel stopped or closed): boxes and buttons do
        nothing from now on, also clicked from code. Idempotent."""
        self.closed = True
        self.asked = None
        for control in (self.workflow, self.tool, self.text, self.note, self.approve,
                        self.deny, self.yes, self.no):
            control.disabled = True

    def note_rows(self, rows: list[Any]) -> None:
        """A fold of the panel's source: events that start or end a wait re-read the list
        while a filter is set (others, such as a running agent's calls, do not)."""
        self._spawner.bind()
        if self.active and any(row[5] in _WAIT_KINDS for row in rows):
            self.stale()

    def tick(self, now: float) -> None:
        """An idle tick of the panel at clock time `now` (Unix seconds): while a filter is set,
        read the list again once `REREAD_SECONDS` passed since the last such read."""
        if not self.active:
            return
        if self._read_at is None or now - self._read_at >= REREAD_SECONDS:
            self._read_at = now
            self.stale()

    def stale(self) -> None:
        """Re-read the matching waits soon (a task; one read at a time)."""
        self.active = True
        if self.closed or self.busy or self.asked is not None:
            return  # the list is frozen; it is read again when the question or answer ends
        if self._reading:
            self._again = True
            return
        try:
            self._spawner.spawn(self._read_loop, "agentq.bulk-find")
            self._reading = True
        except RuntimeError:  # no loop known yet: the next refresh's events read it
            pass

    async def _read_loop(self) -> None:
        try:
            while True:
                self._again = False
                await self.find()
                if not self._again:
                    return
        except AgentqError as exc:  # a store failure: said in the bar
            self.matches.value = _line("bulk-error", f"reading the waits failed: {exc}")
        except Exception as exc:
            self._bug(exc)
        finally:
            self._reading = False

    async def find(self) -> tuple[StepRow, ...]:
        """Read the waits matching the filter boxes now, list them and return them.

        While a confirmation is open (or a bulk answer runs) the list shown is kept: the
        rows are read and returned, but Yes answers the list the question counted.

        Raises:
            StoreError: A read failed.
        """
        self.active = True
        rows = tuple(await pending_waits(self.engine.store, self.where, now=self._now()))
        if self.asked is None and not self.busy:
            self.matching = rows
            self.matches.value = _matches_html(rows, self.listed)
            self._enable()
        return rows

    def _now(self) -> float | None:
        clock = getattr(self.engine, "clock", None)
        return None if clock is None else float(clock.time())

    def _enable(self) -> None:
        idle = not self.busy and self.asked is None and not self.closed
        self.approve.disabled = self.deny.disabled = not (idle and self.matching)

    def ask(self, approved: bool) -> None:
        """Show the confirmation of approving (True) or denying (False) the waits listed."""
        if self.busy or self.closed or not self.matching:
            return
        self.asked = approved
        n = len(self.matching)
        verb = "approve" if approved else "deny"
        waits = "wait" if n == 1 else "waits"
        text = (f"{verb.capitalize()} the {n} {waits} listed? Each is resumed on its own; "
                "a wait that ended meanwhile is skipped.")
        self._asking.show(
            f'<span data-agentq="bulk-confirm" data-action="{verb}" data-count="{n}" '
            f'style="{_TEXT}">{esc(text)}</span>',
            f"Yes, {verb} {n}", "success" if approved else "danger",
        )
        self._enable()

    def _close_question(self) -> None:
        if self.closed:
            return
        self.asked = None
        self._asking.hide()
        self._enable()
        if self.active:
            self.stale()  # events may have arrived while the list was frozen

    def confirmed(self) -> None:
        """What Yes does: answer the waits listed when asked, as a task, the bar disabled."""
        approved, rows = self.asked, self.matching
        if approved is None or self.busy or self.closed or not rows:
            return  # a second click: nothing more to do
        self.busy = True
        self.asked = None
        self._asking.hide()
        self._enable()
        self.status.value = _line("bulk-summary", f"answering {len(rows)} waits…")
        note = self.note.value
        try:
            self._spawner.spawn(lambda: self._run(approved, rows, note), "agentq.bulk-answer")
        except RuntimeError as exc:  # no loop known or running: say so, allow another try
            self.busy = False
            self.status.value = _line("bulk-error", f"{type(exc).__name__}: {exc}")
            self._enable()

    async def _run(self, approved: bool, rows: tuple[StepRow, ...], note: str) -> None:
        try:
            await self.answer(rows, approved=approved, note=note)
        except Exception as exc:
            self._bug(exc)

    async def answer(
        self, rows: tuple[StepRow, ...] | None = None, *, approved: bool, note: str = ""
    ) -> BulkReport:
        """Answer `rows` (default: the waits listed) and show the summary; return the report.

        What Yes does, callable from code: ``await panel.bulk.find()`` then ``await
        panel.bulk.answer(approved=True)``. Errors of single resumes are outcomes in the
        report (see `answer_waits`); an error that is not an `AgentqError` is also passed to
        `on_bug`.

        Raises:
            TypeError: `approved` is not a bool or `note` not a str.
        """
        rows = self.matching if rows is None else rows
        self.busy = True
        self._enable()
        try:
            report = await answer_waits(
                self.engine, rows, approved=approved, note=note, input_for=self.input_for
            )
        finally:
            self.busy = False
        self.report = report
        self.status.value = _summary_html(report)
        for outcome in report.outcomes:
            if outcome.error is not None and not isinstance(outcome.error, AgentqError):
                self._bug(outcome.error)
        self.matching = ()
        self._enable()
        self.stale()  # list what still waits
        return report

    def _bug(self, exc: BaseException) -> None:
        if self.on_bug is not None:
            self.on_bug(exc)

    async def join(self) -> None:
        """Wait for the reads and answers started by the boxes and buttons."""
        await self._spawner.join()


def _line(kind: str, text: str) -> str:
    return f'<div data-agentq="{kind}" style="{_TEXT}">{esc(text)}</div>'


def _matches_html(rows: tuple[StepRow, ...], listed: int) -> str:
    """The count and a line per matching wait (workflow, step, tool, arguments; escaped)."""
    n = len(rows)
    head = f"{n} wait{'' if n == 1 else 's'} match{'es' if n == 1 else ''}"
    lines = []
    for row in rows[:listed]:
        details = row.wait_details or {}
        tool = details.get("tool")
        args = details.get("args", details if tool is None else None)
        key = "" if row.wait_key is None else f' data-key="{esc(row.wait_key)}"'
        lines.append(
            f'<div data-agentq="bulk-match" data-workflow="{esc(row.workflow_id)}" '
            f'data-step="{esc(row.step_name)}"{key}><b>{short(row.workflow_id, 40)}</b> · '
            f"{short(row.step_name, 30)}"
            + ("" if tool is None else f" · tool <b>{short(tool, 30)}</b>")
            + ("" if not args else f" <code>{json_text(args, 80)}</code>")
            + "</div>"
        )
    return (
        f'<div data-agentq="bulk-matches" data-count="{n}" style="{_TEXT}">'
        f"<b>{head}</b>{''.join(lines)}{more_html(n - len(lines), 'matching waits')}</div>"
    )


def _summary_html(report: BulkReport) -> str:
    """The summary line, and a line per wait not simply answered: skipped, failed, unknown,
    or answered and its workflow then failed (escaped)."""
    lines = [
        f'<div data-agentq="bulk-outcome" data-workflow="{esc(o.workflow_id)}" '
        f'data-outcome="{o.outcome}" style="{MUTED}">{esc_text(o.workflow_id)} · '
        f"{esc_text(o.step_name)}: {o.outcome} ({esc_text(_cut(o))})</div>"
        for o in report.outcomes if _notable(o)
    ]
    color = "#b91c1c" if report.failed or report.unknown or report.then_failed else "inherit"
    return (
        f'<div data-agentq="bulk-summary" data-answered="{report.answered}" '
        f'data-skipped="{report.skipped}" data-failed="{report.failed}" '
        f'data-unknown="{report.unknown}" data-then-failed="{report.then_failed}" '
        f'style="{_TEXT};color:{color}"><b>{esc(report.summary())}</b>{"".join(lines)}</div>'
    )


def _notable(outcome: BulkOutcome) -> bool:
    return outcome.then_failed or outcome.outcome in ("skipped", "failed", "unknown")


def _cut(outcome: BulkOutcome) -> str:
    text = "its workflow then failed" if outcome.detail == "failed" else outcome.detail
    return text if len(text) <= 160 else f"{text[:159]}…"
