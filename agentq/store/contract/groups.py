"""Run groups (`WorkflowEngine.group`): the manifest a store keeps, and `DurableGroups`.

A run group is a set of workflow instances submitted together, each under a key (mostly of
one definition; each key may have its own): the member ``key`` of group ``G`` is the workflow
``G/<key>`` (`child_workflow_id`: a key holds no ``/``). The store keeps the group's manifest
(each key's definition name and input, in the order submitted) beside the event log, not in
it: the members are
ordinary workflows, and their rows say how each one went. `forget_group` removes the
manifest and leaves the members stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentq.keys import validate_key
from agentq.store.contract.checks import check_number, check_payload
from agentq.store.contract.children import child_workflow_id
from agentq.store.contract.rows import WorkflowRow

__all__ = [
    "DurableGroups", "GroupItem", "GroupManifest", "check_group", "keys_text", "member_id",
    "summed_usage",
]


@dataclass(frozen=True, slots=True)
class GroupManifest:
    """A run group as the store keeps it.

    Attributes:
        group_id: The group's id (a key).
        definitions: Each member's key mapped to the name of the `WorkflowDef` it is an
            instance of (the same keys as `items`, in the same order).
        items: Each member's key mapped to its input (JSON as it reads back: tuples come
            back as lists), in the order submitted.
        created_at: Unix seconds of the first submit.
    """

    group_id: str
    definitions: dict[str, str]
    items: dict[str, Any]
    created_at: float

    @property
    def definition(self) -> str | None:
        """The definition name every member shares, or None when the keys have their own."""
        names = set(self.definitions.values())
        return names.pop() if len(names) == 1 else None

    def member_id(self, key: str) -> str:
        """The workflow id of member `key`: ``<group_id>/<key>``."""
        return f"{self.group_id}/{key}"


@dataclass(frozen=True, slots=True)
class GroupItem:
    """One checked member of a manifest to record: its key, definition name, input and the
    input's JSON text."""

    key: str
    definition: str
    input: Any
    text: str


def member_id(group_id: str, key: str) -> str:
    """The workflow id of member `key` of group `group_id`: ``<group_id>/<key>``.

    Raises:
        InvalidKeyError / TypeError: `group_id` or `key` (a "run group key") is not a valid
            key.
        ValueError: `key` holds a ``/``.
    """
    return child_workflow_id(
        validate_key(group_id, "run group id"), key, kind="group member", parent="group"
    )


def summed_usage(usages: list[dict[str, Any] | None]) -> dict[str, int] | None:
    """The integer figures of some calls' recorded `usage` (`CallRow.usage`), summed by
    name; None when none is recorded."""
    total: dict[str, int] = {}
    for usage in usages:
        for name, value in (usage or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                total[name] = total.get(name, 0) + value
    return total or None


def check_group(
    group_id: object, definition: object, items: object, now: object
) -> tuple[str, list[GroupItem], float]:
    """Check a manifest before anything is written; return it as the store records it.

    Args:
        group_id: The group's id.
        definition: One definition name for every key, or a mapping of each key of `items`
            to its own definition name.
        items: Key to input.
        now: Unix seconds.

    Returns:
        ``(group_id, definitions, items, now)``: `definitions` maps each key to its name.

    Raises:
        InvalidKeyError / TypeError: A bad `group_id`, definition name or key.
        TypeError: `items` is not a mapping.
        ValueError: `items` is empty, a key holds a ``/``, or `definition` is a mapping
            whose keys are not those of `items` (the message names the difference).
        PayloadError: An input is not JSON or too large (the message names its key).
    """
    gid = validate_key(group_id, "group id")
    if not isinstance(items, Mapping):
        raise TypeError(
            f"a group's items must be a mapping of key to input, got "
            f"{type(items).__name__}: {items!r:.80}"
        )
    if not items:
        raise ValueError(f"group {gid!r}: items is empty; a group has at least one member")
    names = _definitions(gid, definition, items)
    checked: list[GroupItem] = []
    for key, value in items.items():
        member_id(gid, key)  # raises on a bad key
        decoded, text = check_payload(value, f"input of member {key!r}")
        checked.append(GroupItem(key, names[key], decoded, text))
    return gid, checked, check_number(now, "now")


def _definitions(gid: str, definition: object, items: Mapping[Any, Any]) -> dict[Any, str]:
    """Each key of `items` mapped to its checked definition name."""
    if not isinstance(definition, Mapping):
        name = validate_key(definition, "definition name")
        return dict.fromkeys(items, name)
    added = [k for k in definition if k not in items]
    missing = [k for k in items if k not in definition]
    if added or missing:
        raise ValueError(
            f"group {gid!r}: the definitions' keys are not the items' keys: "
            f"{len(added)} without an item ({keys_text(added)}), {len(missing)} without a "
            f"definition ({keys_text(missing)})"
        )
    return {k: validate_key(definition[k], f"definition name of member {k!r}") for k in items}


def keys_text(keys: list[Any]) -> str:
    """At most five keys, quoted, then how many more: for error messages."""
    shown = ", ".join(repr(k) for k in keys[:5])
    return shown + (f", … {len(keys) - 5} more" if len(keys) > 5 else "")


@runtime_checkable
class DurableGroups(Protocol):
    """The run-group verbs of a store (`MemoryStore`, `SqliteStore`, `PostgresStore`).

    Each verb is atomic; a verb that raises has written nothing. Arguments are checked first
    (see `check_group`); `StoreError` when the backend fails or the store is closed.
    """

    async def record_group(
        self,
        group_id: str,
        *,
        definition: str | Mapping[str, str],
        items: Mapping[str, Any],
        now: float,
    ) -> tuple[GroupManifest, bool]:
        """Record a group's manifest unless one is stored under `group_id`.

        Args:
            group_id: The group's id.
            definition: The members' definition name, or each key's own (a mapping with
                the keys of `items`, else `ValueError` naming the difference).
            items: Key to input (JSON), at least one; a key holds no ``/``.
            now: Unix seconds, the manifest's `created_at` if this call records it.

        Returns:
            The manifest stored (this one, or the one stored already, unchanged) and True if
            this call recorded it. Two writers at once: one records, the other gets the
            first's manifest and False.
        """
        ...

    async def load_group(self, group_id: str) -> GroupManifest | None:
        """Return the manifest stored under `group_id`, or None."""
        ...

    async def forget_group(self, group_id: str) -> bool:
        """Remove the manifest (the members stay stored); True if there was one."""
        ...

    async def group_members(self, group_id: str) -> list[WorkflowRow]:
        """Return the rows of the stored workflows whose id starts with ``<group_id>/``
        (members and their child runs alike), by workflow id."""
        ...
