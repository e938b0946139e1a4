"""Answering many waits at once: `WaitFilter`, `pending_waits`, `answer_waits`, `BulkReport`.

Pure of ipywidgets (the bar that shows it is ``agentq.widgets.bulk``), usable from a script:

>>> waits = await pending_waits(engine.store, WaitFilter(tool="refund"))
>>> report = await answer_waits(engine, waits, approved=True, note="batch ok")
>>> report.summary()
'3 approved, 1 answered elsewhere'

What a person expects of "approve all that match", and what `answer_waits` does:

- it answers **exactly the waits given** (the ones listed when the person confirmed), never
  one that started waiting afterwards: each is resumed with ``key=`` its own wait key, and
  the store rule refuses (atomically, in the resume's transaction) a resume whose key is not
  the wait the step is on. A **step-level wait** (``raise WaitForInput``) has no key, so a
  resume cannot name it: a colleague could answer it and the step ask again between any check
  and the resume. So `pending_waits` does not list step-level waits and `answer_waits` skips
  one given to it ("step-level wait: answer it on its own"); answer those one at a time
  (the panel's slot, ``engine.resume``). Decision of review s4 #1: no engine change;
- each resume is its **own store transition** (``engine.resume``), not one transaction for
  all: one refused or failing resume does not undo or stop the others;
- a wait that ended meanwhile is **skipped** with the reason: ``"answered elsewhere"``,
  ``"timed out"`` (also a deadline that passed while no engine ran), ``"workflow cancelled"``
  or ``"workflow failed"`` (the wait's row and the workflow are read once, after the engine
  refused the resume with `NotWaitingError` / `WorkflowClosedError`);
- an error after the answer was recorded (the workflow's continuation, a store that closed)
  keeps the wait **answered**, with the error in ``detail``; when the store cannot tell
  whether it was recorded, the outcome is ``"unknown"``; otherwise **failed**. The others go
  on;
- at most `concurrency` resumes run at once (a resume runs the workflow on to its next wait or
  its end, so a long list is not answered one run after the other).
"""

from __future__ import annotations

import asyncio
import json
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentq.errors import NotWaitingError, WorkflowClosedError
from agentq.markup import check_count
from agentq.store import (
    CHILD_WAIT_PREFIX,
    DurableStore,
    StepRow,
    StepState,
    WorkflowState,
    engine_wait,
)

__all__ = [
    "BulkOutcome", "BulkReport", "WaitFilter", "answer_waits", "default_input", "pending_waits",
]

CONCURRENCY = 8
"""How many resumes `answer_waits` runs at once by default."""


@dataclass(frozen=True, slots=True)
class WaitFilter:
    """Which waiting steps to answer: every non-empty field must match.

    Each field is stripped of surrounding spaces (a pasted ``"order-1 "`` matches
    ``order-1``; a box of spaces only is empty). Matching ignores case (`str.casefold`: ``strasse``
    matches ``Straße``) and accents (``istanbul`` matches ``İstanbul``, ``e`` matches ``ë``).

    Attributes:
        workflow: Text the workflow id contains.
        tool: Text the step name, the wait key or the tool named in the wait's details
            (``details["tool"]``, an agent's tool call) contains.
        text: Text the wait's details (e.g. a tool's arguments) or its reason contains: a
            value as shown (``say "hi"``, ``C:\\tmp``, no JSON escapes), a key, or the
            details as JSON (``"amount": 42``).
    """

    workflow: str = ""
    tool: str = ""
    text: str = ""

    def __post_init__(self) -> None:
        for name in ("workflow", "tool", "text"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"WaitFilter {name} must be a str, got {value!r}")
            object.__setattr__(self, name, value.strip())

    def matches(self, row: StepRow) -> bool:
        """Return whether the waiting step `row` matches every non-empty field."""
        if self.workflow and _fold(self.workflow) not in _fold(row.workflow_id):
            return False
        details = row.wait_details or {}
        if self.tool:
            names = (row.step_name, row.wait_key or "", str(details.get("tool", "")))
            if not any(_fold(self.tool) in _fold(name) for name in names):
                return False
        if self.text:
            body = json.dumps(details, ensure_ascii=False, default=repr) if details else ""
            haystack = "\n".join([body, *_leaves(details), row.reason or ""])
            if _fold(self.text) not in _fold(haystack):
                return False
        return True


