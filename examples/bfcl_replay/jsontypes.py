"""JSON type aliases shared by the replay modules."""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""A value `json.dumps` writes as standard JSON (finite floats only)."""

JsonObject: TypeAlias = "dict[str, JsonValue]"
"""A JSON object."""
