"""The transaction a transition rule runs in: `Tx`, the `Draft` of an event, and `apply`.

The write verbs of `DurableStore` are written once, as plain synchronous functions (the rules
in `workflow`, `lease`, `attempt`, `calls` and `messages` of this package), over a small
`Tx`: read a workflow row, step rows, a call row and messages, append an event, write rows. A
store implements `Tx` over one atomic transaction of its backend, runs the rule inside it and
commits only if the rule returns; so every store accepts, refuses and records exactly the
same things.

Every rule works in the same order:

1. check its arguments (`TypeError` / `ValueError`, `InvalidKeyError` for ids) and encode its
   JSON values with `agentq.codec` (`PayloadError`) — before anything is read or written
   (`agentq.store.contract.checks`);
2. read the rows it needs (`load_step`) and check the state, raising the specific
   `EngineError` or `LeaseLostError`, with a message naming the workflow, the step and the
   actual state (`describe_step`, `describe_closed`);
3. build its events (`Draft.build`) and `apply` them: append, fold through
   `agentq.store.rules.projection.project`, write the rows that changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentq.codec import dumps
from agentq.events import Event, EventKind, utc
from agentq.literal import visible
from agentq.store.contract.children import child_of, closed_by_parent, outcome, parent_of
from agentq.store.contract.frozen import quick_init
from agentq.store.contract.hooks import HookRow, pending_hook
from agentq.store.contract.messages import MessageRow
from agentq.store.contract.rows import (
    CallRow,
    CallState,
    StepRow,
    StepState,
    WorkflowRow,
    WorkflowState,
)
from agentq.store.contract.schedules import ScheduleRow
from agentq.store.rules.fence import CallFence, StepLease, check_known
from agentq.store.rules.projection import TIMED_OUT_REASON, Rows, project
from agentq.store.rules.projection_calls import Logged

__all__ = [
    "Draft",
    "Tx",
    "apply",
    "apply_rows",
    "cancel_draft",
    "child_outcome",
    "describe_call",
    "describe_closed",
    "describe_step",
    "load_step",
    "timed_out_draft",
]


@quick_init
@dataclass(frozen=True, slots=True)
class Draft:
    """An event about to be appended: everything but its sequence number.

    Attributes:
        kind, workflow_id, step_index, step_name, attempt, worker_id: As in `Event`.
        at: Unix seconds (already rounded to the microsecond, as `Event.at` holds it).
        data: The kind's values (JSON, as they will read back).
        data_json: `data` as compact JSON text, what a store writes.
        texts: ``(value, text)`` of the members of `data` that were given encoded (`build`'s
            `raw`): a store that writes the same value into a row may reuse its text.
    """

    kind: EventKind
    workflow_id: str
    at: float
    step_index: int | None
    step_name: str | None
    attempt: int | None
    worker_id: str | None
    data: dict[str, Any]
    data_json: str
    texts: tuple[tuple[Any, str], ...] = ()

    @classmethod
    def build(
        cls,
        kind: EventKind,
        workflow_id: str,
        at: float,
        data: dict[str, Any],
        *,
        step: StepRow | StepLease | None = None,
        attempt: int | None = None,
        worker_id: str | None = None,
        raw: dict[str, str] | None = None,
    ) -> Draft:
        """Return the draft of a `kind` event about `step` (or the workflow), `data` encoded.

        `raw` holds members of `data` already encoded by `agentq.codec` (JSON text), spliced
        into `data_json` rather than encoded twice.
        """
        if raw:
            rest = data.copy()  # the members not given encoded, in the order of `data`
            pieces = []
            kept = []
            for k, t in raw.items():
                kept.append((rest.pop(k), t))
                pieces.append(f'"{k}":{t}')  # keys are plain names
            spliced = ",".join(pieces)
            text = f"{dumps(rest)[:-1]},{spliced}}}" if rest else f"{{{spliced}}}"
            texts: tuple[tuple[Any, str], ...] = tuple(kept)
        else:
            text, texts = dumps(data), ()
        if step is None:
            return cls(kind, workflow_id, at, None, None, attempt, worker_id, data, text, texts)
        return cls(
            kind,
            workflow_id,
            at,
            step.step_index,
            step.step_name,
            attempt,
            worker_id,
            data,
            text,
            texts,
        )

    def logged(self, seq: int) -> Logged:
        """What `agentq.store.rules.projection_calls.project_call` reads of the event this
        draft becomes once the store gave it `seq` (no `datetime` made: `Draft.event`)."""
        return Logged(
            seq, self.kind, self.workflow_id, self.step_index, self.attempt, self.data, self.at
        )

    def event(self, seq: int) -> Event:
        """Return the `Event` this draft becomes once the store gave it `seq`."""
        return Event(
            seq,
            utc(self.at),
            self.kind,
            self.workflow_id,
            self.step_index,
            self.step_name,
            self.attempt,
            self.worker_id,
            self.data,
        )


class Tx(Protocol):
    """What a rule needs from one open transaction of a store."""

    def load(
        self, workflow_id: str, first: int = 0, last: int = -1
    ) -> tuple[WorkflowRow | None, dict[int, StepRow]]:
        """Return the workflow's row (or None) and its step rows ``first``..``last``."""
        ...

    def append(self, draft: Draft) -> int:
        """Append an event; return its sequence number (the next of the log): the event is
        ``draft.event(seq)``."""
        ...

    def put_workflow(self, row: WorkflowRow, started_seq: int | None) -> None:
        """Insert a new workflow row (`started_seq` given) or update one (None).

        An update changes only ``state``, ``reason``, ``updated_at`` and ``last_seq`` (the
        last two follow from the log: a store may derive them from it instead of writing).
        """
        ...

    def put_step(self, row: StepRow, new: bool) -> None:
        """Insert (`new`) or replace the step row."""
        ...

    def load_call(self, workflow_id: str, key: str) -> CallRow | None:
        """Return the workflow's call (or wait) row of `key`, or None."""
        ...

    def put_call(self, row: CallRow, new: bool) -> None:
        """Insert (`new`) or replace the call row (keyed by workflow and key)."""
        ...

    def load_fence(self, workflow_id: str, index: int, key: str) -> CallFence | None:
        """What a call verb reads: `fence_of` the workflow, its step `index` and the call
        row of `key` (None: no such workflow); read as `load` then `load_call` would."""
        ...

    def touch_workflow(self, workflow_id: str, at: float, seq: int) -> None:
        """An event `seq` at `at` that changes no workflow or step row was appended: the
        workflow's ``updated_at`` and ``last_seq`` follow (a store that derives them from
        the log does nothing)."""
        ...

    def load_calls(self, workflow_id: str) -> list[CallRow]:
        """Return every call and wait row of the workflow, in `CallRow.first_seq` order."""
        ...

    def load_schedule(self, name: str) -> ScheduleRow | None:
        """Return schedule `name` (a store that locks rows locks it), or None."""
        ...

    def put_schedule(self, row: ScheduleRow) -> None:
        """Insert or replace the schedule row (keyed by name)."""
        ...

    def delete_schedule(self, name: str) -> bool:
        """Delete schedule `name`; True if it was stored."""
        ...

    def next_message(self, workflow_id: str, topic: str) -> MessageRow | None:
        """Return the oldest message on `topic` not consumed yet (lowest ``seq``), or None."""
        ...

    def keyed_message(self, workflow_id: str, key: str, inputs: bool) -> MessageRow | None:
        """Return the message with `key` (consumed or not), or None: among the kept inputs
        (topic None) if `inputs`, else among the messages with a topic."""
        ...

    def put_message(self, row: MessageRow, new: bool) -> None:
        """Insert (`new`) or replace the message row (keyed by workflow and ``seq``)."""
        ...

    def put_hook(self, row: HookRow, new: bool) -> None:
        """Insert (`new`) or replace the end-hook outbox row (keyed by ``seq``)."""
        ...

    def load_hook(self, seq: int) -> HookRow | None:
        """Return the outbox row `seq`, or None."""
        ...

    def due_hooks(
        self,
        now: float,
        definitions: Sequence[str],
        plain: bool,
        workflow_id: str | None,
        limit: int,
    ) -> list[HookRow]:
        """Return up to `limit` outbox rows not delivered, due at `now` and not leased (or
        leased until `now` or before), of `definitions` (or plain workflows if `plain`),
        only of `workflow_id` if given; by ``seq``. A store whose transactions run side by
        side locks them for this transaction and skips rows locked by another."""
        ...


