"""`visible`: a stored string made safe to print on a terminal, every character shown as typed.

A foundation module (pure, imports nothing of agentq): the command line's views
(`agentq.cli.literal`) and the console progress line of a run group
(`agentq.widgets.follow_group`) print workflow ids, group ids, keys and reasons that come from
programs, models and tools. Each character a terminal would act on or that reorders or hides
text is replaced by its Python escape (``\\x1b``, ``\\u202e``):

- C0 controls (ESC, BEL, NUL, newline...), DEL and the C1 controls (category ``Cc``);
- format characters (``Cf``): bidi embeddings, overrides and isolates U+202A-U+202E and
  U+2066-U+2069, zero-width spaces and joiners, the BOM, tag characters;
- the line and paragraph separators U+2028/U+2029 (``Zl``, ``Zp``), lone surrogates
  (``Cs``: unprintable, they would also fail to encode), private-use and unassigned code points.
"""

from __future__ import annotations

import unicodedata

__all__ = ["unsafe", "visible"]

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


def unsafe(char: str) -> bool:
    """Whether `visible` replaces `char` (one character) by its escape."""
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
    return "".join(_escape(c) if unsafe(c) else c for c in raw)
