"""Run groups (`engine.group`): submit, results as they end, status, resume, cancel, forget,
on MemoryStore and SqliteStore (the store verbs on PostgreSQL too: ``tests/store``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from agentq import (
    GroupStatus,
    Job,
    NonRetryable,
    StepContext,
    StepDef,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.clock import FakeClock
from agentq.errors import KeyConflictError, PayloadError, UnknownWorkflowError
from agentq.events import EventKind
from agentq.store import DurableGroups, DurableStore, WorkflowState

pytestmark = pytest.mark.timeout(60)


def square(runs: Counter[str], gates: dict[str, asyncio.Event] | None = None) -> WorkflowDef:
    """Squares its input; counts its runs by key; "boom" fails; a gated key waits its gate."""

    async def body(ctx: StepContext) -> Any:
        key = ctx.workflow_id.split("/")[-1]
        runs[key] += 1
        if gates is not None and key in gates:
            await gates[key].wait()
        if ctx.input == "boom":
            raise NonRetryable(f"{key} refuses boom")
        return ctx.input * ctx.input

    return WorkflowDef("square", [StepDef("square", body)])


async def drain(engine: WorkflowEngine, group_id: str) -> list[Any]:
    return [m async for m in engine.group(group_id).results()]


async def test_submit_runs_every_member_and_results_yields_each_once(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    runs: Counter[str] = Counter()
    group = engine.group("g")
    assert await group.submit(square(runs), {"a": 2, "b": 3, "c": 4}) is True
    members = [m async for m in group.results()]
    assert {m.key: m.output for m in members} == {"a": 4, "b": 9, "c": 16}
    assert {m.status for m in members} == {"completed"}
    assert [m.workflow_id for m in sorted(members, key=lambda m: m.key)] == ["g/a", "g/b", "g/c"]
    assert runs == Counter({"a": 1, "b": 1, "c": 1})
    status = await group.status()
    assert status == GroupStatus(completed=3)
    assert dict(status) == {"pending": 0, "running": 0, "waiting": 0, "completed": 3,
                            "failed": 0, "cancelled": 0}
    assert status.total == 3 and status.ended == 3
    # an iteration after the end yields the ended members again, by end order
    again = [m.key for m in await drain(engine, "g")]
    assert again == [m.key for m in members]


async def test_results_follow_end_order_and_include_those_ended_before(
    engine: WorkflowEngine,
) -> None:
    runs: Counter[str] = Counter()
    gates = {k: asyncio.Event() for k in ("a", "b", "c")}
    group = engine.group("order")
    await group.submit(square(runs, gates), {"a": 1, "b": 2, "c": 3, "d": 4})
    seen: list[str] = []
    it = group.results().__aiter__()
    seen.append((await it.__anext__()).key)  # d has no gate: it ends first
    for key in ("c", "a", "b"):  # release in this order, each end seen before the next
        gates[key].set()
        seen.append((await it.__anext__()).key)
    with pytest.raises(StopAsyncIteration):
        await it.__anext__()
    assert seen == ["d", "c", "a", "b"]
    later = [m.key for m in await drain(engine, "order")]  # all ended: the same order
    assert later == seen


async def test_results_read_each_ended_member_not_the_whole_group_at_each_end(
    engine: WorkflowEngine, store: DurableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 25: results() read every member again each time one ended: N reads of N rows.
    # Now one read of the group, then one read of one row per end (the fake clock never
    # reaches the poll interval here).
    runs: Counter[str] = Counter()
    keys = [f"k{i:02}" for i in range(12)]
    gates = {key: asyncio.Event() for key in keys}
    group = engine.group("reads")
    await group.submit(square(runs, gates), dict.fromkeys(keys, 2))
    reads = 0
    assert isinstance(store, DurableGroups)
    group_members = store.group_members

    def counted(group_id: str) -> Any:
        nonlocal reads
        reads += 1
        return group_members(group_id)

    monkeypatch.setattr(store, "group_members", counted)
    it = group.results().__aiter__()
    seen = []
    for key in keys:  # each end seen before the next gate opens (4 permits: in order)
        gates[key].set()
        seen.append((await it.__anext__()).key)
    with pytest.raises(StopAsyncIteration):
        await it.__anext__()
    assert seen == keys
    assert reads == 1
    assert engine.tables()["watchers"] == 0  # the iteration ended: nothing left watching
    early = group.results()
    assert (await anext(early)).key == keys[0]
    assert engine.tables()["watchers"] == 1
    await early.aclose()  # a consumer that stops early: its watcher goes too
    assert engine.tables()["watchers"] == 0


async def test_results_read_no_steps_of_members_a_run_here_completed(
    engine: WorkflowEngine, store: DurableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 25 (session 11): each member yielded read all its step rows for its last output;
    # a member completed by a run of this engine comes with that run's outputs. One that
    # ended otherwise (failed here, or before the iteration) is still read.
    runs: Counter[str] = Counter()
    group = engine.group("steps")
    await group.submit(square(runs), {"a": 2, "b": 3, "boom": "boom"})
    read: list[str] = []
    step_rows = store.step_rows

    def counted(workflow_id: str | None = None) -> Any:
        read.append(str(workflow_id))
        return step_rows(workflow_id)

    monkeypatch.setattr(store, "step_rows", counted)
    members = {m.key: m async for m in group.results()}
    assert {k: (m.status, m.output) for k, m in members.items()} == {
        "a": ("completed", 4), "b": ("completed", 9), "boom": ("failed", None),
    }
    assert members["boom"].reason == "boom refuses boom"
    assert read == ["steps/boom"]  # the completed ones' outputs came from their runs
    again = {m.key: m for m in await drain(engine, "steps")}  # ended before: read, the same
    assert {k: m.output for k, m in again.items()} == {k: m.output for k, m in members.items()}
    assert sorted(read) == ["steps/a", "steps/b", "steps/boom", "steps/boom"]


async def test_a_member_output_from_its_run_is_the_callers_own(
    engine: WorkflowEngine, store: DurableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, looked_up = asyncio.Event(), asyncio.Event()
    get_workflow = store.get_workflow

    async def lookup(workflow_id: str) -> Any:
        row = await get_workflow(workflow_id)
        looked_up.set()  # the joiner goes on to join the run in this same task step
        return row

    monkeypatch.setattr(store, "get_workflow", lookup)

    async def body(ctx: StepContext) -> Any:
        await gate.wait()
        return {"items": [ctx.input]}

    group = engine.group("own")
    await group.submit(WorkflowDef("listing", [StepDef("list", body)]), {"a": 1})
    joined = asyncio.create_task(engine.run("own/a"))  # shares the run in progress
    await looked_up.wait()
    gate.set()
    [member] = [m async for m in group.results()]
    assert member.output == {"items": [1]}
    member.output["items"].append(2)  # the caller's copy: the run's result is unchanged
    assert (await joined).output == {"items": [1]}


async def test_results_see_a_member_ended_without_a_run_here_at_the_next_poll(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    # A member that ends with no run of this engine telling it (cancelled in the store, as
    # another process would) is seen by the read of every member each poll interval.
    runs: Counter[str] = Counter()
    gates = {"held": asyncio.Event()}
    group = engine.group("poll")
    await group.submit(square(runs, gates), {"held": 2, "free": 3})
    it = group.results().__aiter__()
    assert (await it.__anext__()).key == "free"
    assert await store.cancel_workflow("poll/held", "from elsewhere", clock.time())
    following = asyncio.ensure_future(it.__anext__())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not following.done()  # no run here ended: nothing read yet
    await clock.advance(engine.poll_interval)
    member = await asyncio.wait_for(following, 10)
    assert (member.key, member.status, member.reason) == ("held", "cancelled", "from elsewhere")
    gates["held"].set()  # let the interrupted body end


async def test_a_second_submit_reruns_only_members_that_did_not_succeed(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    runs: Counter[str] = Counter()
    definition = square(runs)
    items = {"ok": 5, "bad": "boom"}
    group = engine.group("again")
    await group.submit(definition, items)
    first = {m.key: m async for m in group.results()}
    assert first["bad"].status == "failed" and "refuses boom" in (first["bad"].reason or "")
    assert first["ok"].output == 25
    assert await group.status() == GroupStatus(completed=1, failed=1)

    assert await group.submit(definition, items) is False  # the same set: runs "bad" again
    second = {m.key: m async for m in group.results()}
    assert second["bad"].status == "failed"
    assert runs == Counter({"ok": 1, "bad": 2})
    events = await store.load_events("again/ok")
    assert sum(e.kind is EventKind.STEP_STARTED for e in events) == 1
    assert await group.resume() == 1  # resume does the same
    [m async for m in group.results()]
    assert runs == Counter({"ok": 1, "bad": 3})


async def test_a_changed_input_for_one_key_raises_and_changes_nothing(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    runs: Counter[str] = Counter()
    group = engine.group("conflict")
    await group.submit(square(runs), {"a": 1, "b": 2})
    await drain(engine, "conflict")
    before = await store.load_events()
    manifest = await group.manifest()
    with pytest.raises(KeyConflictError, match="'b'"):
        await group.submit(square(runs), {"a": 1, "b": 3})
    with pytest.raises(ValueError, match="1 new \\('c'\\), 0 missing"):
        await group.submit(square(runs), {"a": 1, "b": 2, "c": 3})
    with pytest.raises(ValueError, match="0 new \\(\\), 1 missing \\('b'\\)"):
        await group.submit(square(runs), {"a": 1})
    other = WorkflowDef("other", [StepDef("s", lambda ctx: 1)])
    with pytest.raises(KeyConflictError, match="another definition for 2 key\\(s\\): 'a', 'b'"):
        await group.submit(other, {"a": 1, "b": 2})
    assert await store.load_events() == before
    assert await group.manifest() == manifest
    assert runs == Counter({"a": 1, "b": 1})


def power(name: str, exponent: int, runs: Counter[str]) -> WorkflowDef:
    """Raises its input to `exponent`; counts its runs by key; "boom" fails."""

    async def body(ctx: StepContext) -> Any:
        runs[ctx.workflow_id.split("/")[-1]] += 1
        if ctx.input == "boom":
            raise NonRetryable("refuses boom")
        return ctx.input**exponent

    return WorkflowDef(name, [StepDef("power", body)])


async def test_each_key_may_have_its_own_definition(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    runs: Counter[str] = Counter()
    sq, cube = power("sq", 2, runs), power("cube", 3, runs)
    group = engine.group("per-key")
    assert await group.submit({"a": sq, "b": cube, "c": "sq"}, {"a": 2, "b": 2, "c": 3})
    outputs = {m.key: m.output for m in await drain(engine, "per-key")}
    assert outputs == {"a": 4, "b": 8, "c": 9}
    manifest = await group.manifest()
    assert manifest is not None and manifest.definitions == {"a": "sq", "b": "cube", "c": "sq"}
    rows = {row.workflow_id: row.definition for row in await store.workflows()}
    assert rows == {"per-key/a": "sq", "per-key/b": "cube", "per-key/c": "sq"}


async def test_per_key_definitions_must_name_the_items_keys(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    runs: Counter[str] = Counter()
    sq = power("sq", 2, runs)
    group = engine.group("mismatch")
    with pytest.raises(ValueError, match="1 without an item \\('z'\\), 1 without a definition"
                       " \\('b'\\)"):
        await group.submit({"a": sq, "z": sq}, {"a": 1, "b": 2})
    with pytest.raises(TypeError, match="mapping of key to one"):
        await group.submit({"a": sq, "b": 7}, {"a": 1, "b": 2})  # type: ignore[dict-item]
    assert await group.manifest() is None
    assert await store.workflows() == []


async def test_another_definition_for_a_key_raises_and_changes_nothing(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    runs: Counter[str] = Counter()
    sq, cube = power("sq", 2, runs), power("cube", 3, runs)
    group = engine.group("redefined")
    await group.submit({"a": sq, "b": cube}, {"a": 2, "b": 2})
    await drain(engine, "redefined")
    before, manifest = await store.load_events(), await group.manifest()
    with pytest.raises(KeyConflictError, match="another definition for 1 key\\(s\\): 'b'"):
        await group.submit({"a": sq, "b": sq}, {"a": 2, "b": 2})
    with pytest.raises(KeyConflictError, match="1 key\\(s\\): 'b' \\(stored: 'cube'"):
        await group.submit(sq, {"a": 2, "b": 2})  # one definition for all: 'b' differs
    assert await group.submit({"b": cube, "a": sq}, {"b": 2, "a": 2}) is False  # the same
    assert await store.load_events() == before
    assert await group.manifest() == manifest
    assert runs == Counter({"a": 1, "b": 1})


async def test_resume_runs_each_key_with_its_own_definition(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    runs: Counter[str] = Counter()
    sq, cube = power("sq", 2, runs), power("cube", 3, runs)
    group = engine.group("mixed")
    await group.submit({"a": sq, "b": cube, "c": cube}, {"a": 2, "b": "boom", "c": 2})
    first = {m.key: m.status for m in await drain(engine, "mixed")}
    assert first == {"a": "completed", "b": "failed", "c": "completed"}
    assert await group.resume() == 1  # only the failed one, with its own definition
    again = {m.key: m for m in await drain(engine, "mixed")}
    assert again["b"].status == "failed" and "refuses boom" in (again["b"].reason or "")
    assert runs == Counter({"a": 1, "b": 2, "c": 1})
    # a fresh engine on the same store knows only one of the two definitions: refused, named
    other = WorkflowEngine(engine.queue, store)
    other.register(sq)
    try:
        with pytest.raises(UnknownWorkflowError, match=r"1 definition\(s\).*'cube'"):
            await other.group("mixed").resume()
    finally:
        await other.close()
    assert runs == Counter({"a": 1, "b": 2, "c": 1})


async def test_bad_inputs_are_refused_before_anything_is_stored(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    definition = square(Counter())
    with pytest.raises(ValueError, match="holds no '/'"):
        engine.group("a/b")
    group = engine.group("bad")
    with pytest.raises(ValueError, match="empty"):
        await group.submit(definition, {})
    with pytest.raises(TypeError, match="mapping"):
        await group.submit(definition, [("a", 1)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"group member key holds no '/' \(the group member's"):
        await group.submit(definition, {"x/y": 1})
    with pytest.raises(ValueError, match="group member key must not be empty"):
        await group.submit(definition, {"": 1})
    with pytest.raises(PayloadError, match="member 'k'"):
        await group.submit(definition, {"k": object()})
    with pytest.raises(UnknownWorkflowError, match="nope"):
        await group.submit("nope", {"k": 1})
    with pytest.raises(UnknownWorkflowError, match="no run group 'bad'"):
        await group.status()
    with pytest.raises(UnknownWorkflowError):
        await group.resume()
    assert await group.manifest() is None
    assert await store.workflows() == []


async def test_cancel_cancels_the_open_members_and_resume_runs_them_again(
    engine: WorkflowEngine,
) -> None:
    runs: Counter[str] = Counter()
    gates = {"slow": asyncio.Event()}
    definition = square(runs, gates)
    group = engine.group("c")
    await group.submit(definition, {"fast": 2, "slow": 3})
    it = group.results().__aiter__()
    assert (await it.__anext__()).key == "fast"
    assert await group.cancel("enough") == 1
    cancelled = await it.__anext__()
    assert (cancelled.key, cancelled.status, cancelled.reason) == ("slow", "cancelled", "enough")
    assert await group.status() == GroupStatus(completed=1, cancelled=1)
    assert await group.cancel() == 0
    gates["slow"].set()  # the cancelled body may still be on its way out: resume waits
    assert await group.resume() == 1
    done = {m.key: m.output async for m in group.results()}
    assert done == {"fast": 4, "slow": 9}
    assert runs == Counter({"fast": 1, "slow": 2})


async def test_forget_removes_the_manifest_and_keeps_the_members(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    group = engine.group("f")
    await group.submit(square(Counter()), {"a": 1})
    await drain(engine, "f")
    assert await group.forget() is True
    assert await group.forget() is False
    assert await group.manifest() is None
    row = await store.get_workflow("f/a")
    assert row is not None and row.state is WorkflowState.COMPLETED
    with pytest.raises(UnknownWorkflowError):
        await group.status()
    # the id can be used again, with other items: the old member is reused as stored
    assert await group.submit(square(Counter()), {"a": 1, "b": 2}) is True
    assert {m.key: m.output async for m in group.results()} == {"a": 1, "b": 4}


async def test_submit_after_forget_refuses_a_member_stored_with_another_input(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    group = engine.group("fr")
    await group.submit(square(Counter()), {"x": 1, "y": 2})
    await drain(engine, "fr")
    assert await group.forget() is True
    with pytest.raises(KeyConflictError, match=r"'fr'.*1 member\(s\).*'y'"):
        await group.submit(square(Counter()), {"x": 1, "y": 3})
    assert await group.manifest() is None  # nothing was stored
    row = await store.get_workflow("fr/y")
    assert row is not None and row.input == 2


async def test_children_of_members_are_not_members(engine: WorkflowEngine) -> None:
    leaf = WorkflowDef("leaf", [StepDef("leaf", lambda ctx: ctx.input + 1)])

    async def parent(ctx: StepContext) -> Any:
        return await ctx.child(leaf, ctx.input, key="kid")

    group = engine.group("fam")
    await group.submit(WorkflowDef("parent", [StepDef("p", parent)]), {"x": 1, "y": 2})
    assert {m.key: m.output async for m in group.results()} == {"x": 2, "y": 3}
    assert (await group.status()).total == 2


async def test_group_frame_has_fixed_columns_and_dtypes(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    pytest.importorskip("pandas")
    from agentq.frames import GROUP_DTYPES, group_frame

    async def body(ctx: StepContext) -> Any:
        if ctx.input == "boom":
            raise NonRetryable("no")
        job_input = ctx.input
        return await ctx.call(
            Job("model", lambda: job_input * 2),
            usage={"input_tokens": 3, "output_tokens": 5},
        )

    group = engine.group("frame")
    await group.submit(WorkflowDef("tokens", [StepDef("s", body)]), {"b": 1, "a": "boom", "c": 2})
    await drain(engine, "frame")
    frame = await group_frame(store, "frame")
    assert {c: str(t) for c, t in frame.dtypes.items()} == GROUP_DTYPES
    assert list(frame["key"]) == ["b", "a", "c"]  # the order submitted
    assert list(frame["status"]) == ["completed", "failed", "completed"]
    assert list(frame["status"].cat.categories) == list(GroupStatus())
    assert frame["output"].tolist() == [2, None, 4]
    assert "no" in frame["reason"][1] and frame["reason"].isna().tolist() == [True, False, True]
    assert frame["input_tokens"].tolist()[0] == 3 and frame["output_tokens"].tolist()[2] == 5
    assert str(frame["ended_at"].dt.tz) == "UTC"
    assert (frame["duration"] >= frame["duration"].iloc[0] * 0).all()

    empty_group = engine.group("later")
    await store.record_group("later", definition="tokens", items={"x": 1}, now=0.0)  # type: ignore[attr-defined]
    empty = await group_frame(store, "later")
    assert {c: str(t) for c, t in empty.dtypes.items()} == GROUP_DTYPES
    assert list(empty["status"]) == ["pending"] and empty["ended_at"].isna().all()
    assert await empty_group.status() == GroupStatus(pending=1)
    with pytest.raises(UnknownWorkflowError):
        await group_frame(store, "nothing")


async def test_a_member_whose_tool_failed_runs_it_again_once_the_tool_is_fixed(
    engine: WorkflowEngine,
) -> None:
    """The user story of a resubmit: a tool fails on some items, the user fixes it (its code or
    the values it uses, so the call's fingerprint) and submits the group again. The failed
    members' calls run again under the new fingerprint (before: KeyConflictError at once);
    the completed members' calls are not made again."""
    fixed = {"now": False}
    made: Counter[str] = Counter()

    async def grader(question: str, fixed_version: bool) -> str:
        made[question] += 1
        if question == "bad" and not fixed_version:
            raise ValueError(f"cannot parse {question}")
        return question.upper()

    async def body(ctx: StepContext) -> Any:
        question, version = ctx.input, fixed["now"]  # the fix shows in the values it uses
        return await ctx.call(Job(f"grade:{question}", lambda: grader(question, version)))

    grade = WorkflowDef("grade", [StepDef("grade", body)])
    group = engine.group("fix")
    await group.submit(grade, {"ok": "ok", "bad": "bad"})
    first = {m.key: m.status for m in await drain(engine, "fix")}
    assert first == {"ok": "completed", "bad": "failed"}
    fixed["now"] = True
    await group.submit(grade, {"ok": "ok", "bad": "bad"})  # the retry is stored: results waits
    members = {m.key: (m.status, m.output, m.reason) for m in await drain(engine, "fix")}
    assert members == {"ok": ("completed", "OK", None), "bad": ("completed", "BAD", None)}
    assert made == Counter({"ok": 1, "bad": 2})
