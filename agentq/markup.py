"""The small pieces every agentq HTML view is made of: escaping, colours, badges, durations.

A foundation module: pure functions of their arguments (no widgets, no I/O) that import
nothing of agentq. The workflow model's ``_repr_html_`` (a `RunResult` or a `StepStatus` at the
end of a notebook cell) and the renderers of `agentq.widgets.html` are built from them, so the
model reaches its HTML without importing the notebook layer above it.

Every user-supplied string goes through `esc` (or `short`, which escapes too): a step named
``<img src=x onerror=alert(1)>`` shows as text. In text (not in attributes) it goes through
`esc_text` or `short`, which also isolate it (``<bdi>``) when it holds right-to-left characters or
bidi controls: a key ending in U+202E (right-to-left override) cannot reverse agentq's own
words after it ("completed", "6 ms", "of order-7").
"""

from __future__ import annotations

import html
import json
import unicodedata
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "COLORS",
    "FONT",
    "LABELS",
    "MUTED",
    "badge",
    "check_count",
    "clock_text",
    "error_html",
    "esc",
    "fmt_seconds",
    "json_text",
    "more_html",
    "short",
    "esc_text",
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


_BIDI = frozenset({"R", "AL", "LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})
"""Bidi classes that can reorder text around them (right-to-left letters, explicit controls)."""


def esc_text(value: object) -> str:
    """Return ``str(value)`` escaped for HTML text, isolated from the text around it.

    A string with a right-to-left character or a bidi control (U+202E...) is wrapped in
    ``<bdi>``, so it cannot reorder what follows it; others (all ASCII ones) are `esc` alone.
    For attribute values use `esc`.
    """
    raw = str(value)
    escaped = html.escape(raw, quote=True)
    if raw.isascii() or not any(unicodedata.bidirectional(c) in _BIDI for c in raw):
        return escaped
    return f"<bdi>{escaped}</bdi>"


def short(value: object, limit: int = 80) -> str:
    """`esc_text` of `value`, shortened to `limit` characters (the full text goes in a title)."""
    raw = str(value)
    if len(raw) <= limit:
        return esc_text(raw)
    return f'<span title="{esc(raw[:2000])}">{esc_text(raw[: limit - 1])}…</span>'


def check_count(value: object, name: str, *, least: int = 1) -> int:
    """Return `value` if it is an int >= `least`; the errors name the parameter `name`.

    Raises:
        TypeError: `value` is not an int (a bool, a float, a string...).
        ValueError: `value` < `least`.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= {least}, got {value!r}")
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value!r}")
    return value


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
