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


# ---------------------------------------------------------------- ready_workflows


async def ready(
    store: DurableStore, now: float, *names: str, limit: int = 50, steps: tuple[str, ...] = ()
) -> list[tuple[str, int, str]]:
    """The ready work of definitions `names`, each with step names `steps` (default: those
    the tests below start them with)."""
    served = {n: steps or (("x",) if n in ("b", "d") else ("x", "y")) for n in names}
    return [
        (r.workflow.workflow_id, r.step_index, str(r.state))
        for r in await store.ready_workflows(now, served, limit)
    ]


async def test_ready_lists_pending_current_steps_of_the_given_definitions(
    store: DurableStore,
) -> None:
    await store.start_workflow("a1", ["x", "y"], None, T0, definition="a")
    await store.start_workflow("plain", ["x"], None, T0)
    await store.start_workflow("b1", ["x"], None, T0, definition="b")
    await store.start_workflow("a2", ["x", "y"], 7, T0, definition="a")
    await run_step(store, "a2", 0, "out")
    assert await ready(store, T0, "a") == [("a1", 0, "pending"), ("a2", 1, "pending")]
    assert await ready(store, T0, "a", "b", limit=2) == [("a1", 0, "pending"), ("b1", 0, "pending")]
    assert await ready(store, T0, "c") == [] and await ready(store, T0) == []
    [work] = await store.ready_workflows(T0, {"b": ["x"]}, 1)
    assert work.workflow == await store.get_workflow("b1")


async def test_ready_skips_live_leases_and_retry_times_ahead_but_not_expired_leases(
    store: DurableStore,
) -> None:
    for wid in ("leased", "retrying", "done", "cancelled"):
        await store.start_workflow(wid, ["x"], None, T0, definition="d")
    await store.claim_step("leased", 0, "w1", 10.0, T0)
    ex = (await store.claim_step("retrying", 0, "w1", 10.0, T0)).execution  # type: ignore[union-attr]
    await store.fail_step(ex, "error", None, T0, retry_at=T0 + 5)
    await run_step(store, "done", 0, "ok")
    await store.cancel_workflow("cancelled", "no", T0)
    assert await ready(store, T0 + 1, "d") == []
    assert await ready(store, T0 + 5, "d") == [("retrying", 0, "pending")]
    assert await ready(store, T0 + 10, "d") == [("retrying", 0, "pending")]  # live at expiry
    assert await ready(store, T0 + 10.5, "d") == [
        ("leased", 0, "leased"), ("retrying", 0, "pending")]


async def test_ready_lists_waits_whose_deadline_passed(store: DurableStore) -> None:
    for wid in ("timed", "forever"):
        await store.start_workflow(wid, ["x"], None, T0, definition="d")
    ex = (await store.claim_step("timed", 0, "w1", 10.0, T0)).execution  # type: ignore[union-attr]
    await store.wait_step(ex, "ok?", T0, key="k", deadline=T0 + 60)
    ex = (await store.claim_step("forever", 0, "w1", 10.0, T0)).execution  # type: ignore[union-attr]
    await store.wait_step(ex, "ok?", T0)
    assert await ready(store, T0 + 59, "d") == []  # definition "d" has step "x"
    assert await ready(store, T0 + 60, "d") == [("timed", 0, "waiting")]
    await store.resume_step("forever", 0, "yes", T0 + 61)
    assert await ready(store, T0 + 61, "d") == [("timed", 0, "waiting"), ("forever", 0, "pending")]


async def test_ready_finds_the_work_it_can_run_however_much_other_work_waits(
    store: DurableStore,
) -> None:
    """Issue 20, fault 7: instances of other definitions, and instances of the served name
    started with other steps (an old version, another service), are never listed, so they
    never take the places of the work that fits, whatever the limit."""
    for i in range(15):
        await store.start_workflow(f"old-{i}", ["x"], None, T0, definition="job")
        await store.start_workflow(f"other-{i}", ["x", "y"], None, T0, definition="other")
    await store.start_workflow("new", ["x", "y"], None, T0, definition="job")
    await store.start_workflow("wide", ["é", "名 2"], None, T0, definition="wide")
    assert await ready(store, T0, "job", limit=1) == [("new", 0, "pending")]
    assert await ready(store, T0, "job", "wide", limit=2, steps=("x", "y")) == [
        ("new", 0, "pending")]
    assert await ready(store, T0, "wide", steps=("é", "名 2")) == [("wide", 0, "pending")]
    assert await ready(store, T0, "wide", steps=("é",)) == []
    assert len(await ready(store, T0, "job", limit=50, steps=("x",))) == 15


@pytest.mark.parametrize(
    ("now", "names", "limit", "error"),
    [
        (float("nan"), {"d": ["x"]}, 1, ValueError),
        (T0, "d", 1, TypeError),
        (T0, ["d"], 1, TypeError),
        (T0, {1: ["x"]}, 1, TypeError),
        (T0, {"d": "x"}, 1, TypeError),
        (T0, {"d": [1]}, 1, TypeError),
        (T0, {"d": []}, 1, ValueError),
        (T0, {"d": ["x"]}, 0, ValueError),
        (T0, {"d": ["x"]}, 1.5, TypeError),
        (T0, {"d": ["x"]}, True, TypeError),
    ],
)
async def test_ready_refuses_bad_arguments(
    store: DurableStore, now: float, names: object, limit: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await store.ready_workflows(now, names, limit)  # type: ignore[arg-type]
