"""Stored strings printed literally: never markup, never a terminal control, never reordered.

Workflow ids, step names, keys, labels, outputs and reasons come from programs, models and
tools; the command line prints them as data. `visible` is the one sanitiser every output path
uses (the rich views through `text`, ``--json`` through `json_line`, messages and errors as
plain strings): each character a terminal would act on or that reorders or hides text is
replaced by its Python escape, shown as typed (``\\x1b``, ``\\u202e``):

- C0 controls (ESC, BEL, NUL, newline...), DEL and the C1 controls (category ``Cc``);
- format characters (``Cf``): bidi embeddings, overrides and isolates U+202A-U+202E and
  U+2066-U+2069, zero-width spaces and joiners, the BOM, tag characters;
- the line and paragraph separators U+2028/U+2029 (``Zl``, ``Zp``), lone surrogates
  (``Cs``: unprintable, they would also fail to encode), private-use and unassigned code points.

Rich markup is never parsed: the views put every stored string in a `rich.text.Text` (through
`text`), whose content is not markup, so ``[link=https://evil.example]click[/link]`` prints as
those 39 characters and not as a hyperlink.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from rich.text import Text

__all__ = ["json_line", "text", "visible"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _unsafe(char: str) -> bool:
    # str.isprintable() is False for Cc, Cf, Cs, Co, Cn, Zl, Zp and the spaces (Zs) other
    # than " "; those spaces (NBSP, ideographic space...) are harmless and kept
    return not char.isprintable() and unicodedata.category(char) != "Zs"


def visible(value: object) -> str:
    """Return ``str(value)`` with every control, format, separator or unassigned character
    replaced by its escape (``\\x1b``, ``\\u202e``, ``\\n``); printable text is unchanged.

    Args:
        value: Anything; strings are the usual case.

    Returns:
        One line of printable characters (a newline shows as ``\\n``).
    """
    raw = str(value)
    if raw.isprintable():  # the common case: nothing to replace
        return raw
    return "".join(_escape(c) if _unsafe(c) else c for c in raw)


def text(value: object, style: str = "") -> Text:
    """A rich `Text` of ``visible(value)``: printed as is, never parsed as markup."""
    return Text(visible(value), style=style)


_JSON_UNSAFE = re.compile(r"[^\x20-\x7e]")


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if not _unsafe(char):
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
