"""What MemoryStore hands out shares nothing mutable with it, and shares what cannot change."""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass

from agentq.outcomes import ErrorInfo
from agentq.store import MemoryStore
from agentq.store.memory.detach import detached


class Color(enum.StrEnum):
    RED = "red"


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    data: dict[str, object]


class Plain:
    def __init__(self, items: list[int]) -> None:
        self.items = items


def test_containers_are_copied_and_immutable_values_shared() -> None:
    value = {"a": [1, {"b": "x"}], "t": (1, "y"), "c": Color.RED}
    copy = detached(value)
    assert copy == value
    assert copy is not value and copy["a"] is not value["a"]
    assert copy["a"][1] is not value["a"][1]
    assert copy["t"] is value["t"]  # a tuple of immutable values: shared
    assert copy["c"] is Color.RED


def test_frozen_dataclasses_are_shared_unless_they_hold_a_container() -> None:
    info = ErrorInfo("ValueError", "bad", None)
    assert detached(info) is info
    when = datetime.datetime.now(datetime.UTC)
    assert detached(when) is when
    row = Row("r", {"k": [1]})
    copy = detached(row)
    assert copy == row and copy is not row
    assert copy.data is not row.data and copy.data["k"] is not row.data["k"]
    inside = (row, 1)
    assert detached(inside)[0] is not row


def test_other_objects_are_deep_copied() -> None:
    plain = Plain([1, 2])
    copy = detached(plain)
    assert copy is not plain and copy.items == [1, 2] and copy.items is not plain.items


async def test_a_caller_mutating_an_output_never_changes_the_store() -> None:
    store = MemoryStore()
    row, _ = await store.start_workflow("wf", ["a"], {"xs": [1]}, now=1.0)
    row.input["xs"].append(2)
    again = await store.get_workflow("wf")
    assert again is not None and again.input == {"xs": [1]}
