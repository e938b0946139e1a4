"""The same scripted agent on a plain pydantic-ai `Agent` and on agentq's `DurableAgent`.

    python -m bench.agent_parity

The script (a `FunctionModel`, streamed too): request 1 thinks, says a few words and asks for
two parallel tool calls; request 2 asks for one more; request 3 ends the run on the output
tool with a typed output (a pydantic model). The same agent runs plainly (`Agent.run`) and
durably (`DurableAgent.run` on a `SqliteStore`), each once without and once with an
event-stream handler (the model requests then stream); the durable run is also read back by a
fresh engine on the same file (`durable.run` of the same run id, `durable.messages`). Printed:
for each thing compared (outputs, messages modulo timestamps and ids, usage, tool runs, the
kinds of the events in order) whether it matches, and what differs when it does not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from pydantic_ai.models.function import (
    AgentInfo,
    DeltaThinkingCalls,
    DeltaThinkingPart,
    DeltaToolCall,
    DeltaToolCalls,
    FunctionModel,
)

from agentq import Queue, SqliteStore, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent


class Refunds(BaseModel):
    """The agent's typed output."""

    orders: list[int]
    total: float


_CALLS: list[list[tuple[str, dict[str, Any]]]] = [
    [("lookup", {"order": 1}), ("lookup", {"order": 2})],  # two parallel calls
    [("refund", {"order": 2, "amount": 12.5})],
]


def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    n = sum(isinstance(m, ModelResponse) for m in messages)
    if n < len(_CALLS):
        parts: list[Any] = [ThinkingPart(f"step {n}"), TextPart(f"Working on step {n}.")]
        parts += [ToolCallPart(name, args, f"c{n}.{i}") for i, (name, args) in
                  enumerate(_CALLS[n])]
        return ModelResponse(parts=parts)
    output = info.output_tools[0].name
    return ModelResponse(parts=[ToolCallPart(output, {"orders": [2], "total": 12.5}, "out")])


async def _stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls | DeltaThinkingCalls]:
    response = _respond(messages, info)
    for part in response.parts:
        if isinstance(part, ThinkingPart):
            yield {100: DeltaThinkingPart(content=part.content)}
        elif isinstance(part, TextPart):
            for word in part.content.split(" "):
                yield word + " "
    calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
    for i, call in enumerate(calls):
        yield {i: DeltaToolCall(name=call.tool_name, json_args=call.args_as_json_str(),
                                tool_call_id=call.tool_call_id)}


@dataclass
class Outcome:
    """What one run gave: output, messages, usage, tool runs, event kinds."""

    output: Any
    messages: list[ModelMessage]
    usage: Any
    ran: list[str]
    events: list[str] = field(default_factory=list)


def _agent(ran: list[str]) -> Agent[None, Refunds]:
    agent: Agent[None, Refunds] = Agent(
        FunctionModel(_respond, stream_function=_stream), name="parity", output_type=Refunds
    )

    @agent.tool_plain
    async def lookup(order: int) -> dict[str, Any]:
        """Look an order up."""
        ran.append(f"lookup({order})")
        return {"order": order, "paid": 12.5 * order}

    @agent.tool_plain
    async def refund(order: int, amount: float) -> str:
        """Refund an order."""
        ran.append(f"refund({order})")
        return f"refunded {amount} on order {order}"

    return agent


def _kind(event: AgentStreamEvent) -> str:
    if isinstance(event, PartStartEvent):
        return f"start:{event.part.part_kind}"
    if isinstance(event, PartDeltaEvent):
        return f"delta:{event.delta.part_delta_kind}"
    return str(event.event_kind)


def _handler(kinds: list[str]) -> Any:
    async def handle(ctx: object, events: AsyncIterator[AgentStreamEvent]) -> None:
        async for event in events:
            kinds.append(_kind(event))

    return handle


async def plain(streamed: bool) -> Outcome:
    """The agent run by pydantic-ai alone."""
    ran: list[str] = []
    kinds: list[str] = []
    handler = _handler(kinds) if streamed else None
    result = await _agent(ran).run("Refund order 2", event_stream_handler=handler)
    return Outcome(result.output, result.all_messages(), result.usage, ran, kinds)


