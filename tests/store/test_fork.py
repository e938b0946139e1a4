"""The DurableStore contract for `fork_workflow`, on every store.

A fork copies the parent's history before the fork point into its own log in one
transaction, marked ``forked_from``; refusals write nothing; the parent is only read; the
fork's projection is a replay of its log.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agentq.store.rules.fork as fork_rules
from agentq.errors import (
    InvalidKeyError,
    PayloadError,
    UnknownWorkflowError,
    WorkflowMismatchError,
)
from agentq.events import EventKind
from agentq.outcomes import ErrorInfo
from agentq.store import CallState, Claimed, DurableStore, StepState, WorkflowState
from agentq.store.contract.rows import event_row
from agentq.store.rules.projection import replay

from .conftest import T0, claim, run_step, start

pytestmark = pytest.mark.timeout(60)


async def parent(store: DurableStore) -> None:
    """Workflow "p" (steps a, b, c): a completed with calls a1 and wait q (answered), b
    leased with calls b1 (completed), b2 (failed), b3 (completed), b4 (in doubt)."""
    await start(store, "p", ["a", "b", "c"], input={"x": 1})
    ex = await claim(store, "p", 0)
    await store.start_call(ex, "a1", fingerprint="fa", lane="low", label={"t": 1}, now=T0)
    await store.complete_call(ex, "a1", output={"a": 1}, usage={"tokens": 5}, duration=0.5,
                              now=T0 + 1)
    await store.wait_step(ex, "ok?", T0 + 1, key="q", details={"d": 1})
    await store.resume_step("p", 0, "yes", T0 + 2)
    ex = await claim(store, "p", 0, now=T0 + 2)
    await store.complete_step(ex, "A", T0 + 3)
    ex = await claim(store, "p", 1, now=T0 + 3)
    for key, output in (("b1", 1), ("b2", None), ("b3", 3), ("b4", None)):
        await store.start_call(ex, key, fingerprint=None, lane=None, label=None, now=T0 + 4)
        if key == "b2":
            await store.fail_call(ex, key, reason="error", error=ErrorInfo("E", "m", ""),
                                  duration=0.1, now=T0 + 4)
        elif output is not None:
            await store.complete_call(ex, key, output=output, usage=None, duration=0.1,
                                      now=T0 + 4)


async def test_fork_at_a_call_copies_the_history_before_it(store: DurableStore) -> None:
    await parent(store)
    before = (await store.load_events("p"), await store.calls("p"), await store.step_rows("p"))
    row = await store.fork_workflow("p", "f", step=1, key="b3", now=T0 + 10)
    assert row.workflow_id == "f" and row.state is WorkflowState.RUNNING
    assert row.input == {"x": 1} and row.step_names == ("a", "b", "c")
    events = await store.load_events("f")
    assert [e.kind for e in events[:2]] == [EventKind.WORKFLOW_STARTED, EventKind.WORKFLOW_FORKED]
    assert events[1].data == {
        "parent": "p", "at": {"step": 1, "step_name": "b", "key": "b3"}, "replaced": []
    }
    assert all(e.data.get("forked_from") == "p" for e in events[2:])
    assert all(e.attempt is None and e.worker_id is None for e in events)
    steps = await store.step_rows("f")
    assert [s.state for s in steps] == [StepState.COMPLETED, StepState.PENDING,
                                        StepState.PENDING]
    assert steps[0].output == "A"
    calls = {c.key: c for c in await store.calls("f")}
    assert list(calls) == ["a1", "q", "b1"]  # b2 failed: not copied; b3 is the fork point
    assert calls["a1"].state is CallState.COMPLETED and calls["a1"].output == {"a": 1}
    # a copy's fingerprint is not copied: the fork's calls are not compared with the
    # parent's (they may name the fork's own id); its usage is
    assert calls["a1"].fingerprint is None and calls["a1"].usage == {"tokens": 5}
    assert calls["q"].state is CallState.ANSWERED and calls["q"].output == "yes"
    assert calls["b1"].output == 1
    # The parent is only read.
    assert (await store.load_events("p"), await store.calls("p"),
            await store.step_rows("p")) == before


async def test_fork_at_a_step_runs_the_whole_step_live(store: DurableStore) -> None:
    await parent(store)
    await store.fork_workflow("p", "f", step=1, now=T0 + 10)
    assert [c.key for c in await store.calls("f")] == ["a1", "q"]
    await store.fork_workflow("p", "g", step=0, now=T0 + 10)
    assert await store.calls("g") == []
    assert all(s.state is StepState.PENDING for s in await store.step_rows("g"))
    claimed = await store.claim_step("g", 0, "w", 10.0, T0 + 11)
    assert isinstance(claimed, Claimed)


async def test_replace_substitutes_a_recorded_output(store: DurableStore) -> None:
    await parent(store)
    await store.fork_workflow(
        "p", "f", step=1, key="b3", replace={"b1": {"edited": True}, "b3": 30, "b2": "ok"},
        now=T0 + 10,
    )
    calls = {c.key: c for c in await store.calls("f")}
    assert list(calls) == ["a1", "q", "b1", "b2", "b3"]
    assert calls["b1"].output == {"edited": True}
    assert calls["b2"].state is CallState.COMPLETED and calls["b2"].output == "ok"
    assert calls["b3"].output == 30  # the fork point itself: the fork continues after it
    forked = (await store.load_events("f"))[1]
    assert forked.data["replaced"] == ["b1", "b2", "b3"]
    done = [e for e in await store.load_events("f") if e.kind is EventKind.CALL_COMPLETED]
    assert [e.data.get("replaced", False) for e in done] == [False, True, True, True]
    # A fork at a step may replace any call of that step.
    await store.fork_workflow("p", "g", step=1, replace={"b4": "sure"}, now=T0 + 10)
    assert [(c.key, c.output) for c in await store.calls("g")][-1] == ("b4", "sure")


async def test_a_fork_of_a_fork_and_its_projection_is_a_replay(store: DurableStore) -> None:
    await parent(store)
    await store.fork_workflow("p", "f", step=1, key="b3", replace={"b1": 10}, now=T0 + 10)
    await store.fork_workflow("f", "ff", step=1, now=T0 + 11)
    assert [c.key for c in await store.calls("ff")] == ["a1", "q"]
    await store.fork_workflow("f", "fg", step=1, key="b1", now=T0 + 11)
    replayed = {rows.workflow.workflow_id: rows for _, rows in replay(await store.load_events())
                if rows.workflow is not None}
    for wid in ("f", "ff", "fg"):
        assert replayed[wid].workflow == await store.get_workflow(wid)
        assert list(replayed[wid].calls.values()) == await store.calls(wid)
        assert [s for _, s in sorted(replayed[wid].steps.items())] == await store.step_rows(wid)


async def test_a_fork_of_a_completed_parent_copies_every_step_before_it(
    store: DurableStore,
) -> None:
    await start(store, "done", ["a", "b", "c"], input=[1])
    for i, out in enumerate(["A", {"b": [2]}, None]):
        await run_step(store, "done", i, out, now=T0 + i)
    assert (await store.get_workflow("done")).state is WorkflowState.COMPLETED  # type: ignore[union-attr]
    await store.fork_workflow("done", "f", step=2, now=T0 + 5)
    steps = await store.step_rows("f")
    assert [(s.state, s.output) for s in steps] == [
        (StepState.COMPLETED, "A"), (StepState.COMPLETED, {"b": [2]}), (StepState.PENDING, None)
    ]
    assert (await store.get_workflow("f")).state is WorkflowState.RUNNING  # type: ignore[union-attr]


async def test_a_timed_out_wait_is_copied_timed_out(store: DurableStore) -> None:
    await start(store, "p", ["a"])
    ex = await claim(store, "p")
    await store.wait_step(ex, "ok?", T0, key="q", deadline=T0 + 1)
    assert await store.time_out_wait("p", 0, T0 + 2)
    ex = await claim(store, "p", now=T0 + 2)
    await store.start_call(ex, "c", fingerprint=None, lane=None, label=None, now=T0 + 2)
    await store.fork_workflow("p", "f", step=0, key="c", now=T0 + 3)
    [row] = await store.calls("f")
    assert row.key == "q" and row.state is CallState.TIMED_OUT
    assert (await store.step_rows("f"))[0].state is StepState.PENDING


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ({"workflow_id": "nope"}, UnknownWorkflowError, "'nope' is not in the store"),
        ({"new_workflow_id": "p"}, WorkflowMismatchError, "into itself"),
        ({"new_workflow_id": "other"}, WorkflowMismatchError, "into 'other': a workflow"),
        ({"step": 3}, ValueError, "at step #3: it has 3 steps"),
        ({"step": 2}, ValueError, "'b' \\(#1\\), is leased, not completed"),
        ({"key": "zz"}, ValueError, "key 'zz' .*no call or wait of that step"),
        ({"key": "a1"}, ValueError, "key 'a1' .*no call or wait of that step"),
        ({"key": "b1", "replace": {"b3": 1}}, ValueError, "'b3' .*not at or before"),
        ({"replace": {"a1": 1}}, ValueError, "'a1' \\(a call of step 'a' \\(#0\\)\\)"),
        ({"replace": {"nope": 1}}, ValueError, "'nope' is not a call or wait"),
        ({"replace": {"b1": float("nan")}}, PayloadError, "replace"),
        ({"replace": {"b1": object()}}, PayloadError, "replace"),
        ({"replace": [("b1", 1)]}, TypeError, "mapping"),
        ({"new_workflow_id": ""}, InvalidKeyError, "new workflow id"),
        ({"step": -1}, ValueError, "-1"),
    ],
)
async def test_refusals_write_nothing(
    store: DurableStore, args: dict[str, Any], error: type[Exception], match: str
) -> None:
    await parent(store)
    await start(store, "other", ["x"])
    seq = await store.last_seq()
    kwargs: dict[str, Any] = {"workflow_id": "p", "new_workflow_id": "f", "step": 1,
                              "now": T0 + 10, **args}
    with pytest.raises(error, match=match):
        await store.fork_workflow(
            kwargs.pop("workflow_id"), kwargs.pop("new_workflow_id"), **kwargs
        )
    assert await store.last_seq() == seq
    assert await store.get_workflow("f") is None


async def test_event_rows_show_the_lineage(store: DurableStore) -> None:
    await parent(store)
    await store.fork_workflow("p", "f", step=1, key="b3", replace={"b3": 3}, now=T0 + 10)
    await store.fork_workflow("f", "ff", step=1, now=T0 + 11)
    rows = await store.event_rows("f")
    assert rows == [event_row(e) for e in await store.load_events("f")]
    lineage = [(r[5], r[-1]) for r in rows]
    assert lineage[:2] == [("WorkflowStarted", None), ("WorkflowForked", "p")]
    assert all(parent_id == "p" for _, parent_id in lineage[1:])
    assert [r[-1] for r in await store.event_rows("ff")][1:] == ["f"] * 6
    assert all(r[-1] is None for r in await store.event_rows("p"))


async def test_a_failure_halfway_through_the_fork_writes_nothing(
    store: DurableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await parent(store)
    seq = await store.last_seq()
    real = fork_rules._copies
    made: list[int] = []

    def copies_then_fail(*args: Any) -> Any:
        made.append(1)
        if len(made) == 3:  # the fork's WorkflowStarted and rows are written by now
            raise RuntimeError("disk on fire")
        return real(*args)

    monkeypatch.setattr(fork_rules, "_copies", copies_then_fail)
    with pytest.raises(Exception, match="disk on fire"):
        await store.fork_workflow("p", "f", step=1, key="b4", now=T0 + 10)
    assert await store.last_seq() == seq
    assert await store.get_workflow("f") is None and await store.calls("f") == []
    monkeypatch.undo()
    await store.fork_workflow("p", "f", step=1, key="b4", now=T0 + 10)  # then it works
    assert [c.key for c in await store.calls("f")] == ["a1", "q", "b1", "b3"]


async def test_concurrent_forks_to_one_id_make_one_fork(store: DurableStore) -> None:
    await parent(store)
    results = await asyncio.gather(
        *(store.fork_workflow("p", "f", step=1, key=k, now=T0 + 10) for k in ("b1", "b3", "b4")),
        return_exceptions=True,
    )
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and all(isinstance(e, WorkflowMismatchError) for e in lost), results
    forked = [e for e in await store.load_events("f") if e.kind is EventKind.WORKFLOW_FORKED]
    assert len(forked) == 1


async def test_replace_a_waits_answer(store: DurableStore) -> None:
    await parent(store)
    await store.fork_workflow("p", "f", step=0, replace={"q": {"answer": "no"}}, now=T0 + 10)
    [row] = await store.calls("f")  # a1 runs live: only the replaced wait is copied
    assert (row.key, row.state, row.output) == ("q", CallState.ANSWERED, {"answer": "no"})
    resumed = [e for e in await store.load_events("f") if e.kind is EventKind.STEP_RESUMED]
    assert resumed[0].data == {"input": {"answer": "no"}, "key": "q", "forked_from": "p",
                               "replaced": True}
    assert (await store.step_rows("f"))[0].state is StepState.PENDING
