"""Streamed and nested `DurableAgent` runs across real processes: a SIGKILL while a model
request streams; a SIGKILL inside a sub-agent's child run.

The children (`agent_stream_child.py`) run on a SQLite file; every model request and tool
body appends a line to a side file, so the counts below are what really reached the
provider and the world.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import agent_stream_child as child
import child_runs
import pytest
from pydantic_ai.messages import (
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
)

from agentq import Queue, RunStatus, WorkflowEngine
from agentq.clock import FakeClock
from agentq.integrations.pydantic_ai import DurableAgent, DurableRunResultEvent
from agentq.store import CallKind, CallState, SqliteStore

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "agent_stream_child.py"


async def test_sigkill_while_a_request_streams_then_a_new_process_finishes(
    tmp_path: Path,
) -> None:
    db, side = tmp_path / "agent.db", tmp_path / "side.txt"
    code, out, err = await child_runs.run_child(
        CHILD, "stream", db, side, **{child.DIE_IN_STREAM: "1"})
    assert code == -signal.SIGKILL, (out, err)
    assert out == "live: The answer \n"  # the first piece came while request 1 ran
    before, _ = child_runs.side_runs(side)
    assert before == Counter({"model 0": 1, "tool add": 1, "model 1": 1})
    async with SqliteStore(db) as store:
        left = {r.key: r.state for r in await store.calls("run-stream")}
    assert left == {"model:0": "completed", "tool:0.0:a1": "completed", "model:1": "started"}

    clock = FakeClock(start=time.time() + 60)  # well past the dead worker's 5 s lease
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
        durable = DurableAgent(child.build_stream_agent(side), engine)
        events: list[Any] = [
            e async for e in durable.run_stream_events(child.PROMPT, run_id="run-stream")]
        rows = await store.calls("run-stream")
    end = events[-1]
    assert isinstance(end, DurableRunResultEvent), events
    assert end.run.status is RunStatus.COMPLETED and end.run.output == "The answer is 3."
    # Request 0 answered from the log (its recorded tool call, whole, in one event); the
    # request in flight asked again and streamed live here.
    starts = [e.part for e in events if isinstance(e, PartStartEvent)]
    assert isinstance(starts[0], ToolCallPart) and starts[0].args_as_dict() == {"a": 1, "b": 2}
    assert isinstance(starts[1], TextPart) and starts[1].content == "The answer "
    deltas = [e.delta.content_delta for e in events
              if isinstance(e, PartDeltaEvent) and isinstance(e.delta, TextPartDelta)]
    assert deltas == ["is 3."]
    after, _ = child_runs.side_runs(side)
    assert after == before + Counter({"model 1": 1})  # only the request in flight again
    runs = {r.key: r.runs for r in rows if r.kind is CallKind.CALL}
    assert runs == {"model:0": 1, "tool:0.0:a1": 1, "model:1": 2}


async def test_sigkill_inside_a_sub_agent_joins_the_same_child_in_a_new_process(
    tmp_path: Path,
) -> None:
    db, side = tmp_path / "agent.db", tmp_path / "side.txt"
    code, out, err = await child_runs.run_child(
        CHILD, "subagent", db, side, **{child.DIE_IN_CHILD: "1"})
    assert code == -signal.SIGKILL, (out, err)
    before, _ = child_runs.side_runs(side)
    assert before == Counter({"boss 0": 1, "tool delegate": 1, "helper 0": 1, "tool work": 1,
                              "helper 1": 1})
    child_id = "job/tool:0.0:d1"
    async with SqliteStore(db) as store:
        parent_left = {r.key: r.state for r in await store.calls("job")}
        child_left = {r.key: r.state for r in await store.calls(child_id)}
    assert parent_left == {"model:0": "completed", "tool:0.0:d1": "started",
                           "child:tool:0.0:d1": "waiting"}
    assert child_left == {"model:0": "completed", "tool:0.0:w1": "completed",
                          "model:1": "started"}

    clock = FakeClock(start=time.time() + 60)  # well past the dead worker's 5 s lease
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
        boss, _ = child.build_team(side, engine)
        run = await boss.run("go", run_id="job")
        workflows = [w.workflow_id for w in await store.workflows()]
        child_rows = {r.key: r.runs for r in await store.calls(child_id)
                      if r.kind is CallKind.CALL}
    async with SqliteStore(db) as store:  # as the file holds it
        [wait] = [r for r in await store.calls("job") if r.key == "child:tool:0.0:d1"]
    assert run.status is RunStatus.COMPLETED, run.reason
    # The child's end in the new process answered the parent's wait on it (`ChildEnded`).
    assert wait.state is CallState.ANSWERED and wait.output["state"] == "completed"
    # The parent's call ran again and joined the same child: no second child run.
    assert run.output == f"boss: {child_id}=helped"
    assert sorted(workflows) == ["job", child_id]
    after, _ = child_runs.side_runs(side)
    # Only what was in flight ran again: the parent's call (its body re-joins the child) and
    # the child's request in flight; the child's recorded request and tool answered from
    # its log.
    assert after == before + Counter({"tool delegate": 1, "helper 1": 1, "boss 1": 1})
    assert child_rows == {"model:0": 1, "tool:0.0:w1": 1, "model:1": 2}