def _fold(text: str) -> str:
    """`text` case-folded, without accents (combining marks after NFKD)."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _leaves(value: Any) -> list[str]:
    """Every key and scalar of a JSON value, as text (a string as is, not JSON-escaped)."""
    if isinstance(value, dict):
        return [text for k, v in value.items() for text in (str(k), *_leaves(v))]
    if isinstance(value, list | tuple):
        return [text for item in value for text in _leaves(item)]
    return [value if isinstance(value, str) else json.dumps(value, default=repr)]


@dataclass(frozen=True, slots=True)
class BulkOutcome:
    """What happened to one wait of a bulk answer.

    Attributes:
        workflow_id: The workflow.
        step_name: The waiting step.
        wait_key: The wait's key (None for a step-level wait).
        outcome: ``"approved"`` or ``"denied"`` (the answer was recorded), ``"skipped"``
            (the wait had ended, or is a step-level wait), ``"failed"`` (the resume raised
            and nothing was recorded) or ``"unknown"`` (the resume raised and the store
            could not say whether the answer was recorded).
        detail: For a skip, why: ``"answered elsewhere"``, ``"timed out"``, ``"workflow
            cancelled"``, ``"workflow failed"`` or ``"step-level wait: answer it on its
            own"``; for a failure, the error's type and message; for an answer, the
            workflow's status after the resume (``"completed"``, ``"waiting"``,
            ``"failed"``: the continuation failed), or ``"recorded; then <error>"``.
        error: The exception of the resume, if it raised, else None.
    """

    workflow_id: str
    step_name: str
    wait_key: str | None
    outcome: str
    detail: str
    error: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def then_failed(self) -> bool:
        """Whether the answer was recorded and the workflow then failed (or its continuation
        raised)."""
        return self.outcome in ("approved", "denied") and (
            self.detail == "failed" or self.detail.startswith("recorded; then")
        )


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
        """How many answers were recorded."""
        return sum(o.outcome in ("approved", "denied") for o in self.outcomes)

    @property
    def then_failed(self) -> int:
        """How many answered waits' workflows failed afterwards (or whose continuation
        raised after the answer was recorded)."""
        return sum(o.then_failed for o in self.outcomes)

    @property
    def skipped(self) -> int:
        """How many waits were skipped (ended meanwhile, or step-level)."""
        return sum(o.outcome == "skipped" for o in self.outcomes)

    @property
    def failed(self) -> int:
        """How many resumes raised with nothing recorded."""
        return sum(o.outcome == "failed" for o in self.outcomes)

    @property
    def unknown(self) -> int:
        """How many resumes raised where the store could not say whether it was recorded."""
        return sum(o.outcome == "unknown" for o in self.outcomes)

    def summary(self) -> str:
        """One line, e.g. ``"3 approved (1 workflow then failed), 1 answered elsewhere, 1 timed
        out, 1 failed, 1 unknown"``: the count answered always, then each non-zero count (the
        skips by reason, in the order first met)."""
        verb = "approved" if self.approved else "denied"
        head = f"{self.answered} {verb}"
        if self.then_failed:
            n = self.then_failed
            head += f" ({n} workflow{'' if n == 1 else 's'} then failed)"
        reasons: dict[str, int] = {}
        for o in self.outcomes:
            if o.outcome == "skipped":
                reasons[_SHORT.get(o.detail, o.detail)] = reasons.get(
                    _SHORT.get(o.detail, o.detail), 0) + 1
        parts = [head, *(f"{n} {why}" for why, n in reasons.items())]
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.unknown:
            parts.append(f"{self.unknown} unknown (maybe recorded)")
        return ", ".join(parts)


ANSWERED_ELSEWHERE = "answered elsewhere"
TIMED_OUT = "timed out"
STEP_LEVEL = "step-level wait: answer it on its own"
_SHORT = {STEP_LEVEL: "step-level (not answered)"}


async def pending_waits(
    store: DurableStore, where: WaitFilter | None = None, *, now: float | None = None
) -> list[StepRow]:
    """Read every keyed wait that matches `where` (all of them when None), oldest first.

    Reads the waiting workflows (``store.workflows(WorkflowState.WAITING)``) and the steps of
    each: one read per waiting workflow, whatever the rest of the store holds. Step-level
    waits (``raise WaitForInput``, no key) are not listed: see the module docstring; nor are
    a parent's waits on its child runs (key ``child:<key>``: the child's end answers them,
    the child's own waits are listed). With
    `now` (Unix seconds, e.g. ``engine.clock.time()``), a wait whose deadline is ``<= now``
    is not listed either (it has timed out, whether or not an engine recorded it yet).

    Raises:
        TypeError: `where` is not a `WaitFilter` or None (e.g. a str: use
            ``WaitFilter(tool="refund")``).
        StoreError: A read failed.
    """
    if where is not None and not isinstance(where, WaitFilter):
        raise TypeError(f"where must be a WaitFilter or None, got {where!r}")
    where = where or WaitFilter()
    workflows = await store.workflows(WorkflowState.WAITING)
    workflows.sort(key=lambda row: row.last_seq)
    found: list[StepRow] = []
    for wf in workflows:
        for row in await store.step_rows(wf.workflow_id):
            if (
                row.state is StepState.WAITING
                and row.wait_key is not None
                and not row.wait_key.startswith(CHILD_WAIT_PREFIX)  # its child's end answers
                and engine_wait(row.wait_key) is None  # a sleep's or a receive's
                and not (now is not None and row.wait_deadline is not None
                         and row.wait_deadline <= now)
                and where.matches(row)
            ):
                found.append(row)
    return found


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

    See the module docstring for the semantics (exactly these waits, skipped with the reason
    when ended, a failure does not stop the others).

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
        TypeError: `approved` is not a bool, `note` not a str, `concurrency` not an int, or
            `waits` is a str / dict or holds something that is not a `StepRow` (checked
            before any resume).
        ValueError: `concurrency` < 1.
    """
    if not isinstance(approved, bool):
        raise TypeError(f"approved must be a bool, got {approved!r}")
    if not isinstance(note, str):
        raise TypeError(f"note must be a str, got {note!r}")
    check_count(concurrency, "concurrency")
    if isinstance(waits, str | bytes | dict):
        raise TypeError(f"waits must be StepRows (e.g. of pending_waits), got {waits!r}")
    rows: Sequence[StepRow] = list(waits)
    for row in rows:
        if not isinstance(row, StepRow):
            raise TypeError(f"waits must hold StepRows (e.g. of pending_waits), got {row!r}")
    value = (input_for or default_input)(approved, note)
    verb = "approved" if approved else "denied"
    gate = asyncio.Semaphore(concurrency)

    async def one(row: StepRow) -> BulkOutcome:
        async with gate:
            outcome = await _answer_one(engine, row, value, verb)
        if on_outcome is not None:
            on_outcome(outcome)
        return outcome

    return BulkReport(approved, tuple(await asyncio.gather(*map(one, rows))))


