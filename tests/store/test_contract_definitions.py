"""Contract: `start_workflow(..., definition=)` records the definition's name, on every store."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.errors import InvalidKeyError, WorkflowMismatchError
from agentq.events import EventKind
from agentq.store import DurableStore, SqliteStore, WorkflowState

from .conftest import T0, kinds, run_step


async def test_the_definition_is_in_the_event_and_the_row(store: DurableStore) -> None:
    row, created = await store.start_workflow("wf", ["a", "b"], {"n": 1}, T0, definition="order")
    assert created and row.definition == "order"
    [event] = await store.load_events("wf")
    assert event.kind is EventKind.WORKFLOW_STARTED
    assert event.data == {"steps": ["a", "b"], "input": {"n": 1}, "definition": "order"}
    assert await store.get_workflow("wf") == row
    assert [w.definition for w in await store.workflows(WorkflowState.RUNNING)] == ["order"]


async def test_the_definition_is_kept_through_every_transition(store: DurableStore) -> None:
    await store.start_workflow("wf", ["a", "b"], None, T0, definition="order")
    await run_step(store, "wf", 0, "x")
    await store.cancel_workflow("wf", "stop", T0 + 1)
    row = await store.get_workflow("wf")
    assert row is not None and (row.state, row.definition) == (WorkflowState.CANCELLED, "order")


async def test_starting_again_from_the_same_definition_is_idempotent(store: DurableStore) -> None:
    first, _ = await store.start_workflow("wf", ["a"], [1], T0, definition="order")
    again, created = await store.start_workflow("wf", ["a"], [1], T0 + 5, definition="order")
    assert not created and again == first
    assert await kinds(store) == ["WorkflowStarted"]


@pytest.mark.parametrize(
    ("stored", "given", "words"),
    [
        ("order", "invoice", "exists from definition 'order', not from definition 'invoice'"),
        ("order", None, "exists from definition 'order', not as a plain workflow"),
        (None, "order", "exists as a plain workflow, not from definition 'order'"),
    ],
)
async def test_another_definition_is_a_mismatch_and_appends_nothing(
    store: DurableStore, stored: str | None, given: str | None, words: str
) -> None:
    await store.start_workflow("wf", ["a"], None, T0, definition=stored)
    with pytest.raises(WorkflowMismatchError, match=words):
        await store.start_workflow("wf", ["a"], None, T0, definition=given)
    assert await kinds(store) == ["WorkflowStarted"]
    row = await store.get_workflow("wf")
    assert row is not None and row.definition == stored


@pytest.mark.parametrize(
    ("bad", "error"),
    [("", InvalidKeyError), ("x" * 2000, InvalidKeyError), ("\ud800", InvalidKeyError),
     (7, TypeError)],
)
async def test_a_bad_definition_name_is_refused_before_anything_is_written(
    store: DurableStore, bad: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await store.start_workflow("wf", ["a"], None, T0, definition=bad)  # type: ignore[arg-type]
    assert await store.get_workflow("wf") is None and await kinds(store) == []


async def test_the_definition_column_is_rebuilt_from_the_log(store: DurableStore) -> None:
    await store.start_workflow("plain", ["a"], None, T0)
    await store.start_workflow("made", ["a", "b"], 2, T0, definition="order")
    await run_step(store, "made", 0, "out")
    before = await store.workflows()
    await store.rebuild_projection()
    assert await store.workflows() == before
    assert [(w.workflow_id, w.definition) for w in before] == [
        ("plain", None), ("made", "order")]


async def test_sqlite_reopened_reads_the_definition(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "d.db") as store:
        await store.start_workflow("wf", ["a"], None, T0, definition="order")
    async with SqliteStore(tmp_path / "d.db") as again:
        row = await again.get_workflow("wf")
        assert row is not None and row.definition == "order"
