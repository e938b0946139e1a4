"""The conversation view of an agent run, a comparison of two runs, a page of events. Pure HTML.

Renders `agentq.widgets.models.conversation` values: `head_html` (the final answer on top, then
what it cost, the lineage of a fork, the prompt and the run options), `turn_html` (a model
request: model, tokens, cost, latency, the response's text or the text streamed so far, its
error), `tool_html` (a tool call as a card: arguments, result, approvals, child runs nested),
`conversation_html` (all of them: the export's view and the view without ipywidgets),
`compare_html` (two runs side by side) and `events_html` (a page of a workflow's events).

Keys, fingerprints, lanes, attempts and lease tokens appear only with ``details=True`` (the
view's "details" toggle). Every user string is escaped and isolated per value
(`agentq.markup.esc_text`, `json_parts`), and long text wraps inside its card (nothing is cut
off at 1000 px); labels never wrap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.markup import FONT, MUTED, badge, clock_text, esc, esc_text, fmt_seconds, json_text
from agentq.widgets.html.detail import json_html
from agentq.widgets.models.conversation import (
    ApprovalAsk,
    ChildRun,
    Conversation,
    Detail,
    ToolCard,
    Turn,
)
from agentq.widgets.models.runs import Comparison, EventPage, event_data

__all__ = [
    "compare_html",
    "conversation_html",
    "cost_text",
    "events_html",
    "head_html",
    "tool_html",
    "turn_html",
]

_CARD = ("border:1px solid var(--jp-border-color2,#e5e7eb);border-radius:6px;padding:6px 10px;"
         "margin:4px 0;background:var(--jp-layout-color1,#fff);min-width:0;box-sizing:border-box")
_TEXT = "white-space:pre-wrap;overflow-wrap:anywhere;margin:4px 0"
_LINE = "display:flex;flex-wrap:wrap;gap:4px 10px;align-items:baseline;white-space:nowrap"
_NOWRAP = "white-space:nowrap"
_NONE = "\u2013"  # an en dash: no value
_EDITED = ('<span data-agentq="edited" style="background:#fef3c7;color:#92400e;border-radius:4px;'
           'padding:0 6px;font-size:11px;white-space:nowrap">edited in this fork</span>')
_STATES = {"asked": "pending", "started": "running", "denied": "cancelled", "answered": "completed"}


def cost_text(cost: float | None) -> str:
    """A cost for people: ``0.0123`` (4 decimals under 1, else 2); ``-`` when unknown."""
    if cost is None:
        return _NONE
    return f"{cost:.4f}" if cost < 1 else f"{cost:,.2f}"


def _fact(name: str, value: str) -> str:
    return f'<span style="{_NOWRAP}"><span style="{MUTED}">{esc(name)}</span> {value}</span>'


def _details(rows: Sequence[Detail]) -> str:
    lines = "".join(
        f'<div style="{_NOWRAP}">{esc_text(d.key)} · {esc(d.state)} · run {d.runs} · attempt '
        f'{d.attempt} · lane {esc_text(d.lane or _NONE)} · fingerprint '
        f'{esc_text((d.fingerprint or _NONE)[:24])}</div>'
        for d in rows
    )
    return (f'<div data-agentq="keys" style="{MUTED};font-size:11px;font-family:var('
            f'--jp-code-font-family,monospace);overflow-x:auto">{lines}</div>')


def _text(value: Any) -> str:
    if isinstance(value, str):
        return f'<div style="{_TEXT}">{esc_text(value)}</div>'
    return json_html(value)


def head_html(conv: Conversation, *, details: bool = False) -> str:
    """The top of the view: the final answer (or where the run is), its totals, its lineage,
    the prompt and the stored run options."""
    i, o = conv.tokens
    if conv.state == "completed":
        answer = (f'<div data-agentq="final-answer" style="{_CARD};border-color:#16a34a55">'
                  f'<div style="{MUTED};font-size:11px">Answer</div>{_text(conv.output)}</div>')
    elif conv.error:
        answer = (f'<div data-agentq="run-error" style="{_CARD};border-color:#dc262655;'
                  f'color:#991b1b"><b>{esc(conv.state)}:</b> {esc_text(conv.error)}</div>')
    else:
        waiting = len(conv.waiting())
        note = f" · {waiting} approval(s) wait below" if waiting else ""
        answer = (f'<div data-agentq="final-answer" data-pending="1" style="{_CARD};{MUTED}">'
                  f"No answer yet{esc(note)}.</div>")
    totals = (
        f'<div data-agentq="run-totals" data-input-tokens="{i}" data-output-tokens="{o}" '
        f'data-cost="{"" if conv.cost is None else f"{conv.cost:.6f}"}" style="{_LINE}">'
        f'<b style="{_NOWRAP}">{esc_text(conv.run_id)}</b> {badge(conv.state)}'
        f'{_fact("requests", str(len(conv.turns)))}{_fact("tokens", f"{i:,} in · {o:,} out")}'
        f'{_fact("cost", cost_text(conv.cost))}{_fact("time", fmt_seconds(conv.seconds))}</div>'
    )
    lineage = ""
    if conv.forked_from is not None:
        parent, at, edited = conv.forked_from
        edits = (" · edited: " + ", ".join(esc_text(k) for k in edited)) if edited else ""
        lineage = (f'<div data-agentq="lineage" data-parent="{esc(parent)}" data-at="{esc(at)}" '
                   f'style="{MUTED};{_NOWRAP}">forked from <b>{esc_text(parent)}</b> at '
                   f"{esc_text(at)}{edits}</div>")
    options = "".join(
        f"<div>{_fact(name, json_text(value, 200))}</div>" for name, value in conv.options.items()
    )
    prompt = (f'<div data-agentq="prompt" style="{_CARD};background:var(--jp-layout-color2,'
              f'#f9fafb)"><div style="{MUTED};font-size:11px">Prompt</div>{_text(conv.prompt)}'
              f"{options}</div>")
    keys = ""
    if details and conv.details:
        keys = (f'<div data-agentq="keys" style="{MUTED};font-size:11px">'
                + "".join(f"<div>{esc(a)}: {esc_text(b)}</div>" for a, b in conv.details)
                + "</div>")
    return f"{answer}{totals}{lineage}{keys}{prompt}"


def turn_html(turn: Turn, *, details: bool = False) -> str:
    """A model request: a line of facts, then its text (or the text streamed so far)."""
    facts = (
        f'<b style="{_NOWRAP}">model request {turn.number}</b> '
        f"{badge(_STATES.get(turn.state, turn.state))}"
        f'{_fact("model", esc_text(turn.model or _NONE))}'
        f'{_fact("tokens", f"{turn.input_tokens:,} in · {turn.output_tokens:,} out")}'
        f'{_fact("cost", cost_text(turn.cost))}'
        f'{_fact("latency", fmt_seconds(turn.duration) or "…")}'
        f"{_EDITED if turn.edited else ''}"
    )
    body = ""
    if turn.state == "started":
        text = turn.partial or ""
        body = (f'<div data-agentq="partial" data-chars="{len(text)}" style="{_TEXT}">'
                f'{esc_text(text)}<span style="{MUTED}"> ▍ streaming…</span></div>'
                if turn.partial is not None else
                f'<div style="{MUTED}">waiting for the model…</div>')
    elif turn.text:
        body = f'<div data-agentq="turn-text" style="{_TEXT}">{esc_text(turn.text)}</div>'
    elif turn.state == "completed" and not turn.tools:
        body = f'<div style="{MUTED}">(no text)</div>'
    if turn.error:
        body += (f'<div data-agentq="turn-error" style="color:#991b1b;{_TEXT}">'
                 f"{esc_text(turn.error)}</div>")
    keys = _details(turn.details) if details else ""
    cost = "" if turn.cost is None else f"{turn.cost:.6f}"
    return (
        f'<div data-agentq="turn" data-key="{esc(turn.key)}" data-state="{esc(turn.state)}" '
        f'data-model="{esc(turn.model or "")}" data-input-tokens="{turn.input_tokens}" '
        f'data-output-tokens="{turn.output_tokens}" data-cost="{cost}" style="{FONT};{_CARD}">'
        f'<div style="{_LINE}">{facts}</div>{body}{keys}</div>'
    )


def _ask_html(ask: ApprovalAsk) -> str:
    if ask.state == "waiting":
        text = "waits for approval"
    elif ask.state == "timed_out":
        text = "approval timed out"
    elif ask.state in ("cancelled", "failed"):  # the run closed while it waited (`shown_call`)
        text = f"approval {ask.state}"
    elif ask.approved is None:
        text = "answer not understood: asked again"
    else:
        text = "approved" if ask.approved else "denied"
    edited = ("" if ask.override_args is None
              else f" with arguments {json_text(ask.override_args, 200)}")
    note = f" · note: {esc_text(ask.note)}" if ask.note else ""
    approved = "" if ask.approved is None else str(ask.approved).lower()
    return (f'<div data-agentq="approval-ask" data-key="{esc(ask.key)}" '
            f'data-state="{esc(ask.state)}" data-approved="{approved}" style="{MUTED}">'
            f"{esc(text)}{edited}{note}</div>")


def _child_html(child: ChildRun, details: bool) -> str:
    inner = (conversation_html(child.conversation, details=details)
             if child.conversation is not None else
             (json_html(child.output) if child.output is not None else ""))
    return (f'<details open data-agentq="child-run" data-workflow="{esc(child.workflow_id)}" '
            f'style="margin:4px 0 4px 12px;border-left:3px solid #93c5fd;padding-left:8px">'
            f'<summary style="cursor:pointer;{_NOWRAP}">child run <b>{esc_text(child.workflow_id)}'
            f"</b> {badge(_STATES.get(child.state, child.state))}</summary>{inner}</details>")


def tool_html(card: ToolCard, *, details: bool = False) -> str:
    """A tool call as a card: tool, state, duration, arguments, result or error, approvals,
    and the child runs it started (nested)."""
    head = (f'<span style="{_NOWRAP}"><span style="{MUTED}">tool</span> '
            f"<b>{esc_text(card.tool)}</b></span> "
            f"{badge(_STATES.get(card.state, card.state))}"
            f"{_EDITED if card.edited else ''}")
    if card.duration is not None and not card.edited:  # an edited result never ran
        head += _fact("took", fmt_seconds(card.duration))
    args = (f'<div data-agentq="tool-args"><span style="{MUTED};font-size:11px">arguments'
            f"</span>{json_html(card.args)}</div>")
    result = ""
    if card.state == "completed":
        result = (f'<div data-agentq="tool-result"><span style="{MUTED};font-size:11px">result'
                  f"</span>{json_html(card.result)}</div>")
    elif card.waiting_on is not None:
        result = (f'<div data-agentq="tool-waiting" style="{MUTED}">'
                  f"waits for {esc_text(card.waiting_on)}</div>")
    elif card.error:
        result = (f'<div data-agentq="tool-error" style="color:#991b1b;{_TEXT}">'
                  f"{esc_text(card.error)}</div>")
    asks = "".join(_ask_html(a) for a in card.approvals)
    kids = "".join(_child_html(c, details) for c in card.children)
    keys = _details(card.details) if details else ""
    return (
        f'<div data-agentq="tool-card" data-tool="{esc(card.tool)}" '
        f'data-call-id="{esc(card.tool_call_id)}" data-state="{esc(card.state)}" '
        f'data-key="{esc(card.key or "")}" style="{FONT};{_CARD};margin-left:24px;'
        f'border-left:3px solid #a5b4fc">'
        f'<div style="{_LINE}">{head}</div>{args}{result}{asks}{kids}{keys}</div>'
    )


def conversation_html(conv: Conversation, *, details: bool = False) -> str:
    """The whole conversation as one HTML fragment (the export's view; a nested child's)."""
    body = [head_html(conv, details=details)]
    for turn in conv.turns:
        body.append(turn_html(turn, details=details))
        body.extend(tool_html(card, details=details) for card in turn.tools)
    body.extend(_child_html(c, details) for c in conv.children)
    return (f'<div data-agentq="conversation" data-run="{esc(conv.run_id)}" '
            f'style="{FONT};max-width:100%">{"".join(body)}</div>')


def _side(conv: Conversation, at: int | None) -> str:
    rows = []
    for n, turn in enumerate(conv.turns):
        mark = ' data-diverged="1" style="outline:2px solid #f59e0b"' if n == at else ""
        tools = "".join(
            f'<div style="{MUTED};margin-left:12px">tool {esc_text(c.tool)} '
            f"{json_text(c.args, 80)} → {json_text(c.result, 80)}</div>" for c in turn.tools)
        text = f'<div style="{_TEXT}">{esc_text(turn.text)}</div>' if turn.text else ""
        rows.append(f"<div{mark}><b>request {turn.number}</b>{text}{tools}</div>")
    i, o = conv.tokens
    return (
        f'<div data-agentq="compare-side" data-run="{esc(conv.run_id)}" '
        f'data-input-tokens="{i}" data-output-tokens="{o}" style="{_CARD};flex:1 1 0;'
        f'min-width:0"><div style="{_LINE}"><b>{esc_text(conv.run_id)}</b>'
        f'{badge(conv.state)}</div>{"".join(rows)}</div>'
    )


def _summary(a: Conversation, b: Conversation) -> str:
    """The two runs' answers and totals in one table, a row per figure."""
    cell = "padding:3px 10px;vertical-align:top;text-align:left;border-top:1px solid #e5e7eb"

    def answer(c: Conversation) -> str:
        if c.state == "completed":
            return _text(c.output)
        return esc_text(c.error) if c.error else f'<span style="{MUTED}">{esc(c.state)}</span>'

    def lineage(c: Conversation) -> str:
        if c.forked_from is None:
            return _NONE
        return f"fork of {esc_text(c.forked_from.parent)} at {esc_text(c.forked_from.at)}"

    figures = [
        ("answer", answer),
        ("requests", lambda c: str(len(c.turns))),
        ("tokens", lambda c: f"{c.tokens[0]:,} in · {c.tokens[1]:,} out"),
        ("cost", lambda c: cost_text(c.cost)),
        ("time", lambda c: fmt_seconds(c.seconds) or _NONE),
        ("lineage", lineage),
    ]
    head = (f'<tr><th style="{cell}"></th><th style="{cell}">{esc_text(a.run_id)}</th>'
            f'<th style="{cell}">{esc_text(b.run_id)}</th></tr>')
    rows = "".join(
        f'<tr data-agentq="compare-row" data-figure="{name}"><th style="{cell};{MUTED};'
        f'font-weight:normal;{_NOWRAP}">{name}</th><td style="{cell};width:45%">{f(a)}</td>'
        f'<td style="{cell};width:45%">{f(b)}</td></tr>'
        for name, f in figures
    )
    return (f'<table data-agentq="compare-summary" style="border-collapse:collapse;width:100%;'
            f'table-layout:fixed;margin:4px 0">{head}{rows}</table>')


