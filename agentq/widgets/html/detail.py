"""Detail views of one workflow, one step, one durable call: pure HTML of a `DetailSnapshot`.

`workflow_detail_html`, `step_detail_html` and `call_detail_html` take the snapshot that
`agentq.widgets.models.detail.load_detail` reads and "now" (Unix seconds), and return HTML that
needs no script: long values (JSON longer than `FOLD_AT` characters or 12 lines, tracebacks) are
folded in ``<details>`` elements, which a browser opens on a click without JavaScript. Every
value shown (ids, names, inputs, outputs, errors, tracebacks, labels, usage) is escaped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentq.markup import (
    FONT,
    MUTED,
    badge,
    clock_text,
    esc,
    esc_text,
    fmt_seconds,
    json_parts,
    json_text,
    more_html,
    parts_html,
)
from agentq.outcomes import ErrorInfo
from agentq.store import CallRow, StepRow, WorkflowRow, shown_call
from agentq.widgets.html.results import countdown_text
from agentq.widgets.models.detail import DetailSnapshot, attempts_of, shown_step

__all__ = [
    "FOLD_AT",
    "call_detail_html",
    "error_block_html",
    "json_html",
    "step_detail_html",
    "workflow_detail_html",
]

FOLD_AT = 400
"""Pretty JSON longer than this many characters (or 12 lines) is folded in ``<details>``."""
SHOWN_AT_MOST = 20_000
"""Characters of a JSON value drawn at most (the rest is said, not drawn)."""

_PRE = (
    "margin:2px 0;padding:4px 6px;background:var(--jp-layout-color2,#f3f4f6);border-radius:3px;"
    "white-space:pre-wrap;word-break:break-word;max-height:360px;overflow:auto;font-size:11px"
)
_TABLE = "border-collapse:collapse"
_TD = "padding:2px 8px;vertical-align:top;text-align:left"


def json_html(value: Any, *, fold_at: int = FOLD_AT, shown: int = SHOWN_AT_MOST) -> str:
    """Return `value` as pretty JSON in a ``<pre>``, folded in ``<details>`` when long, and
    cut after `shown` characters (a page stays light; the store keeps the whole value)."""
    parts = json_parts(value, indent=2)  # each string isolated on its own (issue 22 #5)
    text = "".join(piece for piece, _ in parts)
    body = parts_html(parts)
    if len(text) > shown:
        kept: list[tuple[str, bool]] = []
        room = shown
        for piece, user in parts:
            if room <= 0:
                break
            kept.append((piece[:room], user))
            room -= len(piece)
        body = "".join(esc_text(p) if user else esc(p) for p, user in kept) + (
            f'<span data-agentq="cut" style="{MUTED}">\n… {len(text) - shown:,} more '
            "characters not shown (the store keeps the whole value)</span>"
        )
    pre = f'<pre data-agentq="json" style="{_PRE}">{body}</pre>'
    lines = text.count("\n") + 1
    if len(text) <= fold_at and lines <= 12:
        return pre
    head = json_text(value, 60)
    return (
        f'<details data-agentq="folded" data-chars="{len(text)}"><summary style="cursor:pointer">'
        f'{head} <span style="{MUTED}">({len(text):,} characters, {lines} lines)</span>'
        f"</summary>{pre}</details>"
    )


def error_block_html(error: ErrorInfo | Mapping[str, Any] | None) -> str:
    """Return an error's type and message, and its traceback folded; '' for None."""
    if error is None:
        return ""
    if isinstance(error, ErrorInfo):
        kind, message, trace = error.type, error.message, error.traceback
    else:
        kind = str(error.get("type", "")) or "error"
        message = str(error.get("message", ""))
        trace = str(error.get("traceback") or "")
    out = (
        f'<div data-agentq="detail-error" style="color:#b91c1c"><b>{esc_text(kind)}</b>: '
        f"{esc_text(message)}</div>"
    )
    if trace:
        out += (
            '<details data-agentq="traceback"><summary style="cursor:pointer">traceback'
            f'</summary><pre style="{_PRE}">{esc_text(trace)}</pre></details>'
        )
    return out


def _table(rows: Iterable[tuple[str, str]]) -> str:
    body = "".join(
        f'<tr><th style="{_TD};{MUTED};font-weight:500;white-space:nowrap">{esc_text(k)}</th>'
        f'<td style="{_TD}">{v}</td></tr>'
        for k, v in rows
        if v != ""
    )
    return f'<table style="border-collapse:collapse">{body}</table>'


def _when(at: float | None) -> str:
    return "" if at is None else esc_text(clock_text(at))


def _section(title: str, body: str) -> str:
    if not body:
        return ""
    return f'<div style="margin:6px 0 2px;font-weight:600">{esc_text(title)}</div>{body}'


def _frame(kind: str, attrs: str, title: str, body: str) -> str:
    return (
        f'<div data-agentq="detail" data-kind="{kind}" {attrs} style="{FONT};'
        'border:1px solid var(--jp-border-color2,#e5e7eb);border-radius:4px;padding:6px 10px">'
        f'<div style="font-size:13px;font-weight:600;margin-bottom:4px">{title}</div>{body}</div>'
    )


