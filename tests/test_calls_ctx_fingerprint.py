"""A call whose function reads the step's context is the same call in a retry and a fork.

Review A #3: ``ctx.call(Job("k", lambda: f(ctx.workflow_id)))`` compared the whole
`StepContext` (its repr: the attempt, the workflow id) as an input of the call, so the retry
of the step (attempt 2) or a fork (another workflow id) failed with `KeyConflictError`. The
context is not an input: `StepContext` implements the queue's fingerprint protocol
(``__agentq_fingerprint__``), and the call answers from the log, run once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentq import Job, Queue, RetryPolicy, RunStatus, StepContext, StepDef, WorkflowEngine
from agentq.queue.fingerprint import derive_fingerprint
from agentq.queue.fingerprint_stored import stored_fingerprint
from agentq.store import MemoryStore, SqliteStore
from agentq.workflows import WorkflowDef

pytestmark = pytest.mark.timeout(30)

RAN: Counter[str] = Counter()


def lookup(workflow_id: str) -> dict[str, Any]:
    RAN["lookup"] += 1
    return {"for": workflow_id}


async def step(ctx: StepContext) -> dict[str, Any]:
    RAN["step"] += 1
    out: dict[str, Any] = await ctx.call(Job("k", lambda: lookup(ctx.workflow_id)))
    if ctx.attempt == 1 and ctx.workflow_id == "wf":
        raise RuntimeError("flaky after the call")
    await ctx.call(Job("k2", lambda: lookup(ctx.step_name)))
    return out


DEF = WorkflowDef("ctx-calls", [StepDef("s", step, retry=RetryPolicy(2))])


@pytest.fixture(params=["memory", "sqlite"])
async def engine(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[WorkflowEngine]:
    RAN.clear()
    store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "s.db")
    async with Queue() as queue, store, WorkflowEngine(queue, store) as eng:
        eng.register(DEF)
        yield eng


async def test_a_retried_step_answers_a_call_over_ctx_from_the_log(
    engine: WorkflowEngine,
) -> None:
    await engine.start(DEF, "wf", None)
    result = await engine.run("wf")
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.outputs == ({"for": "wf"},)
    assert Counter({"step": 2, "lookup": 2}) == RAN  # k ran once, k2 once
    RAN.clear()
    fork = await engine.fork("wf", "wf-fork", at=("s", "k2"))  # k answers from the copy
    assert fork.status is RunStatus.COMPLETED, fork.reason
    assert fork.outputs == ({"for": "wf"},)
    assert Counter({"step": 1, "lookup": 1}) == RAN  # only k2 ran live


def test_the_context_is_one_value_to_every_fingerprint() -> None:
    def ctx(workflow_id: str, attempt: int) -> StepContext:
        return StepContext(workflow_id=workflow_id, step_index=0, step_name="s",
                           attempt=attempt, input=None, outputs=(), previous=None)

    def call(c: StepContext) -> Any:
        return lambda: lookup(c.workflow_id)

    one, two = call(ctx("wf", 1)), call(ctx("other", 2))
    assert derive_fingerprint(one) == derive_fingerprint(two)
    assert stored_fingerprint(one) == stored_fingerprint(two)
    # what the call passes besides the context still counts
    assert derive_fingerprint(lambda: lookup("a")) != derive_fingerprint(lambda: lookup("b"))


class Client:
    """Stands for its endpoint as a call's input, whatever else it holds."""

    def __init__(self, endpoint: str, calls: int) -> None:
        self.endpoint, self.calls = endpoint, calls

    def __repr__(self) -> str:
        return f"Client({self.endpoint!r}, calls={self.calls})"

    def __agentq_fingerprint__(self) -> str:
        return self.endpoint


class Broken(Client):
    def __agentq_fingerprint__(self) -> str:
        raise RuntimeError("no")


def use(client: Client) -> Any:
    return lambda: client.endpoint


@pytest.mark.parametrize("form", ["live", "stored"])
def test_the_fingerprint_protocol(form: str) -> None:
    take: Any = derive_fingerprint if form == "live" else stored_fingerprint
    assert take(use(Client("a", 1))) == take(use(Client("a", 2)))  # repr differs: same call
    assert take(use(Client("a", 1))) != take(use(Client("b", 1)))
    if form == "live":  # a hook that raises: by identity
        broken = Broken("a", 1)
        assert take(use(broken)) == take(use(broken))
        assert take(use(broken)) != take(use(Broken("a", 1)))


async def answer(value: object) -> object:
    return value


async def test_explicit_fingerprints_of_one_attempt_are_each_stored_as_their_own(
    engine: WorkflowEngine,
) -> None:
    """An attempt takes an explicit text fingerprint once (`CallLog._fingerprint`): each call
    still gets the stored fingerprint of its own value, never another call's; a tuple that
    holds more than text (1 vs True) is taken each time and kept apart."""
    explicit: list[Any] = [("agent", "tool", "a"), ("agent", "tool", "a"), ("agent", "tool", "b"),
                           "text", ("n", 1), ("n", True)]

    async def calls(ctx: StepContext) -> None:
        for i, fingerprint in enumerate(explicit):
            await ctx.call(Job(f"c{i}", lambda i=i: answer(i), fingerprint=fingerprint))

    definition = WorkflowDef("explicit-fingerprints", [StepDef("s", calls)])
    engine.register(definition)
    await engine.start(definition, "fp", None)
    assert (await engine.run("fp")).status is RunStatus.COMPLETED
    rows = {row.key: row.fingerprint for row in await engine.store.calls("fp")}
    assert [rows[f"c{i}"] for i in range(len(explicit))] == [
        stored_fingerprint(None, fingerprint) for fingerprint in explicit
    ]
    assert len(set(rows.values())) == 5  # the two equal tuples alone share one


async def test_an_explicit_fingerprint_of_texts_and_none_is_computed_once_an_attempt(
    engine: WorkflowEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `DurableAgent`'s model requests share ``("pydantic-ai", "model", None)``: the attempt
    computes its stored fingerprint once, and each row holds the value's own."""
    from agentq.workflows import calls as calls_module

    real = calls_module.stored_fingerprint
    computed: list[Any] = []

    def counted(fn: Any, explicit: Any = None) -> str:
        computed.append(explicit)
        return real(fn, explicit)

    monkeypatch.setattr(calls_module, "stored_fingerprint", counted)
    explicit: list[Any] = [("pydantic-ai", "model", None)] * 3 + [("pydantic-ai", None, "t")]

    async def calls(ctx: StepContext) -> None:
        for i, fingerprint in enumerate(explicit):
            await ctx.call(Job(f"c{i}", lambda i=i: answer(i), fingerprint=fingerprint))

    definition = WorkflowDef("explicit-none", [StepDef("s", calls)])
    engine.register(definition)
    await engine.start(definition, "fp-none", None)
    assert (await engine.run("fp-none")).status is RunStatus.COMPLETED
    assert computed == [("pydantic-ai", "model", None), ("pydantic-ai", None, "t")]
    rows = {row.key: row.fingerprint for row in await engine.store.calls("fp-none")}
    assert [rows[f"c{i}"] for i in range(len(explicit))] == [
        real(None, fingerprint) for fingerprint in explicit
    ]
