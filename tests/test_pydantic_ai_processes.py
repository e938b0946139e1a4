"""pydantic-ai agent runs across real processes: a SIGKILL mid-run, a wait across a restart.

The child (`agent_crash_child.py`) runs the scripted agent on a SQLite file; every model
request and tool body appends a line to a side file, so the counts below are what really
reached the provider and the world.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import agent_crash_child as child
import child_runs
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import Queue, RunResult, RunStatus, WorkflowEngine, recover
from agentq.clock import FakeClock
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.store import CallKind, SqliteStore

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "agent_crash_child.py"


async def run_child(mode: str, db: Path, side: Path, **env: str) -> tuple[int, str, str]:
    return await child_runs.run_child(CHILD, mode, db, side, **env)


ran = child_runs.side_runs


async def test_sigkill_mid_run_then_continue_in_a_new_process(tmp_path: Path) -> None:
    db, side = tmp_path / "agent.db", tmp_path / "side.txt"
    code, out, err = await run_child("crash", db, side, **{child.CRASH_AT: "m1"})
    assert code == -signal.SIGKILL, (out, err)
    before, _ = ran(side)
    assert before == Counter({"model 0": 1, "tool add 1 2": 1, "tool add 3 4": 1,
                              "model 1": 1, "tool mul 3 7": 1})
    async with SqliteStore(db) as store:
        left = {r.key: r.state for r in await store.calls("run-crash")}
    assert left == {"model:0": "completed", "tool:0.0:a1": "completed", "tool:0.1:a2": "completed",
                    "model:1": "completed", "tool:1.0:m1": "started"}

    clock = FakeClock(start=time.time() + 60)  # well past the dead worker's 5 s lease
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
        # Building the same DurableAgent registers its definition: `recover` continues the run.
        durable = child.DurableAgent(child.build_agent(side), engine)
        report = await recover(engine)
        assert report.resumed == ("run-crash",)
        assert (await report.wait())["run-crash"].status is RunStatus.COMPLETED
        answered = engine.answered_from_log
        run = await durable.run(child.PROMPT, run_id="run-crash")  # its recorded result
        rows = await store.calls("run-crash")
    assert run.status is RunStatus.COMPLETED, run.reason
    assert run.output == "done after 2 requests"

    after, pids = ran(side)
    # Completed model requests and tool calls were answered from the log, never re-requested;
    # the tool call in doubt (m1) ran once more; the last request ran once, in this process.
    assert after == before + Counter({"tool mul 3 7": 1, "model 2": 1})
    assert pids["model 2"] == {str(os.getpid())}
    assert answered == 4  # model:0, tool:0.0:a1, tool:0.1:a2, model:1
    runs = {r.key: r.runs for r in rows if r.kind is CallKind.CALL}
    assert runs == {"model:0": 1, "tool:0.0:a1": 1, "tool:0.1:a2": 1, "model:1": 1,
                    "tool:1.0:m1": 2, "model:2": 1}
    model_made = sum(n for k, n in after.items() if k.startswith("model"))
    tools_made = sum(n for k, n in after.items() if k.startswith("tool"))
    print(f"\ncrash test: model requests made {model_made}, tool calls made {tools_made}, "
          f"answered from the log {answered}")


async def test_a_run_waiting_for_approval_survives_the_process(tmp_path: Path) -> None:
    db, side = tmp_path / "agent.db", tmp_path / "side.txt"
    code, out, err = await run_child("wait", db, side)
    assert code == 0 and out.strip() == "waiting", (out, err)

    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="kernel-2")
        durable = child.DurableAgent(child.build_agent(side, approval=True), engine)
        [pending] = await durable.pending_approvals()
        assert (pending.run_id, pending.tool, pending.args) == ("run-wait", "send", {"to": "bob"})
        # The engine's own verb, by id (what the ApprovalPanel's click sends).
        answer = {"approved": True, "note": "", "override_args": {"to": "carol"}}
        done = await engine.resume("run-wait", "agent", answer, key=pending.key)
    assert done.status is RunStatus.COMPLETED
    runs, _ = ran(side)
    assert runs["tool send carol"] == 1 and runs["tool send bob"] == 0
    assert all(n == 1 for n in runs.values()), runs


async def test_stored_run_options_serve_the_continuation_in_another_process(
    tmp_path: Path,
) -> None:
    db, side = tmp_path / "agent.db", tmp_path / "side.txt"
    code, out, err = await run_child("options", db, side)
    assert code == 0 and out.strip() == "waiting", (out, err)

    seen: list[tuple[object, object]] = []
    scripted = child.script(side, True)

    def recording(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        seen.append(((info.model_settings or {}).get("temperature"),
                     last.instructions if isinstance(last, ModelRequest) else None))
        response = scripted.function(messages, info)  # type: ignore[misc]
        assert isinstance(response, ModelResponse)
        return response

    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="kernel-2")
        durable = DurableAgent(child.build_agent(side, approval=True), engine,
                               models={"scripted": FunctionModel(recording)})
        done = await engine.resume("run-options", "agent", True, key="approval:2.0:s1")
    assert isinstance(done, RunResult) and done.status is RunStatus.COMPLETED
    assert durable.name == "calc"
    # The last request ran here, with the model, settings and instructions stored by the child.
    assert len(seen) == 1 and seen[0][0] == 0.5 and "In French." in str(seen[0][1])


async def test_sigkill_during_parallel_tool_calls_reruns_only_the_calls_not_recorded(
    tmp_path: Path,
) -> None:
    db, side = tmp_path / "agent.db", tmp_path / "side.txt"
    code, out, err = await run_child("parallel", db, side, **{child.CRASH_AT: "p1"})
    assert code == -signal.SIGKILL, (out, err)
    before, _ = ran(side)
    assert before == Counter({"model 0": 1, "tool p0": 1, "tool p1": 1, "tool p2": 1})
    async with SqliteStore(db) as store:
        left = {r.key: r.state for r in await store.calls("run-parallel")}
    # p0 returned and was recorded while p1 and p2 still ran: they are in doubt.
    assert left == {"model:0": "completed", "tool:0.0:p0": "completed",
                    "tool:0.1:p1": "started", "tool:0.2:p2": "started"}

    clock = FakeClock(start=time.time() + 60)  # well past the dead worker's 5 s lease
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
        durable = child.DurableAgent(child.build_parallel_agent(side), engine)
        report = await recover(engine)
        assert (await report.wait())["run-parallel"].status is RunStatus.COMPLETED
        run = await durable.run(child.PARALLEL_PROMPT, run_id="run-parallel")
        rows = await store.calls("run-parallel")
    assert run.status is RunStatus.COMPLETED, run.reason
    assert run.output == "p0 p1 p2"  # the returns in the model's order
    after, _ = ran(side)
    assert after == before + Counter({"tool p1": 1, "tool p2": 1, "model 1": 1})
    runs = {r.key: r.runs for r in rows if r.kind is CallKind.CALL}
    assert runs == {"model:0": 1, "tool:0.0:p0": 1, "tool:0.1:p1": 2, "tool:0.2:p2": 2,
                    "model:1": 1}