def _lasted(start: float | None, end: float | None, now: float) -> str:
    if start is None:
        return ""
    text = fmt_seconds((end if end is not None else now) - start)
    return esc_text(text if end is not None else f"{text} …")


def workflow_detail_html(snap: DetailSnapshot, *, now: float) -> str:
    """Render a workflow: state, reason, times, input, and a line per step and per call."""
    wf = snap.workflow
    end = wf.updated_at if wf.state.closed else None
    facts = _table([
        ("state", badge(wf.state.value)),
        ("reason", esc_text(wf.reason) if wf.reason else ""),
        ("started", _when(wf.created_at)),
        ("last event", _when(wf.updated_at)),
        ("duration", _lasted(wf.created_at, end, now)),
        ("deadline", _when(wf.deadline)),  # then it fails: WorkflowTimedOut
        ("events", str(len(snap.events))),
    ])
    steps = "".join(
        f'<tr data-agentq="detail-step" data-index="{s.step_index}"><td style="{_TD}">'
        f'{s.step_index}</td><td style="{_TD}">{esc_text(s.step_name)}</td><td style="{_TD}">'
        f'{badge(shown_step(s, wf))}</td><td style="{_TD}">{s.attempt}</td><td style="{_TD}">'
        f'{esc_text(s.worker_id or "")}</td><td style="{_TD}">'
        f"{_lasted(s.started_at, s.finished_at, now)}</td></tr>"
        for s in snap.steps
    )
    head = "".join(
        f'<th style="{_TD};{MUTED};font-weight:500">{h}</th>'
        for h in ("#", "step", "status", "attempt", "worker", "duration")
    )
    body = (
        facts
        + _section("Input", json_html(wf.input))
        + _section("Steps", f'<table style="{_TABLE}"><tr>{head}</tr>{steps}</table>')
        + _section("Calls", _calls_table(snap.workflow, snap.calls, now))
    )
    title = f"workflow {esc_text(wf.workflow_id)}"
    return _frame("workflow", f'data-workflow="{esc(wf.workflow_id)}"', title, body)


CALLS_LISTED = 50
"""Calls listed in a workflow's or step's detail (and in the pane's *show* list): the latest
ones, with "… n more calls not shown" above them (review 14 #3: a 3,000-call agent step drew
megabytes on every redraw). Any call is still shown alone by ``DetailPane.show(wf, call=key)``."""


def _calls_table(wf: WorkflowRow, calls: Iterable[CallRow], now: float) -> str:
    listed = list(calls)
    hidden = max(0, len(listed) - CALLS_LISTED)
    calls = listed[hidden:]
    rows = "".join(
        f'<tr data-agentq="detail-call" data-key="{esc(c.key)}"><td style="{_TD}">{esc_text(c.key)}'
        f'</td><td style="{_TD}">{esc_text(_call_name(c))}</td><td style="{_TD}">'
        f'{badge(shown_call(wf, c).state)}</td><td style="{_TD}">{c.runs}</td><td style="{_TD}">'
        f"{_lasted(c.started_at, shown_call(wf, c).finished_at, now)}</td><td style=\"{_TD}\">"
        f"{json_text(c.usage, 80) if c.usage else ''}</td></tr>"
        for c in calls
    )
    if not rows:
        return ""
    head = "".join(
        f'<th style="{_TD};{MUTED};font-weight:500">{h}</th>'
        for h in ("key", "name", "state", "runs", "duration", "usage")
    )
    return (f'{more_html(hidden, "calls (earlier)")}'
            f'<table style="border-collapse:collapse"><tr>{head}</tr>{rows}</table>')


def _call_name(call: CallRow) -> str:
    label = call.label or {}
    return str(label.get("tool") or label.get("kind") or call.kind.value)


