"""`DurableAgent` runs as pydantic-ai runs them: per-run options, multimodal prompts, typed
output and `RunUsage`, `start`, `continue_from`, the identity of a history, `current_run_id`.

"Another process" is a new queue, engine and `DurableAgent` on the same SQLite file: nothing
given in the first one (deps, live options) reaches it, only what the store holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, BinaryContent, ImageUrl, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RunUsage, UsageLimits

from agentq import Queue, RunStatus, StepStatus, WorkflowEngine
from agentq.errors import PayloadError, UnknownWorkflowError, WorkflowMismatchError
from agentq.integrations.pydantic_ai import DurableAgent, current_run_id
from agentq.store import SqliteStore

pytestmark = pytest.mark.timeout(120)


class Answer(BaseModel):
    city: str
    degrees: int


@asynccontextmanager
async def process(db: Path) -> AsyncIterator[WorkflowEngine]:
    """An engine as another process would have it: its own queue, on the SQLite file `db`."""
    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store)
        try:
            yield engine
        finally:
            await engine.close()


class Script:
    """A scripted model that notes what each request was sent (settings, instructions,
    the prompt's content): request 0 asks for ``send`` (needs approval), then it answers."""

    def __init__(self, answer: str = "done") -> None:
        self.seen: list[dict[str, Any]] = []
        self.answer = answer

    def model(self) -> FunctionModel:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            n = sum(isinstance(m, ModelResponse) for m in messages)
            last = messages[-1]
            self.seen.append({
                "settings": dict(info.model_settings or {}),
                "instructions": last.instructions if isinstance(last, ModelRequest) else None,
                "messages": len(messages),
                "prompts": [p.content for m in messages if isinstance(m, ModelRequest)
                            for p in m.parts if isinstance(p, UserPromptPart)],
            })
            if n == 0 and "send" in [t.name for t in info.function_tools]:
                return ModelResponse(parts=[ToolCallPart("send", {"to": "bob"}, "s1")])
            return ModelResponse(parts=[TextPart(self.answer)])

        return FunctionModel(respond, model_name="script")


def unused_model() -> FunctionModel:
    """An agent's own model that the tests never want called (pydantic-ai's durable runs need
    the agent to have a model; a run's ``model=`` picks another)."""

    def refuse(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("the agent's own model was called")

    return FunctionModel(refuse, model_name="unused")


def tool_agent(sent: list[str] | None = None) -> Agent[None, str]:
    """An agent whose own model is not to be used, with a tool that needs approval."""
    agent: Agent[None, str] = Agent(unused_model(), name="nomodel")

    @agent.tool_plain(requires_approval=True)
    def send(to: str) -> str:
        if sent is not None:
            sent.append(to)
        return f"sent to {to}"

    return agent


# ------------------------------------------------------------------ bad input, refused early


async def test_bad_options_are_refused_before_anything_is_stored(engine: WorkflowEngine) -> None:
    durable = DurableAgent(tool_agent(), engine, models={"s": Script().model()})
    with pytest.raises(TypeError, match="model must be"):
        await durable.run("hi", run_id="o", model=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="usage_limits must be a UsageLimits"):
        await durable.run("hi", run_id="o", usage_limits={"request_limit": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model_settings"):
        await durable.run("hi", run_id="o", model_settings=3)
    with pytest.raises(TypeError, match="toolsets"):
        await durable.run("hi", run_id="o", toolsets=["x"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="colour"):
        await durable.run("hi", run_id="o", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="prompt must be a str or a sequence"):
        await durable.run(None, run_id="o")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"prompt\[1\] is 42"):
        await durable.run(["look", 42], run_id="o")  # type: ignore[list-item]
    with pytest.raises(TypeError, match="models must map"):
        DurableAgent(tool_agent(), engine, models={"s": "openai:gpt-5.2"})  # type: ignore[dict-item]
    for name in ("nosuchprovider:xyz", "gpt-nosuch", "S"):  # unknown provider, no provider
        with pytest.raises(ValueError, match=f"model {name!r} is not a model pydantic-ai"):
            await durable.run("hi", run_id="o", model=name)
        with pytest.raises(ValueError, match=f"model {name!r}"):
            await durable.start("hi", run_id="o", model=name)
    assert await engine.store.get_workflow("o") is None


async def test_an_image_over_the_limit_is_refused_with_what_to_do(engine: WorkflowEngine) -> None:
    durable = DurableAgent(tool_agent(), engine, models={"s": Script().model()})
    image = BinaryContent(data=b"\x89PNG" + bytes(900_000), media_type="image/png")
    with pytest.raises(PayloadError) as caught:
        await durable.run(["what is in this image?", image], run_id="big", model="s")
    message = str(caught.value)
    assert "1.2" in message and "MB" in message and "by URL (ImageUrl" in message, message
    assert await engine.store.get_workflow("big") is None


async def test_continue_from_is_checked_before_anything_is_stored(engine: WorkflowEngine) -> None:
    durable = DurableAgent(tool_agent(), engine, models={"s": Script().model()})
    with pytest.raises(UnknownWorkflowError, match="'nope'"):
        await durable.run("next", run_id="t2", continue_from="nope", model="s")
    waiting = await durable.run("first", run_id="t1", model="s")
    assert waiting.status is RunStatus.WAITING
    with pytest.raises(ValueError, match="'t1' is waiting, not completed"):
        await durable.run("next", run_id="t2", continue_from="t1", model="s")
    with pytest.raises(ValueError, match="not both"):
        await durable.run("next", run_id="t2", continue_from="t1", message_history=[])
    with pytest.raises(ValueError, match="itself"):
        await durable.run("next", run_id="t1", continue_from="t1")
    assert await engine.store.get_workflow("t2") is None


async def test_a_mismatch_names_what_differs_in_one_line(engine: WorkflowEngine) -> None:
    durable = DurableAgent(tool_agent(), engine, models={"s": Script().model()})
    await durable.run("refund order 42 " + "please " * 200, run_id="m", model="s")
    with pytest.raises(WorkflowMismatchError) as caught:
        await durable.run("refund order 43 " + "please " * 200, run_id="m", model="s")
    message = str(caught.value)
    assert "input['prompt']: 'refund order 42" in message and "vs 'refund order 43" in message
    assert "\n" not in message and len(message) < 300, message
    with pytest.raises(WorkflowMismatchError, match=r"input\['options'\]\['model'\]"):
        await durable.run("refund order 42 " + "please " * 200, run_id="m", model="test")


# ------------------------------------------------------------------ options across processes


async def test_stored_options_are_used_by_a_continuation_in_another_process(
    tmp_path: Path,
) -> None:
    db, script = tmp_path / "a.db", Script()
    sent: list[str] = []
    options: dict[str, Any] = {
        "model": "script",
        "model_settings": {"temperature": 0.25},
        "usage_limits": UsageLimits(request_limit=5),
        "instructions": "Answer in French.",
    }
    async with process(db) as engine:
        durable = DurableAgent(tool_agent(sent), engine, models={"script": script.model()})
        run = await durable.run("send it", run_id="opt", **options)
        assert run.status is RunStatus.WAITING
        row = await engine.store.get_workflow("opt")
        assert row is not None and row.input["options"] == {
            "model": "script", "model_settings": {"temperature": 0.25},
            "usage_limits": {"request_limit": 5}, "instructions": "Answer in French."}

    async with process(db) as engine:  # no option given here: the stored ones are used
        durable = DurableAgent(tool_agent(sent), engine, models={"script": script.model()})
        done = await durable.approve("opt")
    assert done.status is RunStatus.COMPLETED and done.output == "done" and sent == ["bob"]
    assert [s["settings"].get("temperature") for s in script.seen] == [0.25, 0.25]
    assert all("Answer in French." in (s["instructions"] or "") for s in script.seen)


async def test_stored_usage_limits_hold_in_another_process(tmp_path: Path) -> None:
    db, script = tmp_path / "a.db", Script()
    async with process(db) as engine:
        durable = DurableAgent(tool_agent(), engine, models={"script": script.model()})
        run = await durable.run("send it", run_id="lim", model="script",
                                usage_limits=UsageLimits(request_limit=1))
        assert run.status is RunStatus.WAITING
    async with process(db) as engine:
        durable = DurableAgent(tool_agent(), engine, models={"script": script.model()})
        failed = await durable.approve("lim")
    assert failed.status is RunStatus.FAILED and "request_limit" in (failed.reason or "")
    assert len(script.seen) == 1  # the second request was refused by the stored limit


async def test_a_model_object_is_not_stored_and_is_given_again_elsewhere(tmp_path: Path) -> None:
    db, script = tmp_path / "a.db", Script()
    async with process(db) as engine:
        durable = DurableAgent(tool_agent(), engine)
        run = await durable.run("send it", run_id="obj", model=script.model())
        assert run.status is RunStatus.WAITING
        row = await engine.store.get_workflow("obj")
        assert row is not None and "options" not in row.input  # the input as before options
        assert set(row.input) == {"agent", "prompt", "message_history"}
    async with process(db) as engine:
        durable = DurableAgent(tool_agent(), engine)
        done = await durable.approve("obj", model=script.model())  # given again
    assert done.status is RunStatus.COMPLETED and done.output == "done"


async def test_a_registered_model_object_is_stored_by_its_name(tmp_path: Path) -> None:
    db, script = tmp_path / "a.db", Script()
    fast = script.model()
    async with process(db) as engine:
        durable = DurableAgent(tool_agent(), engine, models={"fast": fast})
        await durable.run("send it", run_id="reg", model=fast)
        row = await engine.store.get_workflow("reg")
        assert row is not None and row.input["options"] == {"model": "fast"}
    async with process(db) as engine:  # the name finds the object registered here
        durable = DurableAgent(tool_agent(), engine, models={"fast": script.model()})
        await durable.engine.resume("reg", "agent", True, key="approval:0.0:s1")
        assert (await durable.run("send it", run_id="reg", model="fast")).output == "done"


async def test_output_type_toolsets_and_handler_are_given_per_run(engine: WorkflowEngine) -> None:
    def args(messages: list[ModelMessage], info: AgentInfo) -> tuple[str, str, str]:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return "temperature", '{"city": "Lyon"}', "t1"
        [out] = info.output_tools
        return out.name, '{"city": "Lyon", "degrees": 21}', "o1"

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        name, json_args, call_id = args(messages, info)
        return ModelResponse(parts=[ToolCallPart(name, json_args, call_id)])

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[DeltaToolCalls]:
        name, json_args, call_id = args(messages, info)
        yield {0: DeltaToolCall(name=name, json_args=json_args, tool_call_id=call_id)}

    extra: FunctionToolset[None] = FunctionToolset()

    @extra.tool_plain
    def temperature(city: str) -> int:
        return 21

    events: list[str] = []

    async def handler(ctx: RunContext[None], stream: AsyncIterator[Any]) -> None:
        async for event in stream:
            events.append(type(event).__name__)

    model = FunctionModel(respond, stream_function=stream)
    durable = DurableAgent(Agent(model, name="weather"), engine)
    run = await durable.run("weather in Lyon?", run_id="w", output_type=Answer,
                            toolsets=[extra], event_stream_handler=handler)
    assert run.status is RunStatus.COMPLETED, run.reason
    assert run.output == Answer(city="Lyon", degrees=21)
    assert "FunctionToolCallEvent" in events and "FunctionToolResultEvent" in events
    assert isinstance(run.usage, RunUsage) and run.usage.requests == 2
    assert run.usage.tool_calls == 1 and run.result.output["usage"]["requests"] == 2
    # Read back with the run's output type: typed again from the recorded JSON.
    again = await durable.run("weather in Lyon?", run_id="w", output_type=Answer)
    assert again.output == Answer(city="Lyon", degrees=21)


async def test_the_agents_output_type_types_the_output_read_back_elsewhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        [out] = info.output_tools
        return ModelResponse(parts=[ToolCallPart(out.name, {"city": "Oslo", "degrees": -3})])

    def build() -> Agent[None, Answer]:
        return Agent(FunctionModel(respond), name="typed", output_type=Answer)

    db = tmp_path / "a.db"
    async with process(db) as engine:
        run = await DurableAgent(build(), engine).run("Oslo?", run_id="typed-1")
        assert run.output == Answer(city="Oslo", degrees=-3)
    async with process(db) as engine:
        read = await DurableAgent(build(), engine).run("Oslo?", run_id="typed-1")
        assert read.output == Answer(city="Oslo", degrees=-3)
        # An output type the record does not fit: its JSON, and a warning saying so.
        other: Agent[None, int] = Agent(FunctionModel(respond), name="typed", output_type=int)
        with caplog.at_level(logging.WARNING):
            raw = await DurableAgent(other, engine).run("Oslo?", run_id="typed-1")
    assert raw.output == {"city": "Oslo", "degrees": -3}
    assert "does not validate" in caplog.text


# ------------------------------------------------------------------ prompts


async def test_a_multimodal_prompt_is_stored_and_replayed(tmp_path: Path) -> None:
    db, script = tmp_path / "a.db", Script()
    prompt: list[UserContent] = ["what is in these?", ImageUrl(url="https://example.com/cat.png"),
              BinaryContent(data=b"\x89PNG tiny", media_type="image/png")]
    async with process(db) as engine:
        durable = DurableAgent(tool_agent(), engine, models={"script": script.model()})
        run = await durable.run(prompt, run_id="img", model="script")
        assert run.status is RunStatus.WAITING
    async with process(db) as engine:
        durable = DurableAgent(tool_agent(), engine, models={"script": script.model()})
        done = await durable.approve("img")
        assert done.status is RunStatus.COMPLETED
        # The same prompt again is the same run (its recorded result).
        assert (await durable.run(prompt, run_id="img", model="script")).output == "done"
    [content] = script.seen[-1]["prompts"]
    assert content[0] == "what is in these?"
    assert content[1].url == "https://example.com/cat.png"
    assert content[2].data == b"\x89PNG tiny" and content[2].media_type == "image/png"


# ------------------------------------------------------------------ start, conversations


async def test_start_stores_a_run_that_another_process_serves(tmp_path: Path) -> None:
    db, script = tmp_path / "a.db", Script(answer="served")
    agent: Agent[None, str] = Agent(unused_model(), name="plain")
    async with process(db) as engine:
        durable = DurableAgent(agent, engine, models={"script": script.model()})
        assert await durable.start("hello", run_id="job-1", model="script") == "job-1"
        assert await durable.start("hello", run_id="job-1", model="script") == "job-1"
        with pytest.raises(WorkflowMismatchError, match=r"input\['prompt'\]"):
            await durable.start("bye", run_id="job-1", model="script")
        [step] = await engine.status("job-1")
        assert isinstance(step, StepStatus.Pending) and script.seen == []
    async with process(db) as engine:
        durable = DurableAgent(agent, engine, models={"script": script.model()})
        result = await engine.run("job-1")  # what a serving worker does
        assert result.status is RunStatus.COMPLETED
        assert (await durable.run("hello", run_id="job-1", model="script")).output == "served"
    assert len(script.seen) == 1


async def test_continue_from_takes_the_history_from_the_log_in_another_process(
    tmp_path: Path,
) -> None:
    db, script = tmp_path / "a.db", Script()
    agent: Agent[None, str] = Agent(unused_model(), name="chat")
    async with process(db) as engine:
        durable = DurableAgent(agent, engine, models={"script": script.model()})
        first = await durable.run("hi, I am Ada", run_id="c1", model="script")
        assert first.status is RunStatus.COMPLETED
    async with process(db) as engine:  # nothing in memory: the history comes from the log
        durable = DurableAgent(agent, engine, models={"script": script.model()})
        second = await durable.run("who am I?", run_id="c2", continue_from="c1", model="script")
        assert second.status is RunStatus.COMPLETED
        assert script.seen[-1]["prompts"] == ["hi, I am Ada", "who am I?"]
        assert [m.kind for m in second.messages] == ["request", "response"] * 2
        # The same turn again, from the log or with the history rebuilt: the same run.
        again = await durable.run("who am I?", run_id="c2", continue_from="c1", model="script")
        rebuilt = await durable.messages("c1")
        same = await durable.run("who am I?", run_id="c2", message_history=rebuilt,
                                 model="script")
    assert again.output == same.output == "done" and len(script.seen) == 2


async def test_the_documented_way_a_rebuilt_history_is_the_same_run(tmp_path: Path) -> None:
    # Before: the rebuilt messages carried new timestamps and run ids, and the second call
    # failed with WorkflowMismatchError.
    db, script = tmp_path / "a.db", Script()
    agent: Agent[None, str] = Agent(unused_model(), name="chat")
    async with process(db) as engine:
        durable = DurableAgent(agent, engine, models={"script": script.model()})
        await durable.run("hi", run_id="d1", model="script")
        history = await durable.messages("d1")
        await durable.run("again", run_id="d2", message_history=history, model="script")
    async with process(db) as engine:  # a restart between two turns
        durable = DurableAgent(agent, engine, models={"script": script.model()})
        history = await durable.messages("d1")
        run = await durable.run("again", run_id="d2", message_history=history, model="script")
        assert run.status is RunStatus.COMPLETED and len(script.seen) == 2
        with pytest.raises(WorkflowMismatchError, match="message_history"):
            await durable.run("again", run_id="d2", message_history=history[:1],
                              model="script")


# ------------------------------------------------------------------ current_run_id


async def test_current_run_id_is_the_durable_run_on_every_attempt(tmp_path: Path) -> None:
    db, script = tmp_path / "a.db", Script()
    seen: list[tuple[str | None, str]] = []

    def build() -> Agent[None, str]:
        agent: Agent[None, str] = Agent(unused_model(), name="ids")

        @agent.tool(requires_approval=True)
        def send(ctx: RunContext[None], to: str) -> str:
            seen.append((current_run_id(), ctx.run_id or ""))
            return "sent"

        @agent.instructions
        def note_id(ctx: RunContext[None]) -> str:
            seen.append((current_run_id(), ctx.run_id or ""))
            return "Be brief."

        return agent

    assert current_run_id() is None
    async with process(db) as engine:
        run = await DurableAgent(build(), engine, models={"s": script.model()}).run(
            "send", run_id="ids-1", model="s")
        assert run.status is RunStatus.WAITING
    async with process(db) as engine:
        await DurableAgent(build(), engine, models={"s": script.model()}).approve("ids-1")
    assert len(seen) >= 3 and set(seen) == {("ids-1", "ids-1")}


# ------------------------------------------------------------------ runs stored before, races


async def test_a_run_stored_before_options_and_runusage_reads_back(
    engine: WorkflowEngine, caplog: pytest.LogCaptureFixture
) -> None:
    from agentq.workflows import StepDef, WorkflowDef

    async def old_step(ctx: Any) -> dict[str, Any]:  # what the step returned before
        return {"output": "old answer",
                "usage": {"input_tokens": 7, "output_tokens": 3, "requests": 1}}

    old_input = {"agent": "nomodel", "prompt": "hi", "message_history": None}
    await engine.start(WorkflowDef("nomodel", [StepDef("agent", old_step)]), "old", old_input)
    await engine.run("old")
    durable = DurableAgent(tool_agent(), engine)  # takes the definition over
    with caplog.at_level(logging.WARNING):  # this fake log has no calls to rebuild from
        run = await durable.run("hi", run_id="old")
    assert run.status is RunStatus.COMPLETED and run.output == "old answer"
    assert run.usage == RunUsage(input_tokens=7, output_tokens=3, requests=1)


async def test_two_processes_continuing_one_conversation_store_one_run(tmp_path: Path) -> None:
    db, script = tmp_path / "a.db", Script()
    agent: Agent[None, str] = Agent(unused_model(), name="chat")
    async with process(db) as engine:
        durable = DurableAgent(agent, engine, models={"script": script.model()})
        await durable.run("hi", run_id="r1", model="script")
    async with process(db) as one, process(db) as two:
        a = DurableAgent(agent, one, models={"script": script.model()})
        b = DurableAgent(agent, two, models={"script": script.model()})
        ids = await asyncio.gather(
            a.start("next", run_id="r2", continue_from="r1", model="script"),
            b.start("next", run_id="r2", continue_from="r1", model="script"),
        )
        assert ids == ["r2", "r2"]
        done = await a.run("next", run_id="r2", continue_from="r1", model="script")
        assert done.status is RunStatus.COMPLETED
        assert (await b.run("next", run_id="r2", continue_from="r1", model="script")).output == (
            done.output)
    assert len(script.seen) == 2  # r1's request and r2's, once each


async def test_options_given_to_run_serve_its_approval_in_the_same_process(
    engine: WorkflowEngine,
) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("send", {"to": "bob"}, "s1")])
        [out] = info.output_tools
        return ModelResponse(parts=[ToolCallPart(out.name, {"city": "Rome", "degrees": 30})])

    durable = DurableAgent(tool_agent(), engine)
    model = FunctionModel(respond)
    run = await durable.run("send", run_id="keep", model=model, output_type=Answer)
    assert run.status is RunStatus.WAITING
    done = await durable.approve("keep")  # the model object and output type given to run
    assert done.output == Answer(city="Rome", degrees=30)


async def test_the_handler_sees_each_attempt_and_not_the_rebuild_of_the_messages(
    engine: WorkflowEngine,
) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("a handler makes pydantic-ai stream the request")

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        if len(messages) == 1:
            yield {0: DeltaToolCall(name="send", json_args='{"to": "bob"}', tool_call_id="s1")}
        else:
            yield "sent it"

    agent = tool_agent()
    events: list[str] = []

    async def handler(ctx: RunContext[None], stream: AsyncIterator[Any]) -> None:
        async for event in stream:
            events.append(type(event).__name__)

    durable = DurableAgent(agent, engine)
    model = FunctionModel(respond, stream_function=stream)
    run = await durable.run("send", run_id="ev", model=model, event_stream_handler=handler)
    assert run.status is RunStatus.WAITING
    assert events.count("FunctionToolCallEvent") == 1
    events.clear()
    done = await durable.approve("ev")  # the handler given to run, kept while it waited
    assert done.status is RunStatus.COMPLETED and done.output == "sent it"
    # The attempt after the approval: request 0 answered from the log (its recorded
    # response's events), the tool's result, request 1 streamed; the rebuild adds nothing.
    assert events.count("FunctionToolResultEvent") == 1 and events.count("PartStartEvent") == 2


def test_the_identity_of_a_history_leaves_out_only_what_a_rebuild_sets_anew() -> None:
    from agentq.integrations.pydantic_ai._runs import identity

    def history(stamp: str, run: str, when: str) -> dict[str, Any]:
        request = {"kind": "request", "timestamp": stamp, "run_id": run,
                   "conversation_id": run, "parts": [
                       {"part_kind": "user-prompt", "content": "hi", "timestamp": stamp}]}
        response = {"kind": "response", "timestamp": stamp, "run_id": run, "parts": [
            {"part_kind": "tool-call", "tool_name": "book", "args": {"timestamp": when}}]}
        return {"agent": "a", "prompt": "p", "message_history": [request, response]}

    first = history("2026-01-01T00:00:00Z", "r-1", "9:00")
    assert identity(first) == identity(history("2026-12-06T11:00:00Z", "r-2", "9:00"))
    assert identity(first) != identity(history("2026-01-01T00:00:00Z", "r-1", "10:00"))
    assert identity({**first, "continue_from": "c0"}) == identity(first)