async def _answer_one(engine: Any, row: StepRow, value: Any, verb: str) -> BulkOutcome:
    def outcome(kind: str, detail: str, error: BaseException | None = None) -> BulkOutcome:
        return BulkOutcome(row.workflow_id, row.step_name, row.wait_key, kind, detail, error)

    if row.wait_key is None:
        return outcome("skipped", STEP_LEVEL)
    try:
        result = await engine.resume(row.workflow_id, row.step_name, value, key=row.wait_key)
    except (NotWaitingError, WorkflowClosedError) as exc:
        return outcome("skipped", await _why_ended(engine.store, row), exc)
    except Exception as exc:  # one failure must not stop the others
        text = f"{type(exc).__name__}: {exc}"
        recorded = await _recorded(engine.store, row)
        if recorded is None:
            return outcome("unknown", f"not known whether recorded: {text}", exc)
        if recorded:
            return outcome(verb, f"recorded; then {text}", exc)
        return outcome("failed", text, exc)
    status = getattr(result, "status", None)
    return outcome(verb, str(getattr(status, "value", status or "recorded")))


async def _wait_state(store: DurableStore, row: StepRow) -> str | None:
    """The state of `row`'s keyed wait (waiting, answered, timed_out) as stored, else None."""
    for call in await store.calls(row.workflow_id, row.step_index):
        if call.key == row.wait_key:
            return str(getattr(call.state, "value", call.state))
    return None


async def _why_ended(store: DurableStore, row: StepRow) -> str:
    """Why the engine refused to resume `row`'s wait (one read of its wait, one of its
    workflow); ``"answered elsewhere"`` when the reads fail or tell nothing more."""
    try:
        if await _wait_state(store, row) == "timed_out":
            return TIMED_OUT
        wf = await store.get_workflow(row.workflow_id)
    except Exception:
        return ANSWERED_ELSEWHERE
    if wf is not None and wf.state in (WorkflowState.CANCELLED, WorkflowState.FAILED):
        return f"workflow {wf.state.value}"
    return ANSWERED_ELSEWHERE


async def _recorded(store: DurableStore, row: StepRow) -> bool | None:
    """Whether `row`'s wait was answered, after a resume raised; None when the store cannot
    say (it fails too)."""
    try:
        state = await _wait_state(store, row)
    except Exception:
        return None
    return state is not None and state != "waiting"


def default_input(approved: bool, note: str) -> dict[str, Any]:
    """The resume input of an approval: ``{"approved": approved, "note": note}``."""
    return {"approved": approved, "note": note}
