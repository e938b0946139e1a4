"""The small pieces every agentq HTML view is made of: escaping, colours, badges, durations.

A foundation module: pure functions of their arguments (no widgets, no I/O) that import
nothing of agentq. The workflow model's ``_repr_html_`` (a `RunResult` or a `StepStatus` at the
end of a notebook cell) and the renderers of `agentq.widgets.html` are built from them, so the
model reaches its HTML without importing the notebook layer above it.

Every user-supplied string goes through `esc` (or `short`, which escapes too): a step named
``<img src=x onerror=alert(1)>`` shows as text. In text (not in attributes) it goes through
`esc_text` or `short`, which also isolate it (``<bdi>``) when it holds right-to-left characters or
bidi controls: a key ending in U+202E (right-to-left override) cannot reverse agentq's own
words after it ("completed", "6 ms", "of order-7"). Each value is isolated on its own: JSON
gets one isolate per string (`json_text`, `json_parts`), and plain text that cannot hold
``<bdi>`` (an ``<option>`` label, a title composed of several values) isolates each value with
the Unicode isolates FSI … PDI (`isolate`). A value's own stray isolate controls are balanced,
so none can close the isolate around it early.
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
    "FSI",
    "PDI",
    "LABELS",
    "MUTED",
    "badge",
    "check_count",
    "clock_text",
    "error_html",
    "esc",
    "fmt_seconds",
    "isolate",
    "json_parts",
    "json_text",
    "parts_html",
    "more_html",
    "short",
    "esc_text",
    "utc_text",
]

COLORS: dict[str, tuple[str, str]] = {
    # status or outcome: (strong colour for bars and text, light background for badges).
    # Outcomes of different meaning are at least 25 apart (CIE76 ΔE; issue 22: "timed out"
    # read like "waiting"); shades of one meaning (a wait's phases) may be closer.
    "pending": ("#6b7280", "#f3f4f6"),
    "leased": ("#2563eb", "#dbeafe"),
    "running": ("#2563eb", "#dbeafe"),
    "started": ("#2563eb", "#dbeafe"),  # a durable call under way
    "waiting": ("#d97706", "#fef3c7"),
    "waited": ("#f59e0b", "#fef3c7"),
    "resumed": ("#fbbf24", "#fef3c7"),
    "completed": ("#16a34a", "#dcfce7"),
    "answered": ("#16a34a", "#dcfce7"),  # a wait answered
    "failed": ("#dc2626", "#fee2e2"),
    "timeout": ("#0d9488", "#ccfbf1"),
    "timed_out": ("#0d9488", "#ccfbf1"),  # a wait whose deadline passed
    "lost": ("#7c3aed", "#ede9fe"),
    "cancelled": ("#1e293b", "#e2e8f0"),
    "backoff": ("#9ca3af", "#f3f4f6"),
    "error": ("#dc2626", "#fee2e2"),
    "in_doubt": ("#be185d", "#fce7f3"),  # a durable call started and never recorded as done
}
"""Colour of each status and span outcome: ``(strong, light)`` CSS colours."""

LABELS = {"leased": "running", "in_doubt": "in doubt", "timed_out": "timed out"}
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

FSI = "\u2068"
"""FIRST STRONG ISOLATE: opens an isolate (its direction from its first strong letter)."""
PDI = "\u2069"
"""POP DIRECTIONAL ISOLATE: closes the isolate FSI opened."""
_OPENERS = frozenset({"\u2066", "\u2067", FSI})  # LRI, RLI, FSI


def _reorders(raw: str) -> bool:
    return not raw.isascii() and any(unicodedata.bidirectional(c) in _BIDI for c in raw)


def _balance(raw: str) -> str:
    """Drop the PDIs of `raw` that close nothing and close the isolates it leaves open."""
    if PDI not in raw and not any(c in _OPENERS for c in raw):
        return raw
    out: list[str] = []
    depth = 0
    for c in raw:
        if c in _OPENERS:
            depth += 1
        elif c == PDI:
            if not depth:
                continue  # would close the isolate around the value
            depth -= 1
        out.append(c)
    return "".join(out) + PDI * depth


def isolate(value: object) -> str:
    """Return ``str(value)`` isolated as plain text: ``FSI value PDI`` when it holds a
    right-to-left character or a bidi control, else unchanged.

    For text that cannot hold ``<bdi>`` (an ``<option>`` label) and for values composed
    into one string with others (a tree node's title): each value is isolated on its own,
    so an RLO in one cannot reverse the next. Its own isolates are balanced (`_balance`).
    The result is text, not HTML: escape it where it goes into HTML.
    """
    raw = str(value)
    return f"{FSI}{_balance(raw)}{PDI}" if _reorders(raw) else raw


def esc_text(value: object) -> str:
    """Return ``str(value)`` escaped for HTML text, isolated from the text around it.

    A string with a right-to-left character or a bidi control (U+202E...) is wrapped in
    ``<bdi>`` (its own isolates balanced, so none closes the ``<bdi>`` early), so it cannot
    reorder what follows it; others (all ASCII ones) are `esc` alone. For attribute values
    use `esc`.
    """
    raw = str(value)
    if not _reorders(raw):
        return html.escape(raw, quote=True)
    return f"<bdi>{html.escape(_balance(raw), quote=True)}</bdi>"


def short(value: object, limit: int = 80) -> str:
    """`esc_text` of `value`, shortened to `limit` characters (the full text goes in a title)."""
    raw = str(value)
    if len(raw) <= limit:
        return esc_text(raw)
    title = esc(_without_controls(raw[:2000]))
    return f'<span title="{title}">{esc_text(raw[: limit - 1])}…</span>'


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


JsonPart = tuple[str, bool]
"""A piece of JSON text and whether it is a string literal (a value of the user's)."""


def json_parts(value: Any, indent: int | None = None) -> list[JsonPart]:
    """Return `value` as JSON text in pieces, each string literal (key or value) a piece.

    The text is what ``json.dumps(value, indent=indent, ensure_ascii=False, default=repr)``
    writes; a value that is not JSON (a circular one, one too deep) is one piece, its repr.
    Renderers isolate each string piece on its own (`json_text`, `parts_html`).
    """
    out: list[JsonPart] = []
    try:
        _json_into(out, value, indent, 0, set())
    except (ValueError, RecursionError):
        return [(repr(value), True)]
    return out


def _json_into(out: list[JsonPart], value: Any, indent: int | None, depth: int,
               stack: set[int]) -> None:
    if isinstance(value, str):
        out.append((json.dumps(value, ensure_ascii=False), True))
        return
    if not isinstance(value, dict | list | tuple):
        try:
            out.append((json.dumps(value, ensure_ascii=False), False))
        except (TypeError, ValueError):  # not JSON: its repr, as json.dumps(default=repr)
            out.append((json.dumps(repr(value), ensure_ascii=False), True))
        return
    if not value:
        out.append(("{}" if isinstance(value, dict) else "[]", False))
        return
    if id(value) in stack or depth > 200:
        raise ValueError("circular or too deep")
    stack.add(id(value))
    inner = "" if indent is None else "\n" + " " * (indent * (depth + 1))
    sep = ", " if indent is None else ","
    open_, close = ("{", "}") if isinstance(value, dict) else ("[", "]")
    out.append((open_, False))
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for i, (k, v) in enumerate(items):
        out.append(((sep if i else "") + inner, False))
        if isinstance(value, dict):
            key = k if isinstance(k, str) else json.dumps(k) if k is None or isinstance(
                k, bool | int | float) else str(k)
            out.append((json.dumps(key, ensure_ascii=False), True))
            out.append((": ", False))
        _json_into(out, v, indent, depth + 1, stack)
    out.append(("" if indent is None else "\n" + " " * (indent * depth), False))
    out.append((close, False))
    stack.discard(id(value))


def parts_html(parts: list[JsonPart], limit: int | None = None) -> str:
    """Render `json_parts` as escaped HTML text, each string piece isolated on its own
    (`esc_text`); shortened to `limit` characters with "…" (the full text in a title)."""
    text = "".join(p for p, _ in parts)
    if limit is None or len(text) <= limit:
        return "".join(esc_text(p) if user else esc(p) for p, user in parts)
    room, shown = limit - 1, []
    for piece, user in parts:
        if room <= 0:
            break
        piece = piece[:room]
        room -= len(piece)
        shown.append(esc_text(piece) if user else esc(piece))
    return f'<span title="{esc(_without_controls(text[:2000]))}">{"".join(shown)}…</span>'


_CONTROLS = frozenset({"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})


def _without_controls(text: str) -> str:
    """`text` without bidi controls: a tooltip (``title``) cannot isolate a value, so an
    RLO there would reverse what follows it."""
    if text.isascii():
        return text
    return "".join(c for c in text if unicodedata.bidirectional(c) not in _CONTROLS)


def json_text(value: Any, limit: int = 120) -> str:
    """Return `value` as one-line JSON text, escaped and shortened to `limit` characters;
    each string in it is isolated on its own (an RLO in one cannot reverse the others)."""
    return parts_html(json_parts(value), limit)


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
    """Return Unix seconds as ``HH:MM:SS UTC``; a stored value no date can show (beyond
    year 9999, NaN) as ``<number> (Unix seconds)`` rather than raising."""
    return utc_text(seconds, "%H:%M:%S UTC")


def utc_text(seconds: float, fmt: str) -> str:
    """Unix seconds formatted by `fmt` (``strftime``) in UTC; a value no date can show
    (beyond year 9999, NaN) as ``<number> (Unix seconds)`` rather than raising."""
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return f"{seconds!r} (Unix seconds)"


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
