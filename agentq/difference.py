"""`first_difference`: where two JSON values first differ, named by path, in one line.

Used by the errors that refuse a reused id or key with another value (a workflow's input, a
step's definition, an agent run's options), so that they name what differs instead of
printing both values whole. Pure; imports only `agentq.codec`.
"""

from __future__ import annotations

from typing import Any

from agentq.codec import _safe_repr

__all__ = ["first_difference"]


def first_difference(a: Any, b: Any, path: str = "value") -> str | None:
    """Say where two JSON values first differ, in one line, or return None when they are equal.

    Dicts are compared key by key (``a``'s order, then the keys only ``b`` has), lists item by
    item; the first difference is named by its path with a short excerpt of each side
    (``input['prompt']: 'Hello' vs 'Hi'``, ``input['options']: missing vs {'model': 'a'}``).
    Used by the errors that refuse a reused id with another value, so that they name what
    differs instead of printing both values whole.

    Args:
        a: The first value (the stored one, say).
        b: The second value (the one given now).
        path: How the whole value is named in the result.

    Returns:
        ``"<path>: <a excerpt> vs <b excerpt>"`` (each excerpt at most 60 characters), or None.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            here = f"{path}[{key!r:.40}]"
            if key not in b:
                return f"{here}: {_safe_repr(a[key])} vs missing"
            if key not in a:
                return f"{here}: missing vs {_safe_repr(b[key])}"
            found = first_difference(a[key], b[key], here)
            if found is not None:
                return found
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found is not None:
                return found
        if len(a) != len(b):
            return f"{path}: {len(a)} items vs {len(b)}"
        return None
    if a == b and type(a) is type(b):
        return None
    return f"{path}: {_safe_repr(a)} vs {_safe_repr(b)}"
