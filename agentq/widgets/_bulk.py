"""Answering many waits at once: `WaitFilter`, `pending_waits`, `answer_waits`, `BulkReport`.

Pure of ipywidgets (the bar that shows it is ``agentq.widgets.bulk``), usable from a script:

>>> waits = await pending_waits(engine.store, WaitFilter(tool="refund"))
>>> report = await answer_waits(engine, waits, approved=True, note="batch ok")
>>> report.summary()
'3 approved, 1 already answered'

What a person expects of "approve all that match", and what `answer_waits` does:

- it answers **exactly the waits given** (the ones listed when the person confirmed), never
  one that started waiting afterwards: each is resumed with ``key=`` its own wait key, and
  the engine refuses a resume of a wait that is no longer the current one;
- each resume is its **own store transition** (``engine.resume``), not one transaction for
  all: one refused or failing resume does not undo or stop the others;
- a wait that was **already answered** (by another person, a click, a script) **or timed out**
  meanwhile is **skipped** and counted as such: before resuming, its step row is read again and
  compared with the row listed (a step-level wait, which has no key, is told from a later wait
  of the same step by its resume fields), and a `NotWaitingError` or `WorkflowClosedError` of
  the engine (the wait ended between that read and the resume) counts as skipped too;
- any other error (a `PayloadError`, an unknown workflow, a bug in a step) is recorded as
  **failed** for that wait, with its message, and the others go on;
- at most `concurrency` resumes run at once (a resume runs the workflow on to its next wait or
  its end, so a long list is not answered one run after the other).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentq.errors import NotWaitingError, WorkflowClosedError
from agentq.store import DurableStore, StepRow, StepState, WorkflowState
from agentq.widgets._live import check_count

__all__ = [
    "BulkOutcome", "BulkReport", "WaitFilter", "answer_waits", "default_input", "pending_waits",
]

CONCURRENCY = 8
"""How many resumes `answer_waits` runs at once by default."""


@dataclass(frozen=True, slots=True)
class WaitFilter:
    """Which waiting steps to answer: every non-empty field must match (case-insensitive).

    Attributes:
        workflow: Text the workflow id contains.
        tool: Text the step name, the wait key or the tool named in the wait's details
            (``details["tool"]``, an agent's tool call) contains.
        text: Text the wait's details (as JSON, e.g. a tool's arguments) or its reason
            contains.
    """

    workflow: str = ""
    tool: str = ""
    text: str = ""

    def __post_init__(self) -> None:
        for name in ("workflow", "tool", "text"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"WaitFilter {name} must be a str, got {value!r}")

    def matches(self, row: StepRow) -> bool:
        """Return whether the waiting step `row` matches every non-empty field."""
        if self.workflow and self.workflow.lower() not in row.workflow_id.lower():
            return False
        details = row.wait_details or {}
        if self.tool:
            names = (row.step_name, row.wait_key or "", str(details.get("tool", "")))
            if not any(self.tool.lower() in name.lower() for name in names):
                return False
        if self.text:
            body = json.dumps(details, ensure_ascii=False, default=repr) if details else ""
            haystack = f"{body}\n{row.reason or ''}".lower()
            if self.text.lower() not in haystack:
                return False
        return True


@dataclass(frozen=True, slots=True)
class BulkOutcome:
    """What happened to one wait of a bulk answer.

    Attributes:
        workflow_id: The workflow.
        step_name: The waiting step.
        wait_key: The wait's key (None for a step-level wait).
        outcome: ``"approved"`` or ``"denied"`` (answered), ``"skipped"`` (already answered
            or timed out meanwhile) or ``"failed"`` (the resume raised).
        detail: Why it was skipped or failed (the error's type and message), else the
            workflow's status after the resume (``"completed"``, ``"waiting"``, …).
        error: The exception of a failed (or skipped) resume, else None.
    """

    workflow_id: str
    step_name: str
    wait_key: str | None
    outcome: str
    detail: str
    error: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class BulkReport:
    """The outcome of `answer_waits`: one `BulkOutcome` per wait given, in the order given.

    Attributes:
        approved: True for an approval, False for a denial.
        outcomes: One per wait.
    """

    approved: bool
    outcomes: tuple[BulkOutcome, ...]

    @property
    def answered(self) -> int:
        """How many waits were answered."""
        return sum(o.outcome in ("approved", "denied") for o in self.outcomes)

    @property
    def skipped(self) -> int:
        """How many waits had already been answered or had timed out."""
        return sum(o.outcome == "skipped" for o in self.outcomes)

    @property
    def failed(self) -> int:
        """How many resumes raised."""
        return sum(o.outcome == "failed" for o in self.outcomes)

    def summary(self) -> str:
        """One line: ``"3 approved, 1 already answered, 1 failed"`` (zero counts left out,
        except the first)."""
        verb = "approved" if self.approved else "denied"
        parts = [f"{self.answered} {verb}"]
        if self.skipped:
            parts.append(f"{self.skipped} already answered")
        if self.failed:
            parts.append(f"{self.failed} failed")
        return ", ".join(parts)


async def pending_waits(
    store: DurableStore, where: WaitFilter | None = None
) -> list[StepRow]:
    """Read every waiting step that matches `where` (all of them when None), oldest first.

    Reads the waiting workflows (``store.workflows(WorkflowState.WAITING)``) and the steps of
    each: one read per waiting workflow, whatever the rest of the store holds.

    Raises:
        StoreError: A read failed.
    """
    where = where or WaitFilter()
    workflows = await store.workflows(WorkflowState.WAITING)
    workflows.sort(key=lambda row: row.last_seq)
    found: list[StepRow] = []
    for wf in workflows:
        for row in await store.step_rows(wf.workflow_id):
            if row.state is StepState.WAITING and where.matches(row):
                found.append(row)
    return found


def _same_wait(listed: StepRow, now: StepRow | None) -> bool:
    return now is not None and now.state is StepState.WAITING and (
        now.wait_key, now.resumed, now.resume_input
    ) == (listed.wait_key, listed.resumed, listed.resume_input)


async def answer_waits(
    engine: Any,
    waits: Iterable[StepRow],
    *,
    approved: bool,
    note: str = "",
    input_for: Callable[[bool, str], Any] | None = None,
    concurrency: int = CONCURRENCY,
    on_outcome: Callable[[BulkOutcome], None] | None = None,
) -> BulkReport:
    """Approve (or deny) each of `waits`, each by its own ``engine.resume``.

    See the module docstring for the semantics (exactly these waits, skipped when already
    answered, a failure does not stop the others).

    Args:
        engine: The `WorkflowEngine` that resumes.
        waits: The waiting steps' rows as listed (e.g. by `pending_waits`).
        approved: True to approve, False to deny.
        note: The note (for a denial, the message: an agent's model reads it).
        input_for: ``input_for(approved, note) -> JSON``: the resume input; default
            ``{"approved": approved, "note": note}`` (what `DurableAgent` reads).
        concurrency: At most this many resumes at once (>= 1).
        on_outcome: Called with each `BulkOutcome` as it is known (a view shows progress).

    Returns:
        A `BulkReport`, one outcome per wait in the order given.

    Raises:
        TypeError: `approved` is not a bool, `note` not a str or `concurrency` not an int.
        ValueError: `concurrency` < 1.
    """
    if not isinstance(approved, bool):
        raise TypeError(f"approved must be a bool, got {approved!r}")
    if not isinstance(note, str):
        raise TypeError(f"note must be a str, got {note!r}")
    check_count(concurrency, "concurrency")
    value = (input_for or default_input)(approved, note)
    verb = "approved" if approved else "denied"
    gate = asyncio.Semaphore(concurrency)

    async def one(row: StepRow) -> BulkOutcome:
        async with gate:
            outcome = await _answer_one(engine, row, value, verb)
        if on_outcome is not None:
            on_outcome(outcome)
        return outcome

    rows: Sequence[StepRow] = list(waits)
    return BulkReport(approved, tuple(await asyncio.gather(*map(one, rows))))


async def _answer_one(engine: Any, row: StepRow, value: Any, verb: str) -> BulkOutcome:
    def outcome(kind: str, detail: str, error: BaseException | None = None) -> BulkOutcome:
        return BulkOutcome(row.workflow_id, row.step_name, row.wait_key, kind, detail, error)

    try:
        now = {r.step_index: r for r in await engine.store.step_rows(row.workflow_id)}
        current = now.get(row.step_index)
        if not _same_wait(row, current):
            state = "gone" if current is None else current.state.value
            return outcome("skipped", f"no longer this wait (step {state})")
        result = await engine.resume(row.workflow_id, row.step_name, value, key=row.wait_key)
    except (NotWaitingError, WorkflowClosedError) as exc:
        return outcome("skipped", f"{type(exc).__name__}: {exc}", exc)
    except Exception as exc:  # one failure must not stop the others
        return outcome("failed", f"{type(exc).__name__}: {exc}", exc)
    status = getattr(result, "status", None)
    return outcome(verb, str(getattr(status, "value", status or "recorded")))


def default_input(approved: bool, note: str) -> dict[str, Any]:
    """The resume input of an approval: ``{"approved": approved, "note": note}``."""
    return {"approved": approved, "note": note}
