"""Stored strings printed literally: never markup, never a terminal control, never reordered.

Workflow ids, step names, keys, labels, outputs and reasons come from programs, models and
tools; the command line prints them as data. `visible` is the one sanitiser every output path
uses (the rich views through `text`, ``--json`` through `json_line`, messages and errors as
plain strings); it lives in `agentq.literal` (the foundation: the console progress line of a run
group uses it too) and replaces each character a terminal would act on or that reorders or
hides text by its Python escape, shown as typed (``\\x1b``, ``\\u202e``).

Rich markup is never parsed: the views put every stored string in a `rich.text.Text` (through
`text`), whose content is not markup, so ``[link=https://evil.example]click[/link]`` prints as
those 39 characters and not as a hyperlink.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.text import Text

from agentq.literal import unsafe, visible

__all__ = ["json_line", "text", "visible"]


def text(value: object, style: str = "") -> Text:
    """A rich `Text` of ``visible(value)``: printed as is, never parsed as markup."""
    return Text(visible(value), style=style)


_JSON_UNSAFE = re.compile(r"[^\x20-\x7e]")


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if not unsafe(char):
        return char
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON spells a code point above the BMP as a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_line(value: Any) -> str:
    """`value` as one line of JSON whose unsafe characters (those `visible` replaces) are
    ``\\u`` escapes; other non-ASCII text stays as it is. Decodes to the same value.

    Args:
        value: A JSON value; objects it cannot encode go through ``str``.
    """
    return _JSON_UNSAFE.sub(_json_escape, json.dumps(value, ensure_ascii=False, default=str))
