"""A run group submitted again: is it the group stored? (`same_group`, `same_keys`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentq.codec import encode
from agentq.errors import KeyConflictError
from agentq.store import GroupManifest
from agentq.store.contract.groups import keys_text

__all__ = ["same_group", "same_keys"]


def same_group(
    group_id: str,
    stored: GroupManifest,
    names: str | Mapping[str, str],
    items: Mapping[str, Any],
) -> None:
    """Raise unless `items` (already checked by the store) is the stored group."""
    same_keys(group_id, stored, items)
    changed = [k for k in items if encode(items[k]) != encode(stored.items[k])]
    if changed:
        raise KeyConflictError(
            f"group {group_id!r} is stored with another input for "
            f"{len(changed)} key(s): {keys_text(changed)}; nothing was changed"
        )
    other = [
        k for k in items
        if (names if isinstance(names, str) else names[k]) != stored.definitions[k]
    ]
    if other:
        raise KeyConflictError(
            f"group {group_id!r} is stored with another definition for "
            f"{len(other)} key(s): {keys_text(other)} (stored: "
            f"{stored.definitions[other[0]]!r} for {other[0]!r}); nothing was changed"
        )


def same_keys(group_id: str, stored: GroupManifest, keys: Iterable[str]) -> None:
    """Raise `ValueError` naming the difference unless `keys` are the stored group's keys
    (in any order)."""
    given = list(keys)
    added = [k for k in given if k not in stored.items]
    missing = [k for k in stored.items if k not in set(given)]
    if added or missing:
        raise ValueError(
            f"group {group_id!r} is stored with another set of keys: "
            f"{len(added)} new ({keys_text(added)}), {len(missing)} missing "
            f"({keys_text(missing)}); use another group id"
        )
