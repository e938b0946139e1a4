"""What the commands print: rich tables of workflows, steps, calls, waits and events.

Pure functions of the store's rows (no I/O, no clock: "now" is an argument); the commands
print what they return. Long values are shortened with '…' so a table stays readable; ``show``
and ``events --json`` give the whole values.
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

from agentq.events import Event
from agentq.store import CallRow, StepRow, StepState, WorkflowRow, shown_call

__all__ = [
    "event_json",
    "events_table",
    "short",
    "when",
    "workflow_json",
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
    """Unix seconds as ``YYYY-MM-DD HH:MM:SS`` UTC ('' for None)."""
    if seconds is None:
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def short(value: Any, limit: int = 60) -> str:
    """`value` as one line of at most `limit` characters (JSON for non-strings)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _state(value: str) -> Text:
    return Text(value, style=_STYLES.get(value, ""))


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
        table.add_row(
            wf.workflow_id, wf.definition or "", _state(wf.state.value),
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
        note = short(row.output) if row.state is StepState.COMPLETED else short(row.reason)
        error = None if row.error is None else short(str(row.error), 80)
        if error and error != note and not (note or "").startswith(error):  # said once
            note = f"{note}\n{error}" if note else error
        attempt = str(row.attempt) + (f" +{row.recoveries} lost" if row.recoveries else "")
        table.add_row(
            str(row.step_index), row.step_name, _state(row.state.value), attempt,
            row.worker_id or "", when(row.started_at), when(row.finished_at), note,
        )
    return table


def _calls_table(wf: WorkflowRow, calls: Sequence[CallRow]) -> Table:
    table = Table(title="durable calls and waits", title_justify="left")
    for name in ("key", "kind", "step", "state", "label", "runs", "duration",
                 "output / reason"):
        table.add_column(name, overflow="fold")
    for row in calls:
        note = short(row.output) if row.output is not None else short(row.reason)
        if row.error is not None:
            note = short(str(row.error), 80)
        table.add_row(
            row.key, row.kind.value, str(row.step_index), _state(shown_call(wf, row).state),
            short(row.label, 60), str(row.runs), _seconds(row.duration), note,
        )
    return table


def _waits_table(steps: Sequence[StepRow]) -> Table | None:
    waiting = [row for row in steps if row.state is StepState.WAITING]
    if not waiting:
        return None
    table = Table(title="waiting for input", title_justify="left")
    for name in ("#", "step", "question", "key", "details", "deadline (UTC)"):
        table.add_column(name, overflow="fold")
    for row in waiting:
        table.add_row(
            str(row.step_index), row.step_name, short(row.reason, 120), row.wait_key or "",
            short(row.wait_details, 120), when(row.wait_deadline),
        )
    return table


def workflow_view(
    wf: WorkflowRow, steps: Sequence[StepRow], calls: Sequence[CallRow],
    forked: Mapping[str, Any] | None = None,
) -> Group:
    """One workflow in full: its header (with its parent, given the data of its
    `WorkflowForked` event), steps, waits (with details) and durable calls."""
    head = Text()
    head.append(f"workflow {wf.workflow_id}  ", style="bold")
    head.append(wf.state.value, style=_STYLES.get(wf.state.value, ""))
    if wf.definition is not None:
        head.append(f"  (definition {wf.definition})")
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
        head.append(f"\nforked from {forked.get('parent')} at {point}{replaced}")
    head.append(f"\ninput: {short(wf.input, 200)}")
    if wf.reason:
        head.append(f"\nreason: {short(wf.reason, 200)}")
    parts: list[Any] = [head, _steps_table(steps)]
    waits = _waits_table(steps)
    if waits is not None:
        parts.append(waits)
    if calls:
        parts.append(_calls_table(wf, calls))
    return Group(*parts)


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
        table.add_row(
            str(event.seq), when(event.timestamp), event.workflow_id, step,
            _state_kind(event.kind.value), "" if event.attempt is None else str(event.attempt),
            event.worker_id or "", _event_note(event),
        )
    return table


def _state_kind(kind: str) -> Text:
    if kind.endswith(("Failed", "TimedOut")):
        return Text(kind, style="red")
    if kind.endswith("Completed"):
        return Text(kind, style="green")
    if kind in ("StepWaiting", "WorkflowCancelled"):
        return Text(kind, style="yellow")
    return Text(kind)


def workflow_json(
    wf: WorkflowRow, steps: Sequence[StepRow], calls: Sequence[CallRow]
) -> str:
    """One workflow as one JSON object: ``workflow`` (its row), ``steps`` and ``calls`` (their
    rows, every field; errors as ``{type, message, traceback}``; a wait of a closed workflow
    with the state `shown_call` gives)."""
    return json.dumps(
        {
            "workflow": dataclasses.asdict(wf),
            "steps": [dataclasses.asdict(row) for row in steps],
            "calls": [
                {**dataclasses.asdict(row), "state": shown_call(wf, row).state} for row in calls
            ],
        },
        ensure_ascii=False,
        default=str,
    )


def event_json(event: Event) -> str:
    """One event as one line of JSON: seq, at (Unix seconds), workflow_id, step_index,
    step_name, kind, attempt, worker_id and data (the event's whole payload)."""
    return json.dumps(
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
        },
        ensure_ascii=False,
    )