def step_detail_html(snap: DetailSnapshot, index: int, *, now: float) -> str:
    """Render one step: status, worker and lease, input, output, error with its traceback,
    the wait and its resume input, every attempt with its timings, and the step's calls.

    Raises:
        KeyError: The workflow has no step `index`.
    """
    step = snap.step(index)
    if step is None:
        raise KeyError(f"workflow {snap.workflow.workflow_id!r} has no step {index!r}")
    lease = ""
    if step.lease_expires_at is not None:
        left = step.lease_expires_at - now
        lease = esc_text(f"token {step.lease_token}, expires {clock_text(step.lease_expires_at)}"
                    f" ({'in ' + fmt_seconds(left) if left >= 0 else 'expired'})")
    elif step.lease_token:
        lease = esc_text(f"token {step.lease_token} (released)")
    facts = _table([
        ("status", badge(shown_step(step, snap.workflow))),
        ("attempt", str(step.attempt)),
        ("worker", esc_text(step.worker_id or "")),
        ("lease", lease),
        ("reason", esc_text(step.reason or "")),
        ("retry at", _when(step.retry_at)),
        ("started", _when(step.started_at)),
        ("finished", _when(step.finished_at)),
        ("duration", _lasted(step.started_at, step.finished_at, now)),
        ("recoveries", str(step.recoveries) if step.recoveries else ""),
    ])
    previous = snap.step(index - 1) if index > 0 else None
    body = facts + _section("Input (the workflow's)", json_html(snap.workflow.input))
    if previous is not None and previous.output is not None:
        body += _section("Previous step's output", json_html(previous.output))
    if step.output is not None:
        body += _section("Output", json_html(step.output))
    body += _section("Error", error_block_html(step.error))
    body += _section("Wait", _wait_facts(step, now))
    if step.resumed:
        body += _section("Resume input", json_html(step.resume_input))
    body += _section("Attempts", _attempts_table(snap, index, now))
    body += _section("Calls", _calls_table(snap.workflow,
                                            (c for c in snap.calls if c.step_index == index), now))
    wf = snap.workflow.workflow_id
    attrs = f'data-workflow="{esc(wf)}" data-step="{esc(step.step_name)}" data-index="{index}"'
    return _frame("step", attrs, f"step {esc_text(step.step_name)} <span style=\"{MUTED}\">of "
                  f"{esc_text(wf)}</span>", body)


def _wait_facts(step: StepRow, now: float) -> str:
    if step.wait_key is None and step.wait_details is None and step.wait_deadline is None:
        return ""
    deadline = ""
    if step.wait_deadline is not None:
        left = step.wait_deadline - now
        deadline = esc_text(f"{clock_text(step.wait_deadline)} "
                       f"({'in ' + countdown_text(left) if left >= 0 else 'passed'})")
    return _table([
        ("key", esc_text(step.wait_key or "")),
        ("deadline", deadline),
    ]) + (json_html(step.wait_details) if step.wait_details is not None else "")


def _attempts_table(snap: DetailSnapshot, index: int, now: float) -> str:
    rows = []
    for a in attempts_of(snap.events, index):
        error = error_block_html(a.error) if a.error else esc_text(a.reason or "")
        rows.append(
            f'<tr data-agentq="attempt" data-attempt="{a.number}" data-outcome="{esc(a.outcome)}">'
            f'<td style="{_TD}">{a.number}</td><td style="{_TD}">{badge(a.outcome)}</td>'
            f'<td style="{_TD}">{_when(a.started)}</td><td style="{_TD}">'
            f'{_lasted(a.started, a.ended, now)}</td><td style="{_TD}">'
            f'{esc_text(a.worker_id or "")}'
            f'</td><td style="{_TD}">{"" if a.lease_token is None else a.lease_token}</td>'
            f'<td style="{_TD}">{error}</td></tr>'
        )
    if not rows:
        return ""
    head = "".join(
        f'<th style="{_TD};{MUTED};font-weight:500">{h}</th>'
        for h in ("#", "outcome", "started", "took", "worker", "lease", "error / reason")
    )
    return f'<table style="border-collapse:collapse"><tr>{head}</tr>{"".join(rows)}</table>'


def call_detail_html(snap: DetailSnapshot, key: str, *, now: float) -> str:
    """Render one durable call or wait: state, runs, timings, label, usage, output, error.

    Raises:
        KeyError: The workflow has no call or wait with `key`.
    """
    call = snap.call(key)
    if call is None:
        raise KeyError(f"workflow {snap.workflow.workflow_id!r} has no call {key!r}")
    step = snap.step(call.step_index)
    shown = shown_call(snap.workflow, call)
    facts = _table([
        ("kind", esc_text(call.kind.value)),
        ("state", badge(shown.state)),
        ("step", esc_text(step.step_name if step else call.step_index)),
        ("attempt", str(call.attempt)),
        ("runs", str(call.runs)),
        ("lane", esc_text(call.lane or "")),
        ("fingerprint", esc_text(call.fingerprint or "")),
        ("started", _when(call.started_at)),
        ("finished", _when(shown.finished_at)),
        ("duration", esc_text(fmt_seconds(call.duration)) if call.duration is not None
         else _lasted(call.started_at, shown.finished_at, now)),
        ("reason", esc_text(call.reason or "")),
    ])
    body = facts
    if call.label:
        body += _section("Label", json_html(call.label))
    if call.usage:
        usage = _table((str(k), json_text(v, 200)) for k, v in call.usage.items())
        body += f'<div data-agentq="usage">{_section("Usage", usage)}</div>'
    if call.details is not None:
        body += _section("Details", json_html(call.details))
    if call.output is not None:
        title = "Output" if call.kind.value == "call" else "Answer"
        body += _section(title, json_html(call.output))
    body += _section("Error", error_block_html(call.error))
    wf = snap.workflow.workflow_id
    attrs = f'data-workflow="{esc(wf)}" data-key="{esc(key)}"'
    return _frame("call", attrs, f"call {esc_text(key)} <span style=\"{MUTED}\">of "
                  f"{esc_text(wf)}</span>", body)
