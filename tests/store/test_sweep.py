"""The DurableStore contract for retention (`sweep`), on every store.

A sweep removes ended workflows in the states asked for, ended strictly before the cutoff,
with their events, step rows, call rows, messages, end-hook outbox rows and their calls' job
outcomes, in short transactions; never an open workflow, a fenced one, a child run whose parent
is still stored, or one whose end hooks are being delivered; a swept id
may be used again and the log's sequence numbers are never handed out again; a fork stands
alone.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import Target

import agentq.store.rules.sweep as rules_sweep
from agentq.keys import call_queue_key
from agentq.store import (
    HANDED_BACK_REASON,
    DurableStore,
    PostgresStore,
    SqliteStore,
    SweepReport,
    WorkflowState,
)

from .conftest import T0, claim, run_step, start

pytestmark = pytest.mark.timeout(60)


async def complete(store: DurableStore, wid: str, *, call: str | None = None,
                   now: float = T0) -> None:
    """Start workflow `wid` (one step) and complete it at `now`, with a completed call."""
    await start(store, wid, ("a",), now=now)
    ex = await claim(store, wid, now=now)
    if call is not None:
        await store.start_call(ex, call, fingerprint="f", lane=None, label=None, now=now)
        await store.complete_call(ex, call, output=1, usage=None, duration=0.1, now=now)
    await store.complete_step(ex, "out", now)


async def fail(store: DurableStore, wid: str, now: float = T0) -> None:
    await start(store, wid, ("a",), now=now)
    ex = await claim(store, wid, now=now)
    await store.fail_step(ex, "error", None, now, None)


async def cancel(store: DurableStore, wid: str, now: float = T0) -> None:
    await start(store, wid, ("a",), now=now)
    assert await store.cancel_workflow(wid, "stop", now)


async def states(store: DurableStore) -> dict[str, WorkflowState]:
    return {w.workflow_id: w.state for w in await store.workflows()}


async def test_a_sweep_removes_ended_workflows_with_all_they_keep(store: DurableStore) -> None:
    await complete(store, "done", call="c1")
    await cancel(store, "stopped")
    await fail(store, "failed")
    await start(store, "running", ("a", "b"))
    await run_step(store, "running")
    await start(store, "waiting", ("a",))
    await store.wait_step(await claim(store, "waiting"), "ok?", T0, key="q")
    for key in (call_queue_key("done", "c1"), "unrelated"):
        assert await store.save_job(key, fingerprint="f", output=1, completed_at=T0,
                                    expires_at=None)
    swept = {w: len(await store.load_events(w)) for w in ("done", "stopped")}
    last = await store.last_seq()

    report = await store.sweep(ended_before=T0 + 100)

    assert report == SweepReport(workflows=2, events=sum(swept.values()), calls=1)
    assert await states(store) == {
        "failed": WorkflowState.FAILED,
        "running": WorkflowState.RUNNING,
        "waiting": WorkflowState.WAITING,
    }
    for wid in swept:
        assert await store.get_workflow(wid) is None
        assert await store.load_events(wid) == [] and await store.event_rows(wid) == []
        assert await store.step_rows(wid) == [] and await store.calls(wid) == []
    assert await store.load_job(call_queue_key("done", "c1"), T0) is None
    assert await store.load_job("unrelated", T0) is not None
    assert {e.workflow_id for e in await store.load_events()} == {"failed", "running", "waiting"}
    assert await store.last_seq() == last  # the log's numbering does not go back
    assert await store.sweep(ended_before=T0 + 100) == SweepReport()  # nothing left to do


async def test_only_what_ended_strictly_before_the_cutoff_goes(store: DurableStore) -> None:
    await complete(store, "early", now=T0)
    await complete(store, "late", now=T0 + 50)
    assert await store.sweep(ended_before=T0) == SweepReport()
    aware = datetime.fromtimestamp(T0 + 50, UTC).astimezone(timezone_east())
    report = await store.sweep(ended_before=aware)  # an aware datetime, any zone
    assert report.workflows == 1 and list(await states(store)) == ["late"]
    assert (await store.sweep(ended_before=T0 + 50.001)).workflows == 1
    assert await states(store) == {}


def timezone_east() -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=5))


async def test_states_choose_which_ended_workflows_go(store: DurableStore) -> None:
    await complete(store, "done")
    await cancel(store, "stopped")
    await fail(store, "failed")
    assert (await store.sweep(ended_before=T0 + 1, states=["failed"])).workflows == 1
    assert set(await states(store)) == {"done", "stopped"}
    assert (await store.sweep(ended_before=T0 + 1, states=[WorkflowState.COMPLETED])).workflows == 1
    assert set(await states(store)) == {"stopped"}


async def test_open_workflows_are_never_swept(store: DurableStore) -> None:
    await start(store, "running", ("a", "b"), now=T0 - 1000)
    await run_step(store, "running", now=T0 - 1000)
    await start(store, "pending", ("a",), now=T0 - 1000)
    await start(store, "waiting", ("a",), now=T0 - 1000)
    await store.wait_step(await claim(store, "waiting", now=T0 - 1000), "ok?", T0 - 1000)
    for state in ("running", "waiting"):
        with pytest.raises(ValueError, match=state):
            await store.sweep(ended_before=T0 + 1e6, states=[state])
    report = await store.sweep(
        ended_before=T0 + 1e6, states=("completed", "failed", "cancelled")
    )
    assert report == SweepReport() and len(await states(store)) == 3


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"ended_before": datetime(2026, 1, 1)}, ValueError, "ended_before.*naive"),
        ({"ended_before": math.nan}, ValueError, "ended_before"),
        ({"ended_before": math.inf}, ValueError, "ended_before"),
        ({"ended_before": "30d"}, TypeError, "ended_before"),
        ({"ended_before": True}, TypeError, "ended_before"),
        ({"ended_before": T0, "states": "completed"}, TypeError, "states"),
        ({"ended_before": T0, "states": []}, ValueError, "at least one"),
        ({"ended_before": T0, "states": ["done"]}, ValueError, "'done'"),
        ({"ended_before": T0, "states": [1]}, TypeError, "states"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_goes(
    store: DurableStore, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    await complete(store, "done", now=T0 - 10)
    with pytest.raises(error, match=match):
        await store.sweep(**kwargs)
    assert list(await states(store)) == ["done"]


async def test_a_swept_id_is_used_again_and_sequence_numbers_are_not(
    store: DurableStore,
) -> None:
    await complete(store, "wf", call="c")
    last = await store.last_seq()
    assert (await store.sweep(ended_before=T0 + 1)).workflows == 1  # the latest events too
    assert await store.last_seq() == last
    _, created = await store.start_workflow("wf", ["x", "y"], {"new": True}, T0 + 2)
    assert created
    events = await store.load_events("wf")
    assert [e.seq for e in events] == [last + 1]
    assert await store.load_events(after_seq=last) == events
    ex = await claim(store, "wf", now=T0 + 2)
    await store.start_call(ex, "c", fingerprint="other", lane=None, label=None, now=T0 + 2)
    [row] = await store.calls("wf")
    assert row.fingerprint == "other" and row.first_seq > last


async def test_a_fork_stands_alone_when_its_parent_is_swept(store: DurableStore) -> None:
    await start(store, "p", ("a", "b"))
    ex = await claim(store, "p")
    await store.start_call(ex, "a1", fingerprint="f", lane=None, label=None, now=T0)
    await store.complete_call(ex, "a1", output={"v": 1}, usage=None, duration=0.1, now=T0)
    await store.complete_step(ex, "A", T0)
    await run_step(store, "p", 1, output="B")
    await store.fork_workflow("p", "f", step=1, now=T0 + 1)
    await store.fork_workflow("p", "g", step=1, now=T0 + 1)
    fork = (await store.load_events("f"), await store.calls("f"), await store.step_rows("f"))

    assert (await store.sweep(ended_before=T0 + 0.5)).workflows == 1  # the parent only
    assert set(await states(store)) == {"f", "g"}
    assert (await store.load_events("f"), await store.calls("f"),
            await store.step_rows("f")) == fork
    await run_step(store, "f", 1, output="B2", now=T0 + 2)
    row = await store.get_workflow("f")
    assert row is not None and row.state is WorkflowState.COMPLETED
    assert [c.output for c in await store.calls("f")] == [{"v": 1}]
    # ... and sweeping a fork leaves its sibling (and any parent) as it was
    assert await store.cancel_workflow("g", "stop", T0 + 3)
    assert (await store.sweep(ended_before=T0 + 3.5, states=["cancelled"])).workflows == 1
    assert set(await states(store)) == {"f"}
    await store.rebuild_projection()
    assert set(await states(store)) == {"f"} and await store.calls("f") == fork[1]


async def child_run(store: DurableStore, parent: str = "p") -> None:
    """Parent `parent` (one step) starts child ``<parent>/kid`` and waits on it; the child
    completes at T0 + 1, which answers the parent (running again, its step pending)."""
    await start(store, parent, ("s",))
    ex = await claim(store, parent)
    st = await store.start_child(ex, "kid", definition="k", step_names=["w"], input=1, now=T0)
    await store.wait_step(ex, st.wait.reason or "", T0, key=st.wait.key, details=st.wait.details)
    await run_step(store, f"{parent}/kid", output=2, now=T0 + 1)


async def test_a_child_run_goes_with_or_after_its_parent(store: DurableStore) -> None:
    await child_run(store)
    assert await states(store) == {"p": WorkflowState.RUNNING, "p/kid": WorkflowState.COMPLETED}
    # the parent's step, run again, would join the child by id: kept while the parent is
    assert await store.sweep(ended_before=T0 + 10) == SweepReport()
    await run_step(store, "p", output=3, now=T0 + 2)
    report = await store.sweep(ended_before=T0 + 10)
    assert report.workflows == 2 and report.calls == 1  # the parent's wait on the child
    assert await states(store) == {}


async def test_a_child_kept_for_its_parent_goes_in_a_later_round(store: DurableStore) -> None:
    """The child (completed) is examined before its parent (cancelled after the child
    ended): a second round of the same sweep removes it."""
    await child_run(store)
    assert await store.cancel_workflow("p", "stop", T0 + 2)
    assert (await store.sweep(ended_before=T0 + 10)).workflows == 2
    assert await states(store) == {}


async def test_a_cancelled_parent_and_its_cancelled_children_go_together(
    store: DurableStore,
) -> None:
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    await store.start_child(ex, "kid", definition="k", step_names=["w"], input=1, now=T0)
    assert await store.cancel_workflow("p", "stop", T0 + 1)
    assert await states(store) == {
        "p": WorkflowState.CANCELLED, "p/kid": WorkflowState.CANCELLED}
    assert await store.sweep(ended_before=T0 + 5) == SweepReport()  # p's lease fences it
    assert await store.release_dead(ex, T0 + 2, HANDED_BACK_REASON)
    assert (await store.sweep(ended_before=T0 + 5)).workflows == 2


async def test_a_fenced_workflow_is_kept_until_its_fence_expires_or_is_lifted(
    store: DurableStore,
) -> None:
    await start(store, "wf", ("a",))
    ex = await claim(store, "wf", ttl=30.0)  # the lease runs to T0 + 30
    assert await store.cancel_workflow("wf", "stop", T0 + 1)
    assert await store.sweep(ended_before=T0 + 20) == SweepReport()  # its body may still run
    assert (await store.sweep(ended_before=T0 + 31)).workflows == 1
    # lifted: a hand-back once the body stopped
    await start(store, "wf2", ("a",))
    ex = await claim(store, "wf2", ttl=30.0)
    assert await store.cancel_workflow("wf2", "stop", T0 + 1)
    assert await store.release_dead(ex, T0 + 2, HANDED_BACK_REASON)
    assert (await store.sweep(ended_before=T0 + 20)).workflows == 1


async def test_a_sweep_runs_in_short_transactions_that_other_writers_interleave(
    store: DurableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rules_sweep, "SWEEP_BATCH", 2)
    for i in range(5):
        await complete(store, f"w{i}")
    batches: list[int] = []
    write: Callable[..., Awaitable[Any]] = store._write_job  # type: ignore[attr-defined]

    async def counted(fn: Callable[..., Any], *args: Any) -> Any:
        done = await write(fn, *args)
        batches.append(done.report.workflows)
        if len(batches) == 1:  # between two transactions of the sweep, another writer
            await complete(store, "between", now=T0)
        return done

    monkeypatch.setattr(store, "_write_job", counted)
    report = await store.sweep(ended_before=T0 + 1)
    assert len(batches) >= 3 and max(batches) == 2 and report.workflows == sum(batches) == 6
    assert await states(store) == {}  # "between" started after the cursor: swept too


async def test_concurrent_sweeps_remove_each_workflow_once(
    store: DurableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rules_sweep, "SWEEP_BATCH", 3)
    for i in range(10):
        await complete(store, f"w{i}", call="c")
    reports = await asyncio.gather(*(store.sweep(ended_before=T0 + 1) for _ in range(3)))
    total = sum(reports, SweepReport())
    assert (total.workflows, total.calls) == (10, 10)
    assert await states(store) == {} and await store.load_events() == []


async def test_the_projection_rebuilt_after_a_sweep_has_no_swept_rows(
    store: DurableStore,
) -> None:
    await complete(store, "gone", call="c")
    await complete(store, "kept", now=T0 + 10)
    await store.sweep(ended_before=T0 + 5)
    rows = (await store.workflows(), await store.step_rows(), await store.calls())
    await store.rebuild_projection()
    assert (await store.workflows(), await store.step_rows(), await store.calls()) == rows
    assert [w.workflow_id for w in rows[0]] == ["kept"]


@pytest.fixture(params=["sqlite", "postgres"])
async def two(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[DurableStore, DurableStore]]:
    """Two store objects on one database, as two processes would hold."""
    if request.param == "postgres":
        target: Target = request.getfixturevalue("pg_target")
        opened = [await PostgresStore.open(target.dsn, schema=target.schema) for _ in "ab"]
    else:
        opened = [await SqliteStore.open(tmp_path / "shared.db") for _ in "ab"]
    try:
        yield opened[0], opened[1]
    finally:
        for s in opened:
            await s.close()


async def test_two_processes_sweep_while_one_writes(
    two: tuple[DurableStore, DurableStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rules_sweep, "SWEEP_BATCH", 5)
    a, b = two
    for i in range(30):
        await complete(a, f"old-{i}", call="c")

    async def writes() -> None:
        for i in range(15):
            await complete(b, f"new-{i}", call="c", now=T0 + 10)

    first, second, _ = await asyncio.gather(
        a.sweep(ended_before=T0 + 1), b.sweep(ended_before=T0 + 1), writes()
    )
    assert (first + second).workflows == 30
    assert await states(a) == {f"new-{i}": WorkflowState.COMPLETED for i in range(15)}
    assert {e.workflow_id for e in await b.load_events()} == {f"new-{i}" for i in range(15)}


async def test_a_run_group_member_is_kept_until_its_group_is_forgotten(
    store: DurableStore,
) -> None:
    """A resubmitted group starts the members it cannot find: a swept completed member would
    run again. Members stay while the manifest does (also one whose group id holds a ``/``);
    a workflow that only looks like a member goes."""
    await store.record_group("evals/v1", definition="d", items={"a": 1, "b": 2}, now=T0)
    await complete(store, "evals/v1/a")
    await complete(store, "evals/v1/zzz")  # not a key of the manifest
    report = await store.sweep(ended_before=T0 + 10)
    assert report.workflows == 1
    assert set(await states(store)) == {"evals/v1/a"}
    assert await store.forget_group("evals/v1")
    assert (await store.sweep(ended_before=T0 + 10)).workflows == 1
    assert await states(store) == {}


async def test_a_swept_workflows_messages_go_with_it(store: DurableStore) -> None:
    """Messages kept for a workflow (a topic no receive took, a key) go when it is swept: the
    id used again receives none of them, and its keys are free again."""
    await start(store, "m", ("a",))
    await store.send_message("m", "go", "old", T0, key="k1")
    await store.send_message("m", "other", "never taken", T0)
    await complete(store, "plain")
    await start(store, "live", ("a",))
    await store.send_message("live", "go", "stays", T0)
    await store.complete_step(await claim(store, "m"), "out", T0)
    assert len(await store.messages("m")) == 2

    assert (await store.sweep(ended_before=T0 + 100)).workflows == 2

    assert await store.messages("m") == []
    assert [m.payload for m in await store.messages("live")] == ["stays"]
    await start(store, "m", ("a",), now=T0 + 200)
    assert await store.messages("m") == []
    ex = await claim(store, "m", now=T0 + 200)
    row = await store.wait_step(ex, "next?", T0 + 200, key="receive:0:go:0", topic="go")
    assert row.state is WorkflowState.WAITING  # the old "go" message is not taken
    sent = await store.send_message("m", "go", "new", T0 + 201, key="k1")
    assert sent.sent and sent.delivered_to == 0
    assert [m.payload for m in await store.messages("m")] == ["new"]


async def test_a_workflow_is_kept_while_its_end_hooks_are_delivered(store: DurableStore) -> None:
    """Hooks are at-least-once and a delivery reads the final result from the store: a
    workflow whose outbox row an engine claimed stays until the row is delivered (also
    between failed deliveries), then goes with the row. A row no engine claimed (no engine
    holds a hook for it) keeps nothing and goes with its workflow."""
    await complete(store, "hooked")
    await complete(store, "unheld")
    [row] = await store.claim_hooks("w1", T0 + 1, 10.0, plain=True, workflow_id="hooked")

    assert (await store.sweep(ended_before=T0 + 100)).workflows == 1
    assert set(await states(store)) == {"hooked"}
    assert await store.hooks("unheld") == []
    assert await store.retry_hook(row.seq, "w1", T0 + 50, "Boom: x", T0 + 2)
    assert (await store.sweep(ended_before=T0 + 100)).workflows == 0  # due again: kept
    [again] = await store.claim_hooks("w2", T0 + 50, 10.0, plain=True)
    assert (await store.sweep(ended_before=T0 + 100)).workflows == 0
    assert await store.finish_hook(again.seq, T0 + 51)

    assert (await store.sweep(ended_before=T0 + 100)).workflows == 1
    assert await states(store) == {}
    assert await store.hooks("hooked") == []
    await complete(store, "hooked", now=T0 + 200)  # the id used again: its own end only
    [new] = await store.hooks("hooked")
    assert new.seq > row.seq and not new.delivered