def describe_step(workflow_id: str, index: int, name: str | None = None) -> str:
    """Name a step in a message: ``step 'b' (#1) of workflow 'wf'``."""
    return f"step {name!r} (#{index}) of workflow {workflow_id!r}" if name else (
        f"step #{index} of workflow {workflow_id!r}"
    )


def describe_call(workflow_id: str, key: str, kind: str = "key") -> str:
    """Name a call or wait key in a message: ``call key 'k' of workflow 'wf'``."""
    shown = key if len(key) <= 80 else key[:80] + "…"
    return f"{kind} {shown!r} of workflow {workflow_id!r}"


def describe_closed(wf: WorkflowRow | CallFence) -> str:
    """Say in a message that a workflow is closed, and why (the stored reason `visible`)."""
    return f"workflow {wf.workflow_id!r} is {wf.state}" + (
        f" ({visible(wf.reason)})" if wf.reason else ""
    )


def load_step(
    tx: Tx, workflow_id: str, index: int, *, first: int | None = None
) -> tuple[WorkflowRow, dict[int, StepRow]]:
    """Read the workflow and its steps `first`..`index`, or raise Unknown*Error."""
    wf, steps = tx.load(workflow_id, index if first is None else first, index)
    check_known(workflow_id, index, None if wf is None else wf.step_names, index in steps)
    assert wf is not None
    return wf, steps


