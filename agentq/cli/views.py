"""What the commands print: rich tables of workflows, steps, calls, waits and events.

Pure functions of the store's rows (no I/O, no clock: "now" is an argument); the commands
print what they return. Long values are shortened with '…' so a table stays readable; ``show``
and ``events --json`` give the whole values. Every stored string reaches a table or a header
as `agentq.cli.literal.text` (printed literally, controls made visible), never as markup; the
JSON lines go through `agentq.cli.literal.json_line`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from agentq.cli.literal import json_line, text, visible
from agentq.events import Event
from agentq.store import (
    CallRow,
    CallState,
    HookRow,
    ScheduleRow,
    StepRow,
    StepState,
    WorkflowRow,
    child_of,
    engine_wait,
    shown_call,
    waited_child,
)
from agentq.widgets import parked_on

__all__ = [
    "event_json",
    "events_table",
    "schedule_line",
    "schedules_table",
    "short",
    "when",
    "workflow_json",
    "workflow_line",
    "workflow_view",
    "workflows_table",
]

_STYLES = {
    "running": "cyan",
    "leased": "cyan",
    "started": "cyan",
    "pending": "dim",
    "waiting": "yellow",
    "completed": "green",
    "answered": "green",
    "failed": "red",
    "timed_out": "red",
    "cancelled": "magenta",
}


def when(seconds: float | None) -> str:
    """Unix seconds as ``YYYY-MM-DD HH:MM:SS`` UTC ('' for None); a stored value no date
    can show (beyond year 9999, NaN) prints as the number rather than crashing."""
    if seconds is None:
        return ""
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return repr(seconds)


def short(value: Any, limit: int = 60, *, as_json: bool = False) -> str:
    """`value` as one line of at most `limit` characters (JSON for non-strings, and for
    strings too with `as_json`: a stored ``None``, ``""`` and ``"null"`` then print apart, as
    ``null``, ``""`` and ``"null"``), its controls and separators as escapes (`visible`: a
    newline, U+2028 or ``\x1c`` shows as typed, never as a space); runs of spaces print as one.
    Without `as_json`, None prints as nothing."""
    if value is None and not as_json:
        return ""
    raw = isinstance(value, str) and not as_json
    shown = value if raw else json.dumps(value, ensure_ascii=False)
    shown = " ".join(visible(shown).split())
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _state(value: str) -> Text:
    return text(value, _STYLES.get(value, ""))


def _row(table: Table, *cells: object) -> None:
    """Add one row; each cell printed literally (`text`), a `Text` as it is."""
    table.add_row(*(cell if isinstance(cell, Text) else text(cell) for cell in cells))


def _seconds(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def workflows_table(workflows: Sequence[WorkflowRow], steps: Sequence[StepRow]) -> Table:
    """One row per workflow: id, definition, state, steps done of all, the current step, times,
    reason.

    Args:
        workflows: The rows to list, in the order given.
        steps: Step rows of (at least) those workflows; the current step is the first that
            has not completed.
    """
    by_workflow: dict[str, list[StepRow]] = {}
    for row in steps:
        by_workflow.setdefault(row.workflow_id, []).append(row)
    table = Table(title=f"{len(workflows)} workflow(s)", title_justify="left")
    for name in ("workflow", "definition", "state", "steps", "current step", "started (UTC)",
                 "updated (UTC)", "reason"):
        table.add_column(name, overflow="fold")
    for wf in workflows:
        rows = by_workflow.get(wf.workflow_id, [])
        done = sum(1 for r in rows if r.state is StepState.COMPLETED)
        current = next((r for r in rows if r.state is not StepState.COMPLETED), None)
        step = "" if current is None else f"{current.step_name} ({current.state.value})"
        _row(
            table, wf.workflow_id, wf.definition or "", _state(wf.state.value),
            f"{done}/{len(wf.step_names)}", step,
            when(wf.created_at), when(wf.updated_at), short(wf.reason),
        )
    return table


def _steps_table(steps: Sequence[StepRow]) -> Table:
    table = Table(title="steps", title_justify="left")
    for name in ("#", "step", "state", "attempt", "worker", "started (UTC)", "finished (UTC)",
                 "output / reason / error"):
        table.add_column(name, overflow="fold")
    for row in steps:
        said = short(row.output) if row.state is StepState.COMPLETED else short(row.reason)
        error = None if row.error is None else short(str(row.error), 80)
        lines = [said] if said else []
        if error and error != said and not said.startswith(error):  # said once
            lines.append(error)
        note = Text("\n").join(text(line) for line in lines)
        attempt = str(row.attempt) + (f" +{row.recoveries} lost" if row.recoveries else "")
        _row(
            table, row.step_index, row.step_name, _state(row.state.value), attempt,
            row.worker_id or "", when(row.started_at), when(row.finished_at), note,
        )
    return table


def _calls_table(wf: WorkflowRow, calls: Sequence[CallRow]) -> Table:
    table = Table(title="durable calls and waits", title_justify="left")
    for name in ("key", "kind", "step", "state", "label", "runs", "duration",
                 "output / reason"):
        table.add_column(name, overflow="fold")
    for row in calls:
        ended = row.state in (CallState.COMPLETED, CallState.ANSWERED)
        note = short(row.output, as_json=True) if ended else short(row.reason)
        state = shown_call(wf, row).state
        if (parked := parked_on(row)) is not None:  # not finished: runs again once answered
            state = wf.state.value if wf.state.closed else "waiting"
            note = short(f"waiting for {parked}", 80)
        elif row.error is not None:
            note = short(str(row.error), 80)
        _row(
            table, row.key, row.kind.value, row.step_index, _state(state),
            short(row.label, 60), str(row.runs), _seconds(row.duration), note,
        )
    return table


def _waits_table(steps: Sequence[StepRow]) -> Table | None:
    waiting = [row for row in steps if row.state is StepState.WAITING]
    if not waiting:
        return None
    inputs = any(waited_child(row.workflow_id, row.wait_key) is None for row in waiting)
    title = "waiting for input" if inputs else "waiting for child runs"
    table = Table(title=title, title_justify="left")
    for name in ("#", "step", "question", "key", "details", "deadline (UTC)"):
        table.add_column(name, overflow="fold")
    for row in waiting:
        child = waited_child(row.workflow_id, row.wait_key)
        said = engine_wait(row.wait_key)
        if said is not None:  # not an input: its time or a message answers it
            _row(table, row.step_index, row.step_name, short(row.reason, 120),
                 row.wait_key or "", said, when(row.wait_deadline))
            continue
        if child is not None:  # not an input: the child's end answers it
            _row(table, row.step_index, row.step_name, f"waiting for child run {child}",
                 row.wait_key or "", "answer the child run, not this wait", "")
            continue
        _row(
            table, row.step_index, row.step_name, short(row.reason, 120), row.wait_key or "",
            short(row.wait_details, 120), when(row.wait_deadline),
        )
    return table


def workflow_view(
    wf: WorkflowRow,
    steps: Sequence[StepRow],
    calls: Sequence[CallRow],
    parent: str | None = None,
    forked: Mapping[str, Any] | None = None,
    hooks: Sequence[HookRow] = (),
    child_states: Mapping[str, str] | None = None,
) -> Group:
    """One workflow in full: its header (with its parent, if it is a child run, and its
    child runs, each with its state from `child_states` (child id -> its workflow state), else
    its wait's; given the data of its `WorkflowForked` event, the run it was forked from;
    given its end-hook outbox rows, whether the last end's hooks were delivered), steps,
    waits (with details) and durable calls."""
    head = Text()
    head.append(f"workflow {visible(wf.workflow_id)}  ", style="bold")
    head.append(_state(wf.state.value))
    if wf.definition is not None:
        head.append(f"  (definition {visible(wf.definition)})")
    head.append(f"\nstarted {when(wf.created_at)} UTC, updated {when(wf.updated_at)} UTC,"
                f" last event #{wf.last_seq}")
    if forked:
        at = forked.get("at") or {}
        point = f"step {at.get('step_name')!r}" + (
            f", call {at['key']!r}" if at.get("key") is not None else ""
        )
        replaced = f" (replaced: {', '.join(forked.get('replaced') or [])})" if forked.get(
            "replaced"
        ) else ""
        origin = forked.get("parent")
        head.append(f"\nforked from {visible(f'{origin} at {point}{replaced}')}")
    head.append(f"\ninput: {visible(short(wf.input, 200))}")
    if wf.deadline is not None:
        head.append(f"\ndeadline: {when(wf.deadline)} UTC (then it fails: WorkflowTimedOut)")
    if wf.reason:
        head.append(f"\nreason: {visible(short(wf.reason, 200))}")
    if parent is not None:
        head.append(f"\nchild run of: {visible(parent)}")
    children = [(child, row) for row in calls if (child := child_of(row)) is not None]
    if children:
        listed = ", ".join(
            f"{visible(child)} ({(child_states or {}).get(child) or shown_call(wf, row).state})"
            for child, row in children
        )
        head.append(f"\nchild runs: {listed}")
    if hooks and (hooks[-1].attempts > 0 or hooks[-1].delivered_at is not None):
        # an end no engine ever claimed: most often no hook exists for it (nothing to say)
        head.append(f"\non_end hooks: {visible(hook_note(hooks[-1]))}")
    parts: list[Any] = [head, _steps_table(steps)]
    waits = _waits_table(steps)
    if waits is not None:
        parts.append(waits)
    if calls:
        parts.append(_calls_table(wf, calls))
    return Group(*parts)


def hook_note(row: HookRow) -> str:
    """The delivery of one end's hooks, in a few words."""
    tries = f"{row.attempts} attempt{'' if row.attempts == 1 else 's'}"
    if row.delivered_at is not None:
        return f"delivered {when(row.delivered_at)} UTC ({tries})"
    if row.attempts == 0:
        return "pending (no engine holding a hook for it has claimed it yet)"
    if row.lease_expires_at is not None:
        return f"being delivered by {row.worker_id} ({tries})"
    error = f"; last error: {short(row.error, 120)}" if row.error else ""
    return f"pending, next attempt {when(row.due_at)} UTC ({tries}{error})"


def _event_note(event: Event) -> str:
    data = dict(event.data)
    data.pop("steps", None)
    data.pop("trace", None)
    return short(data, 80) if data else ""


def events_table(events: Sequence[Event]) -> Table:
    """One row per event: seq, time, workflow, step, kind, attempt, worker, its data."""
    table = Table(title=f"{len(events)} event(s)", title_justify="left")
    for name in ("seq", "at (UTC)", "workflow", "step", "kind", "attempt", "worker", "data"):
        table.add_column(name, overflow="fold")
    for event in events:
        step = "" if event.step_index is None else f"{event.step_index} {event.step_name}"
        _row(
            table, event.seq, when(event.timestamp), event.workflow_id, step,
            _state_kind(event.kind.value), "" if event.attempt is None else event.attempt,
            event.worker_id or "", _event_note(event),
        )
    return table


def _state_kind(kind: str) -> Text:
    if kind.endswith(("Failed", "TimedOut")):
        return text(kind, "red")
    if kind.endswith("Completed"):
        return text(kind, "green")
    if kind in ("StepWaiting", "WorkflowCancelled"):
        return text(kind, "yellow")
    return text(kind)


def workflow_json(
    wf: WorkflowRow,
    steps: Sequence[StepRow],
    calls: Sequence[CallRow],
    parent: str | None = None,
    hooks: Sequence[HookRow] = (),
    messages: list[dict[str, Any]] | None = None,
) -> str:
    """One workflow as one JSON object: ``workflow`` (its row), ``parent`` (the parent's id
    of a child run, else null), ``steps`` and ``calls`` (their rows, every field; errors as
    ``{type, message, traceback}``; a wait of a closed workflow with the state `shown_call`
    gives; a child run's wait has its id in ``details.child``), ``hooks`` (its end-hook
    outbox rows, one per end, every field) and ``messages`` (an agent run's conversation,
    ``agentq.cli.conversation.messages_json``; null for other workflows)."""
    return json_line(
        {
            "workflow": dataclasses.asdict(wf),
            "parent": parent,
            "steps": [dataclasses.asdict(row) for row in steps],
            "calls": [
                {**dataclasses.asdict(row), "state": shown_call(wf, row).state} for row in calls
            ],
            "hooks": [dataclasses.asdict(row) for row in hooks],
            "messages": messages,
        }
    )


def event_json(event: Event) -> str:
    """One event as one line of JSON: seq, at (Unix seconds), workflow_id, step_index,
    step_name, kind, attempt, worker_id and data (the event's whole payload)."""
    return json_line(
        {
            "seq": event.seq,
            "at": event.timestamp,
            "workflow_id": event.workflow_id,
            "step_index": event.step_index,
            "step_name": event.step_name,
            "kind": event.kind.value,
            "attempt": event.attempt,
            "worker_id": event.worker_id,
            "data": event.data,
        }
    )


def workflow_line(wf: WorkflowRow) -> str:
    """One workflow as one line of JSON (``ls --json``): workflow_id, definition, state,
    steps (names), reason, created_at, updated_at (Unix seconds), last_seq and deadline (Unix
    seconds or null)."""
    return json_line({
        "workflow_id": wf.workflow_id, "definition": wf.definition, "state": wf.state.value,
        "steps": list(wf.step_names), "reason": wf.reason, "created_at": wf.created_at,
        "updated_at": wf.updated_at, "last_seq": wf.last_seq, "deadline": wf.deadline,
    })


def schedules_table(schedules: Sequence[ScheduleRow]) -> Table:
    """One row per schedule: name, definition, spec, next tick, last instance, input."""
    table = Table(title=f"{len(schedules)} schedule(s)", title_justify="left")
    for name in ("schedule", "definition", "spec", "next tick (UTC)", "last instance",
                 "input"):
        table.add_column(name, overflow="fold")
    for row in schedules:
        _row(table, row.name, row.definition, row.spec, when(row.next_tick),
             row.last_instance or "", short(row.input))
    return table


def schedule_line(row: ScheduleRow) -> str:
    """One schedule as one line of JSON (``schedules --json``): name, definition, cron (or
    null), every (seconds or null), input, next_tick, updated_at, last_tick (Unix seconds or
    null) and last_instance (a workflow id or null)."""
    return json_line({
        "name": row.name, "definition": row.definition, "cron": row.cron, "every": row.every,
        "input": row.input, "next_tick": row.next_tick, "updated_at": row.updated_at,
        "last_tick": row.last_tick, "last_instance": row.last_instance,
    })
