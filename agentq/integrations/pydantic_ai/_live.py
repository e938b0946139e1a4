"""Live events of the runs streaming in this process: `LiveRuns` and each attempt's `Sink`.

A run streams when something listens in this process (`durable.run_stream`,
``run_stream_events``, ``iter``) or its run options hold an ``event_stream_handler``. Its
attempt then gets a `Sink` (current in `SINK` while the agent runs), and pydantic-ai streams
each model request inside its durable call:

- **inside the call** (`Sink.unit`, current in `UNIT` while the call's body runs): the model's
  live events (``PartStartEvent``, ``PartDeltaEvent``, ``PartEndEvent``) go to the run's
  listeners and to the run's handler as the provider sends them, and the text streamed so far
  is kept by call key (``model:<n>``) until the call ends (`LiveRuns.partial`);
- **outside the call** (`Sink.handler`, the run's handler as pydantic-ai sees it): the rest of
  the run's events (tool calls and results). pydantic-ai replays a finished model request's
  response there as events of its parts (and its final-result event): those are dropped for
  a request that was streamed live in this attempt (its listeners had the live ones, so
  each event reaches them once) and passed on for a request answered from the log (its
  recorded response, one event per part).

The log records the final response only: the call's output, as without streaming.
Listeners are plain ``asyncio.Queue``\\ s fed with ``put_nowait`` (unbounded: the run never
waits for a slow reader). Everything runs on the engine's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from pydantic_ai.messages import (
    FinalResultEvent,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.tools import RunContext

__all__ = ["SINK", "UNIT", "Handler", "LiveRuns", "Sink"]

Handler = Callable[[RunContext[Any], AsyncIterable[Any]], Awaitable[None]]
"""pydantic-ai's event-stream handler: ``handler(ctx, events)``."""

# A model response's own events (pydantic-ai's ModelResponseStreamEvent): inside the call
# the live stream has them all, the final-result event included.
_PART_EVENTS = (PartStartEvent, PartDeltaEvent, PartEndEvent, FinalResultEvent)


class LiveRuns:
    """The listeners of the runs of one agent in this process, and their live partial text.

    One per `DurableAgent`; methods are not thread-safe (the engine's event loop only).
    """

    def __init__(self) -> None:
        self._listeners: dict[str, list[asyncio.Queue[Any]]] = {}
        # run id -> call key -> part index -> the text of that part streamed so far
        self._partials: dict[str, dict[str, dict[int, str]]] = {}

    def listen(self, run_id: str) -> asyncio.Queue[Any]:
        """A new queue that receives the events of `run_id`'s attempts (until `unlisten`)."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._listeners.setdefault(run_id, []).append(queue)
        return queue

    def unlisten(self, run_id: str, queue: asyncio.Queue[Any]) -> None:
        """Stop feeding `queue` (a no-op when it is not listening)."""
        queues = self._listeners.get(run_id, [])
        if queue in queues:
            queues.remove(queue)
        if not queues:
            self._listeners.pop(run_id, None)

    def listened(self, run_id: str) -> bool:
        """Whether something listens to `run_id` in this process."""
        return run_id in self._listeners

    def publish(self, run_id: str, event: object) -> None:
        """Hand `event` to every listener of `run_id`."""
        for queue in self._listeners.get(run_id, ()):
            queue.put_nowait(event)

    def partial(self, run_id: str) -> dict[str, str]:
        """The text streamed so far by each model request of `run_id` streaming now, by key."""
        calls = self._partials.get(run_id, {})
        return {key: "".join(parts[i] for i in sorted(parts)) for key, parts in calls.items()}

    def sink(self, run_id: str, handler: Handler | None) -> Sink | None:
        """The sink of an attempt of `run_id` with the run's `handler`; None (the run does
        not stream) when nothing listens and there is no handler."""
        if handler is None and not self.listened(run_id):
            return None
        return Sink(self, run_id, handler)

    @contextmanager
    def _streaming(self, run_id: str, key: str) -> Iterator[dict[int, str]]:
        """The partial text of call `key` of `run_id`, kept while the block runs."""
        calls = self._partials.setdefault(run_id, {})
        parts: dict[int, str] = {}
        calls[key] = parts
        try:
            yield parts
        finally:
            if calls.get(key) is parts:
                del calls[key]
            if not calls and self._partials.get(run_id) is calls:
                del self._partials[run_id]


class Sink:
    """Where one attempt of a streaming run sends its events (see the module docstring).

    Args:
        live: The agent's `LiveRuns`.
        run_id: The run.
        handler: The run's own ``event_stream_handler``, or None.
    """

    def __init__(self, live: LiveRuns, run_id: str, handler: Handler | None) -> None:
        self._live = live
        self._run_id = run_id
        self._handler = handler
        self._streamed = False  # the model request that ended last was streamed live

    def wrap(
        self, key: str, body: Callable[[], Awaitable[object]]
    ) -> Callable[[], Awaitable[object]]:
        """`body` of the streamed model request `key`, run with this sink as `UNIT`; the
        request counts as not streamed live until its body runs (answered from the log, it
        never does)."""
        self._streamed = False

        async def streamed() -> object:
            with self._live._streaming(self._run_id, key) as parts:
                token = UNIT.set((self, parts))
                try:
                    return await body()
                finally:
                    UNIT.reset(token)

        return streamed

    async def unit(self, ctx: RunContext[Any], events: AsyncIterable[Any]) -> None:
        """The handler of a model request's live stream, inside its durable call."""
        current = UNIT.get()
        parts = {} if current is None else current[1]
        self._streamed = True
        live = self._tee(events, parts)
        try:
            if self._handler is not None:
                await self._handler(ctx, live)
            async for _ in live:  # what the handler left: the listeners still get it
                pass
        finally:
            await live.aclose()

    async def handler(self, ctx: RunContext[Any], events: AsyncIterable[Any]) -> None:
        """The run's event-stream handler, outside the durable calls (see the module
        docstring): the events the listeners and the run's handler have not had live."""
        passed = self._outside(events)
        try:
            if self._handler is not None:
                await self._handler(ctx, passed)
            async for _ in passed:
                pass
        finally:
            await passed.aclose()

    async def _tee(
        self, events: AsyncIterable[Any], parts: dict[int, str]
    ) -> AsyncGenerator[Any]:
        async for event in events:
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                parts[event.index] = event.part.content
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                parts[event.index] = parts.get(event.index, "") + event.delta.content_delta
            self._live.publish(self._run_id, event)
            yield event

    async def _outside(self, events: AsyncIterable[Any]) -> AsyncGenerator[Any]:
        async for event in events:
            if self._streamed and isinstance(event, _PART_EVENTS):
                continue  # the rebuilt events of a response the listeners had live
            self._live.publish(self._run_id, event)
            yield event


SINK: ContextVar[Sink | None] = ContextVar("agentq_pydantic_ai_sink", default=None)
"""The sink of the attempt running in this task, if its run streams."""

UNIT: ContextVar[tuple[Sink, dict[int, str]] | None] = ContextVar(
    "agentq_pydantic_ai_unit", default=None
)
"""Inside a streamed model request's durable call: its sink and its partial text by part."""
