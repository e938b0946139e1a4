"""OpenTelemetry spans (`agentq.tracing`), checked with the SDK's in-memory exporter: names,
parent/child structure, attributes (GenAI for tool calls), error status, links after resume."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import pytest

trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
export = pytest.importorskip("opentelemetry.sdk.trace.export")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")

from opentelemetry.trace import StatusCode  # noqa: E402
from opentelemetry.util._once import Once  # noqa: E402

import agentq.tracing as tracing  # noqa: E402
from agentq import Job, NonRetryable, RetryPolicy  # noqa: E402
from agentq.clock import FakeClock  # noqa: E402
from agentq.queue import LaneConfig, Priority, Queue  # noqa: E402
from agentq.store import DurableStore  # noqa: E402
from agentq.workflows import (  # noqa: E402
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowDef,
    WorkflowEngine,
)


def _reset_global_provider() -> None:
    # The API lets a process set its tracer provider once; tests put it back (as
    # OpenTelemetry's own test helpers do) so that the rest of the suite runs untraced.
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@pytest.fixture
def spans() -> Iterator[Any]:
    """An SDK tracer provider with an in-memory exporter, installed for one test."""
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    _reset_global_provider()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        _reset_global_provider()


def _by_name(exporter: Any, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _parent(exporter: Any, span: Any) -> Any:
    assert span.parent is not None, f"{span.name} has no parent"
    (found,) = [s for s in exporter.get_finished_spans()
                if s.context.span_id == span.parent.span_id]
    return found


def _engine(store: DurableStore, clock: FakeClock, queue: Queue, worker: str = "w1") -> Any:
    return WorkflowEngine(queue, store, worker_id=worker, lease_ttl=30.0, clock=clock)


def _queue(clock: FakeClock) -> Queue:
    return Queue({Priority.MEDIUM: LaneConfig(capacity=20, permits=2),
                  Priority.HIGH: LaneConfig(capacity=20, permits=2)}, clock=clock)


async def _lookup(city: str) -> dict[str, Any]:
    return {"city": city, "temp": 21}


async def _agent_step(ctx: StepContext) -> Any:
    reply = await ctx.call(
        Job("model:1", lambda: _model(), Priority.HIGH),
        label={"kind": "model", "model": "tiny-1"},
        usage=lambda out: out["usage"],
    )
    return await ctx.call(
        Job("tool:call-7", lambda: _lookup(reply["city"]), Priority.HIGH),
        label={"kind": "tool", "tool": "weather", "tool_call_id": "call-7"},
        usage={"input_tokens": 3, "output_tokens": 4},
    )


async def _model() -> dict[str, Any]:
    return {"city": "Oslo", "usage": {"prompt_tokens": 11, "completion_tokens": 5}}


# ------------------------------------------------------------------ off


async def test_without_a_provider_nothing_is_traced_or_stored(
    engine: WorkflowEngine,
) -> None:
    _reset_global_provider()
    assert not tracing.active()
    assert tracing.capture() is None and tracing.carrier() is None
    with tracing.span("x") as span:
        assert span is tracing.NO_SPAN and not span.recording
        span.set("a", 1)
        span.fail("nothing happens")
    assert tracing.span("y") is tracing.span("z")  # one shared no-op
    result = await engine.run(Workflow("off", [StepDef("a", lambda ctx: 1)]))
    assert result.status is RunStatus.COMPLETED
    (started,) = await engine.store.load_events("off", limit=1)
    assert "trace" not in started.data
    assert tracing.links_to({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}, "x") == []


async def test_without_the_api_every_span_point_is_the_shared_no_op(
    engine: WorkflowEngine, monkeypatch: pytest.MonkeyPatch, spans: Any
) -> None:
    monkeypatch.setattr(tracing, "_api", lambda: None)  # as if opentelemetry-api were absent
    assert not tracing.active()
    assert tracing.capture() is None and tracing.carrier() is None
    assert tracing.span("x") is tracing.call_span("w", "k", {"kind": "tool"}, None)
    assert tracing.links_to({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}, "x") == []

    async def step(ctx: StepContext) -> Any:
        return await ctx.call(Job("tool:1", lambda: _lookup("Lima"), Priority.HIGH),
                              label={"kind": "tool", "tool": "weather"})

    result = await engine.run(Workflow("no-api", [StepDef("s", step)]))
    assert result.status is RunStatus.COMPLETED
    assert spans.get_finished_spans() == ()
    (started,) = await engine.store.load_events("no-api", limit=1)
    assert "trace" not in started.data


# ------------------------------------------------------------------ structure


async def test_run_attempt_job_call_spans_nest_with_genai_attributes(
    engine: WorkflowEngine, spans: Any
) -> None:
    result = await engine.run(
        Workflow("agent-1", [StepDef("think", _agent_step), StepDef("done", lambda ctx: 2)])
    )
    assert result.status is RunStatus.COMPLETED
    (run,) = _by_name(spans, tracing.WORKFLOW_RUN)
    assert run.attributes["agentq.workflow.id"] == "agent-1"
    assert run.attributes["agentq.workflow.status"] == "completed"
    assert run.status.status_code is StatusCode.UNSET
    attempts = _by_name(spans, tracing.STEP_ATTEMPT)
    assert [a.attributes["agentq.step.name"] for a in attempts] == ["think", "done"]
    assert all(_parent(spans, a) is run for a in attempts)
    assert attempts[0].attributes["agentq.step.outcome"] == "completed"
    assert attempts[0].attributes["agentq.worker.id"] == "w1"
    jobs = _by_name(spans, tracing.JOB)
    step_jobs = [j for j in jobs if _parent(spans, j).name == tracing.STEP_ATTEMPT]
    assert len(step_jobs) == 2

    (tool,) = _by_name(spans, "execute_tool weather")
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "weather"
    assert tool.attributes["gen_ai.tool.call.id"] == "call-7"
    assert tool.attributes["gen_ai.usage.input_tokens"] == 3
    assert tool.attributes["gen_ai.usage.output_tokens"] == 4
    assert tool.attributes["agentq.call.key"] == "tool:call-7"
    (model,) = _by_name(spans, "chat tiny-1")
    assert model.attributes["gen_ai.operation.name"] == "chat"
    assert model.attributes["gen_ai.request.model"] == "tiny-1"
    assert model.attributes["gen_ai.usage.input_tokens"] == 11
    assert model.attributes["gen_ai.usage.output_tokens"] == 5
    # call -> parent: the step's job -> the attempt; the call's own job is the call's child
    think_job = _parent(spans, tool)
    assert think_job.name == tracing.JOB and _parent(spans, think_job) is attempts[0]
    tool_jobs = [j for j in jobs if _parent(spans, j) is tool]
    assert len(tool_jobs) == 1
    assert tool_jobs[0].attributes["agentq.job.priority"] == "high"
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {run.context.trace_id}


async def test_a_call_answered_from_the_log_makes_no_call_span(
    store: DurableStore, clock: FakeClock, spans: Any
) -> None:
    ran = []

    async def step(ctx: StepContext) -> Any:
        out = await ctx.call(Job("tool:a", lambda: _lookup("Rome"), Priority.HIGH),
                             label={"kind": "tool", "tool": "weather"})
        ran.append(out)
        if len(ran) == 1:
            raise RuntimeError("after the call")
        return out

    wf = Workflow("log-1", [StepDef("s", step, retry=RetryPolicy(2))])
    async with _queue(clock) as queue:
        engine = _engine(store, clock, queue)
        assert (await engine.run(wf)).status is RunStatus.COMPLETED
        await engine.close()
    assert len(_by_name(spans, "execute_tool weather")) == 1
    attempts = _by_name(spans, tracing.STEP_ATTEMPT)
    assert [a.attributes["agentq.step.outcome"] for a in attempts] == ["retry", "completed"]


# ------------------------------------------------------------------ errors


async def test_a_failed_step_sets_error_status_up_the_tree(
    engine: WorkflowEngine, spans: Any
) -> None:
    def refuse(ctx: StepContext) -> Any:
        raise NonRetryable("card declined")

    result = await engine.run(Workflow("pay-1", [StepDef("pay", refuse)]))
    assert result.status is RunStatus.FAILED
    (run,) = _by_name(spans, tracing.WORKFLOW_RUN)
    (attempt,) = _by_name(spans, tracing.STEP_ATTEMPT)
    (job,) = _by_name(spans, tracing.JOB)
    for span in (run, attempt, job):
        assert span.status.status_code is StatusCode.ERROR, span.name
    assert "card declined" in run.status.description
    assert attempt.attributes["agentq.step.outcome"] == "failed"
    assert [e.name for e in job.events] == ["exception"]
    assert job.events[0].attributes["exception.type"].endswith("NonRetryable")


async def test_a_failed_attempt_that_is_retried_is_an_error_span(
    engine: WorkflowEngine, spans: Any
) -> None:
    calls = []

    def flaky(ctx: StepContext) -> Any:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("flaky")
        return "ok"

    wf = Workflow("flaky-1", [StepDef("s", flaky, retry=RetryPolicy(2))])
    assert (await engine.run(wf)).status is RunStatus.COMPLETED
    first, second = _by_name(spans, tracing.STEP_ATTEMPT)
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes["agentq.step.attempt"] == 1
    assert second.status.status_code is StatusCode.UNSET
    assert second.attributes["agentq.step.attempt"] == 2


async def test_a_failed_call_is_an_error_span(engine: WorkflowEngine, spans: Any) -> None:
    async def broken() -> Any:
        raise OSError("no network")

    async def step(ctx: StepContext) -> Any:
        return await ctx.call(Job("tool:x", broken, Priority.HIGH),
                              label={"kind": "tool", "tool": "fetch"})

    assert (await engine.run(Workflow("c-1", [StepDef("s", step)]))).status is RunStatus.FAILED
    (call,) = _by_name(spans, "execute_tool fetch")
    assert call.status.status_code is StatusCode.ERROR
    assert "JobFailed" in call.status.description


async def test_a_queue_job_is_a_child_of_the_span_it_was_pushed_in(spans: Any) -> None:
    async def boom() -> Any:
        raise KeyError("k")

    tracer = trace.get_tracer("test")
    async with Queue() as queue:
        with tracer.start_as_current_span("request"):
            assert await queue.push_and_wait(Job("ok", lambda: _lookup("x"))) == {
                "city": "x", "temp": 21}
            with pytest.raises(Exception, match="k"):
                await queue.push_and_wait(Job("bad", boom))
    (request,) = _by_name(spans, "request")
    ok, bad = _by_name(spans, tracing.JOB)
    assert _parent(spans, ok) is request and _parent(spans, bad) is request
    assert ok.attributes["agentq.job.key"] == "ok"
    assert ok.attributes["agentq.job.attempts"] == 1
    assert bad.status.status_code is StatusCode.ERROR
    assert bad.attributes["agentq.job.failure"] == "error"


# ------------------------------------------------------------------ links after resume


async def test_a_resumed_run_in_another_engine_links_back_to_the_first(
    store: DurableStore, clock: FakeClock, spans: Any
) -> None:
    async def ask(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("ok?", "go ahead?")

    def make() -> Workflow:
        return Workflow("ask-1", [StepDef("a", lambda ctx: 1), StepDef("ask", ask)])

    async with _queue(clock) as queue:
        first = _engine(store, clock, queue, "w1")
        assert (await first.run(make())).status is RunStatus.WAITING
        await first.close()
    (origin,) = _by_name(spans, tracing.WORKFLOW_RUN)
    (started,) = await store.load_events("ask-1", limit=1)
    traceparent = started.data["trace"]["traceparent"]
    assert f"{origin.context.trace_id:032x}" in traceparent
    assert f"{origin.context.span_id:016x}" in traceparent
    spans.clear()

    # another engine (another process, after a restart) resumes it in a new trace
    async with _queue(clock) as queue:
        second = _engine(store, clock, queue, "w2")
        second.register_workflow(make())
        result = await second.resume("ask-1", "ask", "yes")
        await second.close()
    assert result.status is RunStatus.COMPLETED
    (run,) = _by_name(spans, tracing.WORKFLOW_RUN)
    assert run.context.trace_id != origin.context.trace_id
    (link,) = run.links
    assert link.context.trace_id == origin.context.trace_id
    assert link.context.span_id == origin.context.span_id
    assert link.attributes["agentq.link"] == "workflow started"
    (attempt,) = _by_name(spans, tracing.STEP_ATTEMPT)  # step "a" completed earlier
    assert attempt.attributes["agentq.step.resumed"] is True
    assert [lk.context.span_id for lk in attempt.links] == [origin.context.span_id]


async def test_a_served_instance_links_to_the_span_that_started_it(
    store: DurableStore, clock: FakeClock, spans: Any
) -> None:
    definition = WorkflowDef("job", [StepDef("a", lambda ctx: ctx.input)])
    async with _queue(clock) as queue:
        engine = _engine(store, clock, queue, "server")
        engine.register(definition)
        with trace.get_tracer("test").start_as_current_span("request"):
            assert await engine.start(definition, "job-1", 7)
        server = asyncio.ensure_future(engine.serve(poll_interval=1.0))
        try:
            async with asyncio.timeout(20):
                while True:  # yield to the serving loop until its run has ended
                    if _by_name(spans, tracing.WORKFLOW_RUN):
                        break
                    await asyncio.sleep(0)
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
    (request,) = _by_name(spans, "request")
    (run,) = _by_name(spans, tracing.WORKFLOW_RUN)
    assert run.attributes["agentq.workflow.status"] == "completed"
    assert run.context.trace_id != request.context.trace_id  # served later, its own trace
    assert [lk.context.span_id for lk in run.links] == [request.context.span_id]


# ------------------------------------------------------------------ pure helpers


async def test_a_tool_call_keyed_by_its_call_id_names_it(
    engine: WorkflowEngine, spans: Any
) -> None:
    async def step(ctx: StepContext) -> Any:  # the pydantic-ai integration's convention
        return await ctx.call(Job("tool:call_abc", lambda: _lookup("Kyiv"), Priority.HIGH),
                              label={"kind": "tool", "tool": "weather"})

    assert (await engine.run(Workflow("k-1", [StepDef("s", step)]))).status is (
        RunStatus.COMPLETED)
    (tool,) = _by_name(spans, "execute_tool weather")
    assert tool.attributes["gen_ai.tool.call.id"] == "call_abc"


async def test_a_durable_agents_model_request_span_names_the_requested_model(
    engine: WorkflowEngine, spans: Any
) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from agentq.integrations.pydantic_ai import DurableAgent

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("weather", {"city": "Oslo"}, "call_0")])
        return ModelResponse(parts=[TextPart("sunny")])

    agent: Agent[None, str] = Agent(FunctionModel(respond, model_name="tiny-2"), name="wx")
    agent.tool_plain(name="weather")(lambda city: f"sunny in {city}")
    run = await DurableAgent(agent, engine).run("weather?", run_id="wx-1")
    assert run.status is RunStatus.COMPLETED, run.reason
    chats = [s for s in _by_name(spans, "chat tiny-2") if "agentq.call.key" in s.attributes]
    assert [s.attributes["agentq.call.key"] for s in chats] == ["model:0", "model:1"]
    assert all(s.attributes["gen_ai.request.model"] == "tiny-2" for s in chats)
    assert all(s.attributes["gen_ai.usage.input_tokens"] > 0 for s in chats)
    [tool] = [s for s in _by_name(spans, "execute_tool weather")
              if "agentq.call.key" in s.attributes]
    assert tool.attributes["gen_ai.tool.call.id"] == "call_0"
    assert tool.attributes["agentq.call.key"] == "tool:0.0:call_0"


def test_usage_attributes_read_both_naming_conventions() -> None:
    assert tracing.usage_attributes({"input_tokens": 1, "output_tokens": 2, "cost": 0.1}) == {
        "gen_ai.usage.input_tokens": 1, "gen_ai.usage.output_tokens": 2}
    assert tracing.usage_attributes({"prompt_tokens": 3, "completion_tokens": True}) == {
        "gen_ai.usage.input_tokens": 3}
    assert tracing.usage_attributes(None) == {}


def test_links_to_ignores_what_is_not_a_trace_context(spans: Any) -> None:
    assert tracing.links_to(None, "x") == []
    assert tracing.links_to({"traceparent": "garbage"}, "x") == []
    assert tracing.links_to(["not", "a", "dict"], "x") == []
    good = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    (link,) = tracing.links_to(good, "why")
    assert link.attributes["agentq.link"] == "why"


async def test_a_provider_set_after_pushes_without_one_traces_the_next_job() -> None:
    # `capture` answers "off" from one attribute read while no provider was ever set; a
    # provider set later must still give the next pushed job its span, under the pusher's.
    _reset_global_provider()
    async with Queue() as queue:
        await queue.push_and_wait(Job("before", functools.partial(_lookup, "Oslo")))
        assert tracing.capture() is None
        exporter = in_memory.InMemorySpanExporter()
        provider = sdk_trace.TracerProvider()
        provider.add_span_processor(export.SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        try:
            assert tracing.capture() is not None
            with provider.get_tracer("test").start_as_current_span("caller"):
                await queue.push_and_wait(Job("after", functools.partial(_lookup, "Lima")))
            (job,) = _by_name(exporter, tracing.JOB)
            assert job.attributes["agentq.job.key"] == "after"
            assert _parent(exporter, job).name == "caller"
        finally:
            provider.shutdown()
            _reset_global_provider()
    assert tracing.capture() is None