def compare_html(comparison: Comparison) -> str:
    """Two runs side by side: the first point where they differ, a table of their answers,
    requests, tokens, cost, time and lineage, then each run's requests (text, tool calls and
    results), the differing request outlined."""
    a, b = comparison.a, comparison.b
    why = comparison.why
    at = "" if comparison.diverged_at is None else str(comparison.diverged_at)
    return (
        f'<div data-agentq="compare" data-diverged="{at}" style="{FONT}">'
        f'<div style="{_NOWRAP};margin:4px 0"><b>{esc_text(a.run_id)}</b> vs '
        f'<b>{esc_text(b.run_id)}</b>: <span data-agentq="divergence">{esc(why)}</span></div>'
        f"{_summary(a, b)}"
        f'<div style="display:flex;gap:8px;align-items:flex-start">'
        f"{_side(a, comparison.diverged_at)}{_side(b, comparison.diverged_at)}</div></div>"
    )


def events_html(page: EventPage) -> str:
    """A page of a workflow's events: seq, time, step, kind, attempt, worker, data."""
    cell = "padding:2px 8px;vertical-align:top;text-align:left;white-space:nowrap"
    head = "".join(f'<th style="{cell}">{h}</th>' for h in
                   ("seq", "at", "step", "kind", "attempt", "worker", "data"))
    rows = []
    for e in page.events:
        step = "" if e.step_index is None else f"{e.step_index} {e.step_name or ''}"
        rows.append(
            f'<tr data-agentq="event-row" data-seq="{e.seq}" data-kind="{esc(e.kind.value)}">'
            f'<td style="{cell}">{e.seq}</td><td style="{cell}">{clock_text(e.timestamp)}</td>'
            f'<td style="{cell}">{esc_text(step)}</td><td style="{cell}">{esc(e.kind.value)}'
            f'</td><td style="{cell}">{"" if e.attempt is None else e.attempt}</td>'
            f'<td style="{cell}">{esc_text(e.worker_id or "")}</td><td style="padding:2px 8px;'
            f'overflow-wrap:anywhere">{json_text(event_data(e), 160)}</td></tr>')
    empty = "" if rows else f'<tr><td colspan="7" style="{MUTED}">no events</td></tr>'
    return (f'<div data-agentq="events" data-after="{page.after}" style="{FONT};'
            f'overflow-x:auto"><table style="border-collapse:collapse;width:100%">'
            f'<tr>{head}</tr>{"".join(rows)}{empty}</table></div>')
