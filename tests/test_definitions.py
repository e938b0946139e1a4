"""`WorkflowDef`, `engine.register` / `unregister` / `start`, and instances run by id.

Two engines on one store stand for two processes here (a fresh engine knows only what was
registered on it); `test_definitions_processes.py` does the same with real processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentq import (
    InvalidKeyError,
    NonRetryable,
    Recorded,
    RunStatus,
    StepContext,
    StepDef,
    StepStatus,
    WaitForInput,
    Workflow,
    WorkflowDef,
    WorkflowEngine,
    WorkflowMismatchError,
    recover,
)
from agentq.clock import FakeClock
from agentq.errors import (
    NotRetryableError,
    NotWaitingError,
    UnknownStepError,
    UnknownWorkflowError,
)
from agentq.events import EventKind
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import DurableStore, MemoryStore

pytestmark = pytest.mark.timeout(60)


def steps(*names: str, log: list[str] | None = None, tag: str = "") -> list[StepDef]:
    """Steps that return ``"<tag><name>:<input>"``; each run is appended to `log`."""

    def make(name: str) -> StepDef:
        def body(ctx: StepContext) -> str:
            if log is not None:
                log.append(f"{tag}{ctx.workflow_id}.{name}")
            return f"{tag}{name}:{ctx.input}"

        return StepDef(name, body)

    return [make(n) for n in names]


def waiting_step(name: str, log: list[str], tag: str = "") -> StepDef:
    async def body(ctx: StepContext) -> Any:
        log.append(f"{tag}{ctx.workflow_id}.{name}")
        if not ctx.resumed:
            raise WaitForInput("ok?")
        return f"{tag}{ctx.resume_input}"

    return StepDef(name, body)


@pytest.fixture
async def other(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    """A second engine on the same store: another process, as far as registrations go."""
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}, clock=clock) as q:
        eng = WorkflowEngine(q, store, worker_id="w2", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()


async def kinds(store: DurableStore, workflow_id: str) -> list[EventKind]:
    return [e.kind for e in await store.load_events(workflow_id)]


# ------------------------------------------------------------------ WorkflowDef


def test_a_definition_is_frozen_and_makes_instances() -> None:
    order = WorkflowDef("order", steps("a", "b"))
    assert isinstance(order.steps, tuple) and order.step_names == ("a", "b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        order.name = "other"  # type: ignore[misc]
    wf = order.workflow("order-1", {"n": 1})
    assert (wf.id, wf.input, wf.definition, wf.steps) == ("order-1", {"n": 1}, "order", order.steps)
    assert Workflow("plain", steps("a")).definition is None


@pytest.mark.parametrize(
    ("name", "error", "words"),
    [
        ("", InvalidKeyError, "definition name"),
        ("x" * 1025, InvalidKeyError, "definition name"),
        ("bad\ud800", InvalidKeyError, "definition name"),
        (42, TypeError, "definition name"),
        (None, TypeError, "definition name"),
    ],
)
def test_a_bad_definition_name_is_refused_naming_it(
    name: Any, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        WorkflowDef(name, steps("a"))


@pytest.mark.parametrize(
    ("bad_steps", "error", "words"),
    [
        ([], ValueError, "definition 'd' has no steps"),
        (steps("a", "a"), ValueError, r"duplicate step names: \['a'\]"),
        (["a"], TypeError, "steps must be StepDef, got 'a'"),
        ("ab", TypeError, "steps must be a sequence of StepDef"),
        (None, TypeError, "steps must be a sequence of StepDef"),
    ],
)
def test_bad_steps_are_refused_naming_them(
    bad_steps: Any, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        WorkflowDef("d", bad_steps)


def test_an_instance_needs_a_valid_id() -> None:
    with pytest.raises(InvalidKeyError, match="workflow id"):
        WorkflowDef("d", steps("a")).workflow("")
    with pytest.raises(InvalidKeyError, match="definition name"):
        Workflow("w", steps("a"), definition="")


def test_register_refuses_what_is_not_a_definition(engine: WorkflowEngine) -> None:
    with pytest.raises(TypeError, match="expects a WorkflowDef"):
        engine.register(Workflow("w", steps("a")))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="definition name or a workflow id"):
        engine.unregister(3)  # type: ignore[arg-type]


# ------------------------------------------------------------------ start and run by id


async def test_register_start_and_run_by_name_and_id(engine: WorkflowEngine) -> None:
    log: list[str] = []
    engine.register(WorkflowDef("order", steps("a", "b", log=log)))
    assert engine.definitions == ("order",) and engine.definition("order") is not None
    assert await engine.start("order", "o-1", {"n": 1}) is True
    assert log == []  # stored, not run
    [started] = await engine.store.load_events("o-1")
    assert started.data == {"steps": ["a", "b"], "input": {"n": 1}, "definition": "order"}
    row = await engine.store.get_workflow("o-1")
    assert row is not None and row.definition == "order"
    assert await engine.status("o-1") == [StepStatus.Pending(), StepStatus.Pending()]

    result = await engine.run("o-1")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ("a:{'n': 1}", "b:{'n': 1}")
    assert log == ["o-1.a", "o-1.b"]
    assert await engine.run("o-1") == result and log == ["o-1.a", "o-1.b"]
    assert engine.tables()["registered"] == 0  # instances are not kept: the store has them


async def test_start_is_idempotent(engine: WorkflowEngine) -> None:
    order = WorkflowDef("order", steps("a"))
    assert await engine.start(order, "o-1", [1, 2]) is True
    assert await engine.start(order, "o-1", (1, 2)) is False  # the same JSON
    assert await engine.start("order", "o-1", [1, 2]) is False
    assert await kinds(engine.store, "o-1") == [EventKind.WORKFLOW_STARTED]


class CountingStore(MemoryStore):
    """A MemoryStore that counts `start_workflow` and `get_workflow`."""

    def __init__(self) -> None:
        super().__init__()
        self.starts = 0
        self.reads = 0

    async def start_workflow(self, *args: Any, **kwargs: Any) -> Any:
        self.starts += 1
        return await super().start_workflow(*args, **kwargs)

    async def get_workflow(self, workflow_id: str) -> Any:
        self.reads += 1
        return await super().get_workflow(workflow_id)


async def test_an_instance_run_by_id_is_stored_once_and_read_once(clock: FakeClock) -> None:
    """`start` stores it; `run(id)` reads it and runs it without storing it again; the run of
    an ended instance reads it once for its recorded result."""
    store = CountingStore()
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w1", clock=clock)
        order = WorkflowDef("order", steps("a", "b"))
        assert await engine.start(order, "o-1", {"n": 1}) is True
        assert (store.starts, store.reads) == (1, 0)
        result = await engine.run("o-1")
        assert result.status is RunStatus.COMPLETED
        assert (store.starts, store.reads) == (1, 1)
        assert await engine.run("o-1") == result
        assert (store.starts, store.reads) == (1, 2)
        assert await kinds(store, "o-1") == [
            EventKind.WORKFLOW_STARTED, *[EventKind.STEP_STARTED, EventKind.STEP_COMPLETED] * 2,
            EventKind.WORKFLOW_COMPLETED,
        ]
        # A Workflow object (not an id) is stored by its run, once, as before.
        assert (await engine.run(order.workflow("o-2", 2))).status is RunStatus.COMPLETED
        assert store.starts == 2
        await engine.close()


async def test_run_soon_and_resume_of_an_instance_by_id_store_it_no_more(
    clock: FakeClock,
) -> None:
    """Issue 25: the background run of `run_soon(id)` and the run a `resume(id)` continues
    drive the row their lookup read: neither stores the instance again (a second
    `start_workflow` per member and three per resume in the BFCL replay's run group)."""
    store = CountingStore()
    log: list[str] = []
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w1", clock=clock)
        approval = WorkflowDef("approval", [*steps("a", log=log), waiting_step("ask", log)])
        assert await engine.start(approval, "ap-1") is True
        engine.run_soon("ap-1")
        waiting = await asyncio.wait_for(engine.run("ap-1"), 10)
        assert waiting.status is RunStatus.WAITING
        assert store.starts == 1  # the start only
        reads = store.reads
        result = await engine.resume("ap-1", "ask", "yes")
        assert result.status is RunStatus.COMPLETED and result.output == "yes"
        assert (store.starts, store.reads) == (1, reads + 1)  # resume's lookup only
        assert log == ["ap-1.a", "ap-1.ask", "ap-1.ask"]
        await engine.close()


async def test_start_registers_a_definition_passed_on_the_way(engine: WorkflowEngine) -> None:
    old = WorkflowDef("order", steps("a", tag="old-"))
    new = WorkflowDef("order", steps("a", tag="new-"))
    engine.register(old)
    await engine.start(new, "o-1")
    assert engine.definition("order") is new
    assert (await engine.run("o-1")).output == "new-a:None"


async def test_start_of_an_unknown_name_stores_nothing(engine: WorkflowEngine) -> None:
    engine.register(WorkflowDef("order", steps("a")))
    with pytest.raises(UnknownWorkflowError, match=r"no definition named 'ordr'.*\['order'\]"):
        await engine.start("ordr", "o-1")
    with pytest.raises(TypeError, match="WorkflowDef or its name"):
        await engine.start(Workflow("o-1", steps("a")), "o-1")  # type: ignore[arg-type]
    assert await engine.store.get_workflow("o-1") is None


@pytest.mark.parametrize(
    ("again", "words"),
    [
        (lambda e: e.start("order", "o-1", {"n": 2}), "another input"),
        (lambda e: e.start(WorkflowDef("invoice", steps("a", "b")), "o-1", {"n": 1}),
         "from definition 'order', not from definition 'invoice'"),
        (lambda e: e.start(WorkflowDef("order", steps("a", "c")), "o-1", {"n": 1}),
         r"steps \['a', 'b'\]"),
        (lambda e: e.run(Workflow("o-1", steps("a", "b"), input={"n": 1})),
         "from definition 'order', not as a plain workflow"),
    ],
)
async def test_starting_an_id_again_otherwise_is_a_mismatch_and_changes_nothing(
    engine: WorkflowEngine, again: Callable[[WorkflowEngine], Any], words: str
) -> None:
    await engine.start(WorkflowDef("order", steps("a", "b")), "o-1", {"n": 1})
    before = await engine.store.load_events()
    with pytest.raises(WorkflowMismatchError, match=words):
        await again(engine)
    assert await engine.store.load_events() == before


async def test_a_refused_run_of_a_workflow_on_an_instance_id_registers_nothing(
    engine: WorkflowEngine,
) -> None:
    # Review 10 #5: the refused plain Workflow stayed registered, and every later run("i1")
    # of the real instance was refused with the same mismatch.
    order = WorkflowDef("order", steps("a"))
    await engine.start(order, "i1")
    with pytest.raises(WorkflowMismatchError):
        await engine.run(Workflow("i1", steps("a")))
    assert engine.workflow_ids == ()
    result = await asyncio.wait_for(engine.run("i1"), 10)
    assert result.status is RunStatus.COMPLETED and result.outputs == ("a:None",)


async def test_a_refused_run_keeps_a_workflow_registered_before(engine: WorkflowEngine) -> None:
    engine.register_workflow(Workflow("p1", steps("a"), input=1))
    await engine.store.start_workflow("p1", ("a",), 1, engine.clock.time(), definition="x")
    with pytest.raises(WorkflowMismatchError):
        await engine.run(Workflow("p1", steps("a"), input=1))
    assert engine.workflow_ids == ("p1",)  # registered before the refused run: kept


async def test_run_soon_of_an_instance_id_runs_it_like_run(
    engine: WorkflowEngine, other: WorkflowEngine
) -> None:
    # Review 10 #7: run_soon("w0") raised UnknownWorkflowError although run("w0") worked.
    log: list[str] = []
    order = WorkflowDef("order", steps("a", "b", log=log))
    await engine.start(order, "w0", 7)
    engine.run_soon("w0")
    assert engine.running("w0")
    engine.run_soon("w0")  # nothing changes: it runs already
    result = await asyncio.wait_for(engine.run("w0"), 10)
    assert result.outputs == ("a:7", "b:7") and log == ["w0.a", "w0.b"]
    with pytest.raises(UnknownWorkflowError, match="not registered"):
        other.run_soon("w0")  # no definition registered there: refused at once
    other.register(WorkflowDef("else", steps("z")))
    other.run_soon("nope")  # looked up in the background: joiners get the refusal
    with pytest.raises(UnknownWorkflowError):
        await asyncio.wait_for(other.run("nope"), 10)
    await other.close()
    assert not other.running("nope")


async def test_start_of_an_id_registered_as_a_plain_workflow_is_a_mismatch(
    engine: WorkflowEngine,
) -> None:
    engine.register_workflow(Workflow("w-1", steps("a")))
    with pytest.raises(WorkflowMismatchError, match="as a plain workflow"):
        await engine.start(WorkflowDef("order", steps("a")), "w-1")
    assert await engine.store.get_workflow("w-1") is None


async def test_run_of_an_instance_stores_its_definition(engine: WorkflowEngine) -> None:
    order = WorkflowDef("order", steps("a"))
    result = await engine.run(order.workflow("o-1", 5))
    assert result.output == "a:5"
    row = await engine.store.get_workflow("o-1")
    assert row is not None and row.definition == "order"


# ------------------------------------------------------------------ another engine, by id


async def test_another_engine_runs_an_instance_once_it_registered_the_definition(
    engine: WorkflowEngine, other: WorkflowEngine
) -> None:
    log: list[str] = []
    await engine.start(WorkflowDef("order", steps("a", "b", log=log)), "o-1", 7)
    with pytest.raises(UnknownWorkflowError, match="definition 'order', which is not registered"):
        await other.run("o-1")
    with pytest.raises(NotRetryableError, match="it is running"):  # the store's own check
        await other.retry("o-1")
    other.register(WorkflowDef("order", steps("a", "b", log=log, tag="other-")))
    result = await other.run("o-1")
    assert result.outputs == ("other-a:7", "other-b:7") and log == ["other-o-1.a", "other-o-1.b"]


async def test_resume_by_id_in_another_engine(
    engine: WorkflowEngine, other: WorkflowEngine
) -> None:
    log: list[str] = []
    approval = WorkflowDef("approval", [*steps("a", log=log), waiting_step("ask", log)])
    await engine.start(approval, "ap-1")
    assert (await engine.run("ap-1")).status is RunStatus.WAITING
    other.register(WorkflowDef("approval", [*steps("a", log=log), waiting_step("ask", log, "2:")]))
    result = await other.resume("ap-1", "ask", "yes")
    assert result.status is RunStatus.COMPLETED and result.output == "2:yes"
    assert log == ["ap-1.a", "ap-1.ask", "2:ap-1.ask"]  # "a" completed: never again


async def test_retry_and_cancel_by_id_in_another_engine(
    engine: WorkflowEngine, other: WorkflowEngine
) -> None:
    def flaky(ctx: StepContext) -> str:
        raise NonRetryable("broken")

    await engine.start(WorkflowDef("job", [StepDef("x", flaky)]), "j-1")
    assert (await engine.run("j-1")).status is RunStatus.FAILED
    other.register(WorkflowDef("job", steps("x")))  # the fixed code
    fixed = await other.retry("j-1")
    assert fixed.status is RunStatus.COMPLETED and fixed.output == "x:None"

    await engine.start("job", "j-2")
    assert await other.cancel("j-2", "not needed") is True
    assert (await other.run("j-2")).status is RunStatus.CANCELLED


async def test_a_definition_re_registered_with_other_steps_is_refused_for_stored_instances(
    engine: WorkflowEngine, other: WorkflowEngine
) -> None:
    log: list[str] = []
    await engine.start(WorkflowDef("approval", [waiting_step("ask", log)]), "ap-1")
    assert (await engine.run("ap-1")).status is RunStatus.WAITING
    await engine.start("approval", "ap-2")
    changed = WorkflowDef("approval", [*steps("check"), waiting_step("ask", log)])
    engine.register(changed)  # a notebook cell re-run with another step list
    before = await engine.store.load_events()
    words = r"steps \['ask'\].*registered with this engine has steps \['check', 'ask'\]"
    with pytest.raises(WorkflowMismatchError, match=words):
        await engine.resume("ap-1", "ask", "yes")
    with pytest.raises(WorkflowMismatchError, match=words):
        await engine.run("ap-2")
    report = await recover(engine)
    assert report.resumed == () and isinstance(report.errors["ap-2"], WorkflowMismatchError)
    assert await engine.store.load_events() == before  # nothing stored changed
    # New instances follow the new definition; the old ones run where the old one is.
    assert await engine.start("approval", "ap-3")
    assert (await engine.run("ap-3")).status is RunStatus.WAITING
    other.register(WorkflowDef("approval", [waiting_step("ask", log)]))
    assert (await other.resume("ap-1", "ask", "yes")).output == "yes"


async def test_re_registered_bodies_serve_the_next_step_of_an_instance(
    engine: WorkflowEngine,
) -> None:
    log: list[str] = []
    engine.register(WorkflowDef("approval", [waiting_step("ask", log)]))
    await engine.start("approval", "ap-1")
    assert (await engine.run("ap-1")).status is RunStatus.WAITING
    engine.register(WorkflowDef("approval", [waiting_step("ask", log, "fixed:")]))
    assert (await engine.resume("ap-1", "ask", "go")).output == "fixed:go"


# ------------------------------------------------------------------ unregister


async def test_unregister_a_definition_by_name(engine: WorkflowEngine) -> None:
    log: list[str] = []
    engine.register(WorkflowDef("approval", [waiting_step("ask", log)]))
    await engine.start("approval", "ap-1")
    assert (await engine.run("ap-1")).status is RunStatus.WAITING
    assert engine.unregister("approval") is True
    assert engine.unregister("approval") is False and engine.definitions == ()
    with pytest.raises(UnknownWorkflowError, match="definition 'approval'"):
        await engine.run("ap-1")
    with pytest.raises(UnknownWorkflowError, match="no definition named 'approval'"):
        await engine.start("approval", "ap-2")
    # A resume is recorded all the same: an engine that holds the definition runs it on.
    assert await engine.resume("ap-1", "ask", "yes") == Recorded("ap-1", "approval", "resumed")
    assert await engine.status("ap-1") == [StepStatus.Pending()]
    assert log == ["ap-1.ask"]


async def test_unregister_forgets_a_name_and_an_id_that_are_the_same_string(
    engine: WorkflowEngine,
) -> None:
    engine.register(WorkflowDef("same", steps("a")))
    engine.register_workflow(Workflow("same", steps("a")))
    assert engine.unregister("same") is True
    assert engine.definitions == () and engine.workflow_ids == ()
    assert engine.unregister("same") is False


async def test_a_run_in_progress_goes_on_after_unregister(engine: WorkflowEngine) -> None:
    started, gate = asyncio.Event(), asyncio.Event()

    async def slow(ctx: StepContext) -> str:
        started.set()
        await gate.wait()
        return "done"

    engine.register(WorkflowDef("slow", [StepDef("s", slow)]))
    await engine.start("slow", "s-1")
    run = asyncio.ensure_future(engine.run("s-1"))
    await started.wait()
    assert engine.unregister("slow")
    gate.set()
    assert (await run).output == "done"


# ------------------------------------------------------------------ recover


async def test_recover_runs_instances_of_registered_definitions_only(
    engine: WorkflowEngine, other: WorkflowEngine
) -> None:
    log: list[str] = []
    engine.register(WorkflowDef("order", steps("a", log=log)))
    engine.register(WorkflowDef("invoice", steps("a", log=log)))
    await engine.start("order", "o-1")
    await engine.start("invoice", "i-1")
    other.register(WorkflowDef("order", steps("a", log=log, tag="2:")))
    report = await recover(other)
    assert report.resumed == ("o-1",)
    assert set(report.unregistered) == {"i-1"} and report.errors == {}
    results = await report.wait()
    assert results["o-1"].output == "2:a:None"
    assert log == ["2:o-1.a"]


# ------------------------------------------------------------------ recorded elsewhere


async def test_resume_and_retry_without_the_definition_are_recorded_for_another_engine(
    engine: WorkflowEngine, other: WorkflowEngine
) -> None:
    log: list[str] = []
    fixed = False

    def flaky(ctx: StepContext) -> str:
        if not fixed:
            raise NonRetryable("broken")
        return "fixed"

    engine.register(WorkflowDef("approval", [waiting_step("ask", log)]))
    engine.register(WorkflowDef("job", [StepDef("x", flaky)]))
    await engine.start("approval", "ap-1")
    await engine.start("job", "j-1")
    assert (await engine.run("ap-1")).status is RunStatus.WAITING
    assert (await engine.run("j-1")).status is RunStatus.FAILED

    # "other" holds neither definition: it records, and says so.
    assert await other.resume("ap-1", 0, "yes") == Recorded("ap-1", "approval", "resumed")
    assert await other.retry("j-1", from_step="x") == Recorded("j-1", "job", "retried")
    assert (await kinds(other.store, "j-1"))[-1] is EventKind.WORKFLOW_RETRIED
    with pytest.raises(NotWaitingError):  # checked by the store as always: nothing recorded
        await other.resume("ap-1", "ask", "again")
    with pytest.raises(UnknownStepError):
        await other.retry("j-1", from_step="nope")
    with pytest.raises(UnknownWorkflowError):  # a plain workflow stays with its engine
        await other.resume("nobody", "ask", 1)

    fixed = True
    assert (await engine.run("ap-1")).output == "yes"
    assert (await engine.run("j-1")).output == "fixed"
