"""The small pieces every agentq HTML view is made of: escaping, colours, badges, durations.

A foundation module: pure functions of their arguments (no widgets, no I/O) that import
nothing of agentq. The workflow model's ``_repr_html_`` (a `RunResult` or a `StepStatus` at the
end of a notebook cell) and the renderers of `agentq.widgets.html` are built from them, so the
model reaches its HTML without importing the notebook layer above it.

Every user-supplied string goes through `esc` (or `short`, which escapes too): a step named
``<img src=x onerror=alert(1)>`` shows as text.
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "COLORS",
    "FONT",
    "LABELS",
    "MUTED",
    "badge",
    "clock_text",
    "error_html",
    "esc",
    "fmt_seconds",
    "json_text",
    "more_html",
    "short",
]

COLORS: dict[str, tuple[str, str]] = {
    # status or outcome: (strong colour for bars and text, light background for badges)
    "pending": ("#6b7280", "#f3f4f6"),
    "leased": ("#2563eb", "#dbeafe"),
    "running": ("#2563eb", "#dbeafe"),
    "waiting": ("#d97706", "#fef3c7"),
    "waited": ("#f59e0b", "#fef3c7"),
    "resumed": ("#fbbf24", "#fef3c7"),
    "completed": ("#16a34a", "#dcfce7"),
    "failed": ("#dc2626", "#fee2e2"),
    "timeout": ("#ea580c", "#ffedd5"),
    "lost": ("#7c3aed", "#ede9fe"),
    "cancelled": ("#475569", "#e2e8f0"),
    "backoff": ("#9ca3af", "#f3f4f6"),
    "error": ("#dc2626", "#fee2e2"),
    "in_doubt": ("#be185d", "#fce7f3"),  # a durable call started and never recorded as done
}
"""Colour of each status and span outcome: ``(strong, light)`` CSS colours."""

LABELS = {"leased": "running", "in_doubt": "in doubt"}
FONT = (
    "font-family:var(--jp-ui-font-family,system-ui,-apple-system,sans-serif);font-size:12px;"
    "color:var(--jp-ui-font-color1,#1f2937);line-height:1.4"
)
MUTED = "color:var(--jp-ui-font-color2,#6b7280)"


def esc(value: object) -> str:
    """Return ``str(value)`` escaped for HTML text and attribute values (quotes included)."""
    return html.escape(str(value), quote=True)


def short(value: object, limit: int = 80) -> str:
    """Escape `value`, shortened to `limit` characters (the full text goes in a title)."""
    text = str(value)
    if len(text) <= limit:
        return esc(text)
    return f'<span title="{esc(text[:2000])}">{esc(text[: limit - 1])}…</span>'


def json_text(value: Any, limit: int = 120) -> str:
    """Return `value` as JSON text, escaped and shortened to `limit` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except ValueError:
        text = repr(value)
    return short(text, limit)


def fmt_seconds(seconds: float | None) -> str:
    """Format a duration in seconds for people: ``850 ms``, ``1.25 s``, ``3 m 05 s``."""
    if seconds is None:
        return ""
    if seconds < 0.001:
        return "<1 ms" if seconds > 0 else "0 s"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} m {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} m"


def clock_text(seconds: float) -> str:
    """Return Unix seconds as ``HH:MM:SS UTC``."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%H:%M:%S UTC")


def badge(status: str, label: str | None = None) -> str:
    """Return a coloured pill for a status (`StepState`, workflow state or span outcome)."""
    strong, light = COLORS.get(status, COLORS["pending"])
    text = label if label is not None else LABELS.get(status, status)
    return (
        f'<span data-agentq="badge" data-status="{esc(status)}" style="background:{light};'
        f"color:{strong};border:1px solid {strong}33;border-radius:9999px;padding:0 8px;"
        f'font-size:11px;font-weight:600;white-space:nowrap">{esc(text)}</span>'
    )


def more_html(hidden: int, what: str) -> str:
    """Return the "n more" line for `hidden` items not shown ('' when none)."""
    if hidden <= 0:
        return ""
    return (
        f'<div data-agentq="more" data-hidden="{hidden}" style="{MUTED};padding:4px 6px;'
        f'font-style:italic">… {hidden} more {esc(what)} not shown</div>'
    )


def error_html(error: BaseException, title: str = "refresher stopped") -> str:
    """Return a red banner describing `error` (type and message, escaped)."""
    return (
        f'<div data-agentq="error" style="{FONT};background:#fee2e2;color:#991b1b;'
        f'border:1px solid #fca5a5;border-radius:6px;padding:6px 10px">'
        f"<b>{esc(title)}:</b> {esc(type(error).__name__)}: {short(error, 300)}"
        f"<br><span style=\"font-size:11px\">Run <code>await ….stop()</code> to see the "
        f"traceback.</span></div>"
    )