def apply(tx: Tx, rows: Rows, drafts: Sequence[Draft]) -> WorkflowRow:
    """Append `drafts`, fold them through `project`, write the rows that changed.

    Returns:
        The workflow's row after the events.
    """
    after = apply_rows(tx, rows, drafts)
    assert after.workflow is not None
    return after.workflow


def apply_rows(tx: Tx, rows: Rows, drafts: Sequence[Draft]) -> Rows:
    """`apply`, returning all the rows after the events (`Rows.workflow` is set)."""
    after = rows
    for draft in drafts:
        after = project(draft.event(tx.append(draft)), after)
    wf = after.workflow
    assert wf is not None
    if rows.workflow is None:
        tx.put_workflow(wf, wf.last_seq)
    else:
        tx.put_workflow(wf, None)
    for index, row in after.steps.items():
        before = rows.steps.get(index)
        if row is not before:
            tx.put_step(row, before is None)
    for key, call in after.calls.items():
        known = rows.calls.get(key)
        if call is not known:
            tx.put_call(call, known is None)
    for seq, message in after.messages.items():
        kept = rows.messages.get(seq)
        if message is not kept:
            tx.put_message(message, kept is None)
    if rows.workflow is not None and not rows.workflow.state.closed and wf.state.closed:
        tx.put_hook(pending_hook(wf), True)  # the end-of-run outbox: in the same transaction
        timed_out = any(
            d.kind is EventKind.WORKFLOW_FAILED and "deadline" in d.data for d in drafts
        )
        _ended(tx, wf, timed_out)
    return after


