"""`quick_init`: the store's frozen rows keep what ``dataclasses`` made of them."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from agentq.store.contract.frozen import quick_init
from agentq.store.contract.rows import CallKind, CallRow, CallState, StepRow, StepState
from agentq.store.rules.projection import Rows


@dataclasses.dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: str = "b"
    c: dict[str, Any] = dataclasses.field(default_factory=dict)


@quick_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Quick:
    a: int
    b: str = "b"
    c: dict[str, Any] = dataclasses.field(default_factory=dict)


def test_same_signature_values_and_defaults_as_the_generated_init() -> None:
    assert str(inspect.signature(_Quick)) == str(inspect.signature(_Plain))
    assert dataclasses.astuple(_Quick(1)) == dataclasses.astuple(_Plain(1))
    assert dataclasses.astuple(_Quick(1, "x", {"k": 1})) == (1, "x", {"k": 1})
    assert dataclasses.astuple(_Quick(c={"k": 2}, a=3)) == (3, "b", {"k": 2})
    assert _Quick(1).c is not _Quick(1).c  # a factory's value is made for each row
    with pytest.raises(TypeError):
        _Quick()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Quick(1, "b", {}, 4)  # type: ignore[call-arg]


def test_rows_stay_frozen_compared_hashed_and_replaceable() -> None:
    row = CallRow("wf", "k", CallKind.CALL, 0, CallState.STARTED, fingerprint="f", runs=1)
    assert row == CallRow("wf", "k", CallKind.CALL, 0, CallState.STARTED, "f", runs=1)
    assert hash(StepRow("wf", 0, "a", StepState.PENDING)) == hash(
        StepRow("wf", 0, "a", StepState.PENDING)
    )
    assert dataclasses.replace(row, runs=2).runs == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.runs = 3  # type: ignore[misc]
    assert "CallRow(workflow_id='wf', key='k'" in repr(row)
    assert Rows(None, {}).calls == {}


def test_refuses_a_class_it_cannot_keep() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    for cls in (Mutable, NoSlots, PostInit, int):
        with pytest.raises(TypeError, match="quick_init"):
            quick_init(cls)
