"""SIGKILL while a real provider's response streams: the child (`provider_crash_child.py`)
streams a DurableAgent run from pydantic-ai's `OpenAIChatModel`; the stub holds its second
response half sent and the parent kills the child there. A new engine on the same file
continues the run: the first response and both tool calls answer from the log, only the
request in doubt is sent again, and the caller's handler gets the recorded parts, then the
new stream's deltas."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import child_runs
import provider_crash_child as child
import pytest
from provider_shapes import openai_stream_replies
from provider_stub import ProviderStub
from pydantic_ai.messages import AgentStreamEvent, PartDeltaEvent, PartStartEvent

from agentq import Queue, RunStatus, WorkflowEngine
from agentq.clock import FakeClock
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.store import CallKind, SqliteStore

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent


async def test_sigkill_mid_stream_then_the_run_continues_from_the_log(tmp_path: Path) -> None:
    db, side = tmp_path / "agent.db", tmp_path / "side.txt"
    first, second = openai_stream_replies()
    stub = ProviderStub([first, dataclasses.replace(second, stall_after=2)])
    with stub.serving() as url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "provider_crash_child.py"), url, str(db), str(side),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        stalled = await asyncio.to_thread(stub.stalled.wait, 60)
        proc.send_signal(signal.SIGKILL)  # while the second response streams
        out, err = await proc.communicate()
    assert stalled and proc.returncode == -signal.SIGKILL, (out, err)
    before, _ = child_runs.side_runs(side)
    # the first response's deltas reached the child's handler live, then both tools ran; the
    # stalled response's first piece may have reached it too before the kill (a loaded
    # machine delivers the SIGKILL later), never more than once
    streamed = Counter({"delta Rome is rainy.": before["delta Rome is rainy."]})
    assert streamed["delta Rome is rainy."] <= 1
    assert before - streamed == Counter(
        {"delta both cities.": 1, "tool Paris": 1, "tool Rome": 1}
    )

    seen: list[AgentStreamEvent] = []

    async def handler(ctx: object, events: AsyncIterator[AgentStreamEvent]) -> None:
        async for event in events:
            seen.append(event)

    again = ProviderStub([second])
    clock = FakeClock(start=time.time() + 60)  # past the dead child's 5 s lease
    with again.serving() as url:
        async with (
            child.openai_model(url) as model,
            Queue(clock=clock) as queue,
            SqliteStore(db) as store,
        ):
            engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
            durable = DurableAgent(child.build_agent(model, side), engine)
            run = await durable.run(child.PROMPT, run_id=child.RUN_ID,
                                    event_stream_handler=handler)
            rows = await store.calls(child.RUN_ID)
    assert run.status is RunStatus.COMPLETED, run.reason
    assert run.output == "Paris is sunny, Rome is rainy."
    assert again.served == 1  # only the request in doubt was sent again
    after, _ = child_runs.side_runs(side)
    assert after == before  # no tool ran again
    runs = {r.key: r.runs for r in rows if r.kind is CallKind.CALL}
    assert runs == {"model:0": 1, "tool:0.2:call_0": 1, "tool:0.3:call_1": 1, "model:1": 2}
    # the handler: the first response's recorded parts (no delta), the second's live stream
    starts = [e.part.part_kind for e in seen if isinstance(e, PartStartEvent)]
    assert starts == ["thinking", "text", "tool-call", "tool-call", "text"]
    deltas = [e.delta.part_delta_kind for e in seen if isinstance(e, PartDeltaEvent)]
    assert deltas == ["text"]