def timed_out_draft(wf: WorkflowRow, at: float) -> Draft:
    """The `WorkflowFailed` of `wf` reaching its deadline (which must be set)."""
    assert wf.deadline is not None
    when = utc(wf.deadline).isoformat(timespec="milliseconds")
    reason = f"{TIMED_OUT_REASON}: workflow {wf.workflow_id!r} did not end by its deadline {when}"
    return Draft.build(
        EventKind.WORKFLOW_FAILED, wf.workflow_id, at, {"reason": reason, "deadline": wf.deadline}
    )


def cancel_draft(workflow_id: str, steps: Mapping[int, StepRow], reason: str, at: float) -> Draft:
    """The `WorkflowCancelled` of a workflow whose steps are `steps` (all of them): a leased
    step's revoked lease still fences it until released (``fenced_until``: its expiry now)."""
    data: dict[str, Any] = {"reason": reason}
    for step in steps.values():  # at most one: its revoked lease fences it (projection)
        if step.state is StepState.LEASED and step.lease_expires_at is not None:
            data["fenced_until"] = step.lease_expires_at  # as renewed: renewals are not logged
    return Draft.build(EventKind.WORKFLOW_CANCELLED, workflow_id, at, data)


# ---------------------------------------------------------------------- child runs


def child_outcome(tx: Tx, child_id: str) -> dict[str, Any] | None:
    """The outcome of child run `child_id` (`agentq.store.contract.children.outcome`), or
    None while it is open (or not stored)."""
    wf, _ = tx.load(child_id, 0, -1)
    if wf is None or not wf.state.closed:
        return None
    last = len(wf.step_names) - 1
    output = None
    if wf.state is WorkflowState.COMPLETED:
        output = tx.load(child_id, last, last)[1][last].output
    return outcome(wf, output)


def _ended(tx: Tx, wf: WorkflowRow, timed_out: bool) -> None:
    """A workflow just ended, in this transaction: answer its open parent's wait on it, and,
    if it was cancelled or `timed_out` (failed by its deadline), cancel its open children.

    The same transaction that ends a child answers its parent, so no crash can lose the
    wake-up: a `StepResumed` if the parent's step waits on it now, else a `ChildEnded`
    (a durable call of the running step awaits it; the step is not touched, and a later
    wait on it is answered at once: the ``wait_step`` rule). Each child cancelled ends in
    turn, so a cancel goes down the tree.
    """
    if wf.state is WorkflowState.CANCELLED or timed_out:
        why = "timed out (its deadline passed)" if timed_out else "was cancelled"
        for call in tx.load_calls(wf.workflow_id):
            child = child_of(call)
            if child is None:
                continue
            cwf, csteps = tx.load(child, 0, 1 << 30)
            if cwf is None or cwf.state.closed:
                continue
            reason = closed_by_parent(wf.workflow_id, why)
            apply_rows(tx, Rows(cwf, csteps), [cancel_draft(child, csteps, reason, wf.updated_at)])
    link = parent_of(wf.workflow_id)
    if link is None:
        return
    parent_id, wait_key = link
    pwf, _ = tx.load(parent_id, 0, -1)  # first: a store that locks rows locks the parent's
    if pwf is None or pwf.state.closed:
        return
    row = tx.load_call(parent_id, wait_key)
    if row is None or child_of(row) != wf.workflow_id:
        return  # not a child run: a workflow whose id only has a '/'
    pwf, psteps = tx.load(parent_id, row.step_index, row.step_index)
    step = psteps.get(row.step_index)
    if pwf is None or step is None or row.state is not CallState.WAITING:
        return  # answered already (a retried child ended again): the first end stands
    waits = step.state is StepState.WAITING and step.wait_key == wait_key
    kind = EventKind.STEP_RESUMED if waits else EventKind.CHILD_ENDED  # a call awaits it
    data = {"input": child_outcome(tx, wf.workflow_id), "key": wait_key}
    draft = Draft.build(kind, parent_id, wf.updated_at, data, step=step)
    apply_rows(tx, Rows(pwf, psteps, {wait_key: row}), [draft])
