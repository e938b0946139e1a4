"""OpenTelemetry spans for every layer, free when OpenTelemetry is absent (extra ``otel``).

agentq depends on ``opentelemetry-api`` only, and only optionally: it is imported the first
time a span could start, never at ``import agentq``. Nothing is exported unless the
application installs an SDK (``opentelemetry-sdk``) and sets a tracer provider; until then
(or when the API is not installed at all) `span` returns one shared no-op context manager, and
`capture` returns None, so the hot path pays a function call and a type check.
``docs/observability.md`` lists the spans and their attributes.

The spans agentq starts (names are constants here, so that tests and dashboards agree):

- `WORKFLOW_RUN` ``agentq.workflow.run``: one run of a workflow in one engine (a `run`, or the
  run a resume or a retry continues);
- `STEP_ATTEMPT` ``agentq.step.attempt``: one attempt of a step, a child of its run;
- a durable call (``ctx.call``): ``execute_tool {tool}`` with the GenAI attributes when its
  label says it is a tool, ``chat {model}`` for a model request, else `CALL`
  ``agentq.call``; a child of the attempt's job;
- `JOB` ``agentq.job``: one job in the queue (its attempts and backoffs), a child of whatever
  span was current where it was pushed.

Trace context travels with the workflow: `carrier` gives the current span's W3C
``traceparent`` (and ``tracestate``) to store with ``WorkflowStarted``, and `links_to` turns a
stored carrier back into a span link, so a run that continues the workflow later (a resume,
a retry, a recovery, in any process) links back to the run that started it.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
from collections.abc import Mapping, Sequence
from types import ModuleType, TracebackType
from typing import Any

__all__ = [
    "CALL",
    "JOB",
    "NO_SPAN",
    "STEP_ATTEMPT",
    "WORKFLOW_RUN",
    "Span",
    "active",
    "call_span",
    "capture",
    "carrier",
    "links_to",
    "span",
    "usage_attributes",
]

WORKFLOW_RUN = "agentq.workflow.run"
STEP_ATTEMPT = "agentq.step.attempt"
CALL = "agentq.call"
JOB = "agentq.job"

_INSTRUMENTATION = "agentq"
_UNKNOWN = object()


class _Api:
    """The OpenTelemetry API modules, imported once; `tracer` cached per provider."""

    def __init__(self, trace: ModuleType, context: ModuleType, w3c: Any, status: Any) -> None:
        self.trace = trace
        self.context = context
        self.w3c = w3c
        self.status = status
        self.inactive = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        self.from_environment = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
        self._provider: Any = None
        self._tracer: Any = None

    def tracer(self) -> Any | None:
        """The agentq tracer of the global provider, or None while no SDK provider is set."""
        # `get_tracer_provider` reads os.environ on every call (microseconds); the API's own
        # global says at the cost of an attribute read whether a provider was ever set.
        provider: Any = getattr(self.trace, "_TRACER_PROVIDER", _UNKNOWN)
        if provider is None and not self.from_environment:
            return None
        if provider is None or provider is _UNKNOWN:
            provider = self.trace.get_tracer_provider()
        if isinstance(provider, self.inactive):
            return None
        if provider is not self._provider:
            self._tracer = provider.get_tracer(_INSTRUMENTATION)
            self._provider = provider
        return self._tracer


@functools.cache
def _api() -> _Api | None:
    global _OFF_UNLESS_SET  # a cache of the import, as `_api` itself is (see below)
    try:
        trace = importlib.import_module("opentelemetry.trace")
        context = importlib.import_module("opentelemetry.context")
        w3c = importlib.import_module("opentelemetry.trace.propagation.tracecontext")
        status = importlib.import_module("opentelemetry.trace.status")
    except ImportError:
        return None
    api = _Api(trace, context, w3c.TraceContextTextMapPropagator(), status)
    if not api.from_environment and hasattr(trace, "_TRACER_PROVIDER"):
        _OFF_UNLESS_SET = trace
    return api


# The API's ``opentelemetry.trace`` module once `_api` has imported it, when no provider can
# come from the environment: `capture` is then off at the cost of one attribute read while
# its ``_TRACER_PROVIDER`` is None (no provider was ever set). None: ask `_api`.
_OFF_UNLESS_SET: Any = None


def active() -> bool:
    """Whether spans are recorded: the API is installed and an SDK tracer provider is set."""
    api = _api()
    return api is not None and api.tracer() is not None


class Span:
    """What `span` yields: a recording OpenTelemetry span, or nothing (`NO_SPAN`).

    Every method is a no-op on `NO_SPAN`, so callers never test for tracing themselves.
    """

    __slots__ = ("otel",)

    def __init__(self, otel: Any) -> None:
        self.otel = otel
        """The OpenTelemetry span, or None."""

    @property
    def recording(self) -> bool:
        """Whether anything set on this span is kept."""
        return self.otel is not None

    def set(self, key: str, value: Any) -> None:
        """Set one attribute; None is left out (OpenTelemetry has no null)."""
        if self.otel is not None and value is not None:
            self.otel.set_attribute(key, value)

    def update(self, attributes: Mapping[str, Any]) -> None:
        """Set several attributes (None values left out)."""
        if self.otel is not None:
            for key, value in attributes.items():
                if value is not None:
                    self.otel.set_attribute(key, value)

    def fail(self, description: str, error: BaseException | None = None) -> None:
        """Mark the span failed: status ERROR with `description`, and the exception if any."""
        if self.otel is None:
            return
        api = _api()
        assert api is not None
        if error is not None:
            self.otel.record_exception(error)
        self.otel.set_status(api.status.Status(api.status.StatusCode.ERROR, description))

    def link(self, links: Sequence[Any]) -> None:
        """Add span links (from `links_to`) after the span started."""
        if self.otel is not None:
            for item in links:
                self.otel.add_link(item.context, item.attributes)


NO_SPAN = Span(None)
"""The span of everything when tracing is off."""


class _NoOp:
    __slots__ = ()

    def __enter__(self) -> Span:
        return NO_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


_NO_OP = _NoOp()


class _Started:
    """A span started as the current one; exceptions set its status (cancellation does not)."""

    __slots__ = ("_cm", "_span")

    def __init__(self, cm: Any) -> None:
        self._cm = cm
        self._span = NO_SPAN

    def __enter__(self) -> Span:
        self._span = Span(self._cm.__enter__())
        return self._span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            if isinstance(exc, asyncio.CancelledError):
                self._span.set("agentq.cancelled", True)
            else:
                self._span.fail(f"{type(exc).__name__}: {exc}", exc)
        self._cm.__exit__(exc_type, exc, tb)


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    parent: Any = None,
    links: Sequence[Any] = (),
) -> _NoOp | _Started:
    """Start a span as the current one, for a ``with`` block; a no-op when tracing is off.

    An exception leaving the block sets the span's status to ERROR and records it (an
    ``asyncio.CancelledError`` only sets ``agentq.cancelled``); the exception propagates.

    Args:
        name: The span's name (`WORKFLOW_RUN`, `STEP_ATTEMPT`, `JOB`, ...).
        attributes: Initial attributes; None values are left out.
        parent: An OpenTelemetry context from `capture` to start under, instead of the
            current one.
        links: Span links, e.g. from `links_to`.

    Returns:
        A context manager whose ``__enter__`` gives a `Span` (`NO_SPAN` when off).
    """
    api = _api()
    if api is None:
        return _NO_OP
    tracer = api.tracer()
    if tracer is None:
        return _NO_OP
    attrs = None if attributes is None else {k: v for k, v in attributes.items() if v is not None}
    return _Started(
        tracer.start_as_current_span(
            name,
            context=parent,
            attributes=attrs,
            links=list(links) or None,
            record_exception=False,
            set_status_on_exception=False,
        )
    )


def capture() -> Any:
    """The current OpenTelemetry context, to start a span under it later in another task
    (``span(parent=...)``); None when tracing is off."""
    # No provider was ever set (the API's global says so): off, without calling `_api` or
    # `tracer` (the queue captures the context of every push).
    trace = _OFF_UNLESS_SET
    if trace is not None and trace._TRACER_PROVIDER is None:
        return None
    api = _api()
    if api is None:
        return None
    if getattr(api.trace, "_TRACER_PROVIDER", _UNKNOWN) is None and not api.from_environment:
        return None
    if api.tracer() is None:
        return None
    return api.context.get_current()


def carrier() -> dict[str, str] | None:
    """The current span's W3C trace context (``traceparent``, maybe ``tracestate``), to store;
    None when tracing is off or no span is current."""
    api = _api()
    if api is None or api.tracer() is None:
        return None
    out: dict[str, str] = {}
    api.w3c.inject(out)
    return out or None


def links_to(stored: object, why: str) -> list[Any]:
    """Span links to the span whose `carrier` was stored; [] when off or nothing usable.

    Args:
        stored: What `carrier` returned, read back from the store (anything else is ignored:
            a log written without tracing has nothing there).
        why: Recorded on the link as ``agentq.link``.
    """
    api = _api()
    if api is None or not isinstance(stored, dict) or api.tracer() is None:
        return []
    text = {k: v for k, v in stored.items() if isinstance(k, str) and isinstance(v, str)}
    context = api.w3c.extract(text)
    origin = api.trace.get_current_span(context).get_span_context()
    if not origin.is_valid:
        return []
    return [api.trace.Link(origin, {"agentq.link": why})]


# ---------------------------------------------------------------------- durable calls

_INPUT_TOKENS = ("input_tokens", "prompt_tokens")
_OUTPUT_TOKENS = ("output_tokens", "completion_tokens")


def call_span(
    workflow_id: str, key: str, label: Mapping[str, Any] | None, lane: str | None
) -> _NoOp | _Started:
    """Start the span of a durable call, named and attributed from its label.

    A label ``{"kind": "tool", "tool": NAME, "tool_call_id": ID}`` gives the OpenTelemetry
    GenAI span ``execute_tool NAME`` with ``gen_ai.operation.name = "execute_tool"``,
    ``gen_ai.tool.name`` and ``gen_ai.tool.call.id`` (``call_id`` is read too; without either,
    a key ``tool:ID`` gives ID; `agentq.integrations.pydantic_ai` labels its tool calls with
    their ``tool_call_id``); a label
    ``{"kind": "model", "model": M}`` gives ``chat M`` with ``gen_ai.operation.name = "chat"``
    and ``gen_ai.request.model``; any other call is ``agentq.call``. Every call span has
    ``agentq.workflow.id``, ``agentq.call.key`` and ``agentq.call.lane``.
    """
    if not active():
        return _NO_OP
    attrs: dict[str, Any] = {
        "agentq.workflow.id": workflow_id, "agentq.call.key": key, "agentq.call.lane": lane,
    }
    name = CALL
    label = label or {}
    kind = label.get("kind")
    if kind == "tool":
        tool = label.get("tool") or label.get("name")
        call_id = label.get("tool_call_id") or label.get("call_id")
        if call_id is None and key.startswith("tool:"):  # a key of the model's tool call id
            call_id = key[len("tool:"):]
        attrs["gen_ai.operation.name"] = "execute_tool"
        attrs["gen_ai.tool.name"] = None if tool is None else str(tool)
        attrs["gen_ai.tool.call.id"] = None if call_id is None else str(call_id)
        name = "execute_tool" if tool is None else f"execute_tool {tool}"
    elif kind == "model":
        model = label.get("model")
        attrs["gen_ai.operation.name"] = "chat"
        attrs["gen_ai.request.model"] = None if model is None else str(model)
        name = "chat" if model is None else f"chat {model}"
    elif kind is not None:
        attrs["agentq.call.kind"] = str(kind)
    return span(name, attrs)


def usage_attributes(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """GenAI usage attributes of a call's recorded usage figures.

    ``input_tokens`` (or ``prompt_tokens``) and ``output_tokens`` (or
    ``completion_tokens``) become ``gen_ai.usage.input_tokens`` and
    ``gen_ai.usage.output_tokens``; other figures and non-integers are left out.
    """
    out: dict[str, int] = {}
    if not usage:
        return out
    for target, names in (("input_tokens", _INPUT_TOKENS), ("output_tokens", _OUTPUT_TOKENS)):
        for source in names:
            value = usage.get(source)
            if isinstance(value, int) and not isinstance(value, bool):
                out[f"gen_ai.usage.{target}"] = value
                break
    return out
