"""What a `DurableAgent` run costs beyond the engine's own work: the store reads it adds and
the objects it builds per run (issue 25, the Agents target: a `DurableAgent.run` costs no more
than the same run through ``engine.start`` + ``engine.run``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import agent_crash_child as child
import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from agentq import RunStatus, WorkflowEngine
from agentq.errors import WorkflowMismatchError
from agentq.integrations.pydantic_ai import DurableAgent

_READS = ("get_workflow", "calls")


def count_reads(engine: WorkflowEngine, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """A counter of the store's reads (`get_workflow`, `calls`), by verb, from now on."""
    seen: Counter[str] = Counter()
    store = engine.store
    for verb in _READS:
        read: Callable[..., Awaitable[Any]] = getattr(store, verb)

        async def counted(*args: Any, _verb: str = verb, _read: Any = read, **kw: Any) -> Any:
            seen[_verb] += 1
            return await _read(*args, **kw)

        monkeypatch.setattr(store, verb, counted)
    return seen


async def test_a_new_run_reads_the_store_no_more_than_the_engine_path(
    engine: WorkflowEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    durable = DurableAgent(child.build_agent(tmp_path / "side.txt"), engine)
    reads = count_reads(engine, monkeypatch)
    assert await engine.start(durable.name, "plain", {
        "agent": durable.name, "prompt": child.PROMPT, "message_history": None})
    assert (await engine.run("plain")).status is RunStatus.COMPLETED
    through_engine = Counter(reads)
    reads.clear()
    run = await durable.run(child.PROMPT, run_id="durable")
    assert run.status is RunStatus.COMPLETED, run.reason
    # The engine path's reads and no more: no read of the workflow before storing it, and
    # the report's rows (its tree, its pending waits) are those the completing attempt
    # recorded, equal to the store's.
    assert reads == through_engine, (reads, through_engine)
    stored = await engine.store.calls("durable")
    assert list(run._calls) == stored and len(stored) > 1
    assert run.tree_html == (await durable.run(child.PROMPT, run_id="durable")).tree_html


def test_only_ended_calls_are_handed_to_the_report() -> None:
    """A wait (an approval, an event) may change after the attempt (answered, timed out),
    and so may a call still running: the report of a run whose log holds one reads the rows
    from the store (`ended_calls` says None)."""
    from agentq.integrations.pydantic_ai._step import ended_calls
    from agentq.store import CallKind, CallRow, CallState

    call = CallRow("w", "tool:0.0:a", CallKind.CALL, 0, CallState.COMPLETED, first_seq=3)
    first = CallRow("w", "model:0", CallKind.CALL, 0, CallState.FAILED, first_seq=1)
    assert ended_calls([call, first]) == (first, call)  # in the store's order
    running = CallRow("w", "tool:0.1:b", CallKind.CALL, 0, CallState.STARTED, first_seq=4)
    wait = CallRow("w", "approval:0.0:a", CallKind.WAIT, 0, CallState.ANSWERED, first_seq=5)
    assert ended_calls([call, running]) is None and ended_calls([call, wait]) is None


async def test_a_stored_run_is_compared_by_identity_after_the_engine_refuses_it(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    durable = DurableAgent(child.build_agent(tmp_path / "side.txt"), engine)
    first = await durable.run(child.PROMPT, run_id="same")
    # The same history with new timestamps is the same run (the engine's exact compare
    # refuses it; the identity compare takes it)...
    turn = await durable.run("again", run_id="next", message_history=first.messages)
    rebuilt = await durable.messages("same")
    again = await durable.run("again", run_id="next", message_history=rebuilt)
    assert again.status is RunStatus.COMPLETED and again.output == turn.output
    # ...another prompt is another run, refused naming the difference.
    with pytest.raises(WorkflowMismatchError, match=r"input\['prompt'\]"):
        await durable.start("other", run_id="next", message_history=rebuilt)


async def test_one_operation_backend_serves_every_run(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    durable = DurableAgent(child.build_agent(tmp_path / "side.txt"), engine)
    capability = durable._step._capability
    backend = capability.get_durable_operation_backend()
    for n in range(3):
        run = await durable.run(child.PROMPT, run_id=f"r{n}")
        assert run.status is RunStatus.COMPLETED, run.reason
    assert capability.get_durable_operation_backend() is backend


async def test_the_capability_is_bound_once_while_the_agent_stays_the_same(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    agent = child.build_agent(tmp_path / "side.txt")
    durable = DurableAgent(agent, engine)
    capability = durable._step._capability
    bound = capability.for_agent(agent)
    assert capability.for_agent(agent) is bound
    run = await durable.run(child.PROMPT, run_id="once")
    assert run.status is RunStatus.COMPLETED and capability.for_agent(agent) is bound
    assert getattr(bound, "_bound", None) is None  # the copy holds no older copies

    # The agent given another model: bound again, and the runs use it.
    agent.model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("new")]))
    rebound = capability.for_agent(agent)
    assert rebound is not bound
    run = await durable.run(child.PROMPT, run_id="new-model")
    assert run.status is RunStatus.COMPLETED and run.output == "new"
    assert capability.for_agent(agent) is rebound


async def test_model_operations_are_bound_once_per_model_not_per_request(
    engine: WorkflowEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = child.build_agent(tmp_path / "side.txt")
    durable = DurableAgent(agent, engine)
    bound = durable._step._capability.for_agent(agent)
    binds: list[tuple[object, object]] = []
    bind = type(bound).__mro__[1]._bind_model_operations  # pydantic-ai's own

    def counted(self: Any, backend: Any, *, model_id: Any, model_name: str) -> Any:
        binds.append((model_id, model_name))
        return bind(self, backend, model_id=model_id, model_name=model_name)

    monkeypatch.setattr(type(bound).__mro__[1], "_bind_model_operations", counted)
    for n in range(2):
        run = await durable.run(child.PROMPT, run_id=f"r{n}")
        assert run.status is RunStatus.COMPLETED, run.reason
        assert run.usage.requests >= 2  # more than one request to the same model...
    assert len(binds) == 1, binds  # ...whose operations were bound once, for both runs

    # Another model: its own operations, answering with its own responses.
    agent.model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("new")]))
    run = await durable.run(child.PROMPT, run_id="new-model")
    assert run.status is RunStatus.COMPLETED and run.output == "new"
    assert len(binds) == 2 and binds[1] != binds[0], binds
