"""A run's event-stream handler, fed live while a model request streams in its durable call.

pydantic-ai hands the events of a streamed model request (text, thinking and tool-call
deltas) to the durability capability's handler *inside* the durable unit, as they arrive;
outside it, the run's own handler then receives events rebuilt from the unit's final
response (starts and ends of parts, no deltas). `LiveEvents` is one run's handler seen from
both sides:

- `in_unit` receives the live events of a request whose call runs now (it runs in the
  call's job, where `current` finds the run's `LiveEvents` through `live_body`);
- `outside` receives every event of the run and skips the rebuilt events of a response that
  was streamed live (its parts' and its final-result event), so each reaches the handler
  once, where plain pydantic-ai hands it; the events of a response answered from agentq's
  log (not sent again) are the rebuilt ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from pydantic_ai.messages import (
    AgentStreamEvent,
    FinalResultEvent,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
)

__all__ = ["LiveEvents", "current", "live_body", "live_events"]

# A model response's own events (pydantic-ai's ModelResponseStreamEvent).
_RESPONSE_EVENTS = (PartStartEvent, PartDeltaEvent, PartEndEvent, FinalResultEvent)

_CURRENT: ContextVar[LiveEvents | None] = ContextVar("agentq_pydantic_ai_live", default=None)


class LiveEvents:
    """One run's event-stream `handler` (``handler(ctx, events)``), fed from both sides."""

    def __init__(self, handler: Callable[[Any, AsyncIterable[AgentStreamEvent]], Awaitable[None]]):
        self._handler = handler
        self.streamed = False  # the latest model request streamed live in this attempt

    async def in_unit(self, ctx: Any, events: AsyncIterable[AgentStreamEvent]) -> None:
        """The live events of a model request whose durable call runs now."""
        self.streamed = True
        await self._handler(ctx, events)

    async def outside(self, ctx: Any, events: AsyncIterable[AgentStreamEvent]) -> None:
        """The run's events, less the events of a response already streamed live."""

        async def kept() -> AsyncIterable[AgentStreamEvent]:
            async for event in events:
                if not (self.streamed and isinstance(event, _RESPONSE_EVENTS)):
                    yield event

        await self._handler(ctx, kept())


def current() -> LiveEvents | None:
    """The `LiveEvents` of the run whose model request runs in this task, or None."""
    return _CURRENT.get()


@contextmanager
def live_events(live: LiveEvents | None) -> Iterator[None]:
    """Make `live` the current run's `LiveEvents` (None: the run has no handler)."""
    token = _CURRENT.set(live)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def live_body(body: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[object]]:
    """Wrap a model request's body so that, where its durable call runs it, the run's
    `LiveEvents` is current; the wrapped request counts as not streamed live until then."""
    live = current()
    if live is None:
        return body
    live.streamed = False

    async def run() -> object:
        with live_events(live):
            return await body()

    return run