async def durable(path: Path, streamed: bool) -> tuple[Outcome, Outcome]:
    """The agent run by a `DurableAgent`, then read back by a fresh engine on the file."""
    ran: list[str] = []
    kinds: list[str] = []
    handler = _handler(kinds) if streamed else None
    async with Queue() as queue, SqliteStore(path) as store:
        engine = WorkflowEngine(queue, store)
        run = await DurableAgent(_agent(ran), engine).run(
            "Refund order 2", run_id="parity", event_stream_handler=handler
        )
        await engine.close()
    live = Outcome(run.output, list(run.messages), run.usage, list(ran), kinds)
    async with Queue() as queue, SqliteStore(path) as store:
        engine = WorkflowEngine(queue, store)
        again = DurableAgent(_agent(ran), engine)
        read = await again.run("Refund order 2", run_id="parity")
        messages = await again.messages("parity")
        await engine.close()
    return live, Outcome(read.output, messages, read.usage, ran[len(live.ran):])


def _timeless(part: Any) -> Any:
    return dataclasses.replace(part, timestamp=None) if hasattr(part, "timestamp") else part


def normalized(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """Messages without what is new in every run: timestamps, run and conversation ids."""
    out: list[ModelMessage] = []
    for message in messages:
        parts = [_timeless(p) for p in message.parts]
        each: Any = message  # a request or a response: the fields are the same
        out.append(dataclasses.replace(
            each, parts=parts, timestamp=None, run_id=None, conversation_id=None
        ))
    return out


def compare(name: str, a: Any, b: Any) -> str:
    """One line: ``match`` or what differs (the first difference of two lists)."""
    if a == b:
        return f"  {name:<34} match"
    if isinstance(a, list) and isinstance(b, list):
        i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                 min(len(a), len(b)))
        x = a[i] if i < len(a) else "<end>"
        y = b[i] if i < len(b) else "<end>"
        return f"  {name:<34} DIFFERS at [{i}] (of {len(a)} vs {len(b)}): {x!r:.90} vs {y!r:.90}"
    return f"  {name:<34} DIFFERS: {a!r:.100} vs {b!r:.100}"


def report(title: str, base: Outcome, other: Outcome, *, live: bool, events: bool) -> list[str]:
    """The comparison lines of `other` against `base` (`live`: its tool runs compared;
    `events`: its event kinds)."""
    lines = [title]
    lines.append(compare("output (typed)", base.output, other.output))
    lines.append(compare("output type", type(base.output), type(other.output)))
    lines.append(compare("messages (modulo timestamps, ids)", normalized(base.messages),
                         normalized(other.messages)))
    lines.append(compare("message kinds and parts",
                         [[p.part_kind for p in m.parts] for m in base.messages],
                         [[p.part_kind for p in m.parts] for m in other.messages]))
    lines.append(compare("usage (RunUsage)", base.usage, other.usage))
    if live:
        lines.append(compare("tool runs", sorted(base.ran), sorted(other.ran)))
    if events:
        lines.append(compare("event kinds, in order", base.events, other.events))
        lines.append(compare("event kinds, as a multiset", sorted(base.events),
                             sorted(other.events)))
    return lines


def by_design(base: Outcome, live: Outcome, read: Outcome) -> list[str]:
    """What differs by design (left out of the message comparison), as found."""

    def ids(outcome: Outcome, name: str) -> set[object]:
        return {getattr(m, name) for m in outcome.messages}

    def same_times(a: Outcome, b: Outcome) -> int:
        return sum(x.timestamp == y.timestamp for x, y in zip(a.messages, b.messages,
                                                               strict=False))

    n = len(base.messages)
    return [
        "  differs by design (not compared above):",
        f"    run_id           plain {ids(base, 'run_id')} · durable {ids(live, 'run_id')}"
        f" · read back {ids(read, 'run_id')}",
        f"    conversation_id  plain {len(ids(base, 'conversation_id'))} id · durable live "
        f"and read back the same: {ids(live, 'conversation_id') == ids(read, 'conversation_id')}",
        f"    timestamps       equal to plain's in {same_times(base, live)}/{n} messages;"
        f" read back equal to live in {same_times(live, read)}/{n} (responses: from the log)",
    ]


async def main() -> None:
    """Run the comparisons and print them."""
    with tempfile.TemporaryDirectory() as tmp:
        for streamed in (False, True):
            mode = "with an event_stream_handler (streamed)" if streamed else "Agent.run"
            base = await plain(streamed)
            live, read = await durable(Path(tmp) / f"parity-{streamed}.db", streamed)
            title = f"{mode}: DurableAgent live vs plain Agent"
            for line in report(title, base, live, live=True, events=streamed):
                print(line)
            title = f"{mode}: read back by a fresh engine vs plain Agent"
            for line in report(title, base, read, live=False, events=False):
                print(line)
            print(f"  {'tool runs when read back':<34} {len(read.ran)} (answered from the log)")
            for line in by_design(base, live, read):
                print(line)


if __name__ == "__main__":
    asyncio.run(main())
