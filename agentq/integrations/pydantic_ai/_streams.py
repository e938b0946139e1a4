"""`Streams`: the streaming verbs of `DurableAgent` (its base class), and `DurableStream`.

``run_stream``, ``run_stream_events`` and ``iter`` mirror pydantic-ai's ``Agent`` methods on
a durable run: the run is stored and run by the engine as `DurableAgent.run` runs it, and the
caller listens to it in this process (`_live`): the model's text and tool-call deltas as the
provider sends them, then the tool calls and their results, then the run's end. The log
records what `run` records (one durable call per model request, its final response).

The run belongs to the engine, not to the caller: a caller that stops listening (leaves the
``async with``, breaks out of the loop, is cancelled) only stops listening. The run goes on
in this engine; ``durable.run(...)`` with the same arguments joins it (or returns its
recorded result), repeating no recorded request.

Private to `agentq.integrations.pydantic_ai._agent`: `DurableAgent` provides the attributes
declared here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, Literal, Unpack

from pydantic_ai.messages import (
    ModelMessage,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    UserContent,
)
from pydantic_ai.tools import AgentDepsT

from agentq.integrations.pydantic_ai._live import LiveRuns
from agentq.integrations.pydantic_ai._options import RunOptionsKwargs
from agentq.integrations.pydantic_ai._report import Reporter
from agentq.integrations.pydantic_ai._results import AgentRun
from agentq.integrations.pydantic_ai._step import AgentStep
from agentq.workflows import RunStatus, WorkflowEngine

__all__ = ["DurableRunResultEvent", "DurableStream", "Streams"]

_END = object()


@dataclass(frozen=True, slots=True)
class DurableRunResultEvent:
    """The last item of ``run_stream_events``: the run as `DurableAgent.run` reports it.

    Attributes:
        run: The `AgentRun`: completed (typed output), waiting (its approvals), failed or
            cancelled.
        event_kind: ``"durable_run_result"`` (pydantic-ai's ``AgentRunResultEvent`` holds a
            pydantic-ai result, which a run that waits for an approval does not have).
    """

    run: AgentRun
    event_kind: Literal["durable_run_result"] = "durable_run_result"


class DurableStream:
    """A durable run as the caller who streams it sees it (`run_stream`, `iter`).

    ``async for event in stream`` yields the run's events (pydantic-ai's
    ``AgentStreamEvent``\\ s) until the run completes, waits or fails, live: a model
    request's ``PartStartEvent`` / ``PartDeltaEvent`` while the provider sends it, a request
    answered from the log as the events of its recorded response (one ``PartStartEvent``
    per part, its whole content). Iterate once: the events are handed out as they come.

    Attributes:
        run_id: The run.
    """

    def __init__(
        self, run_id: str, live: LiveRuns, finish: Callable[[], Awaitable[AgentRun]]
    ) -> None:
        self.run_id = run_id
        self._live = live
        self._queue = live.listen(run_id)  # before the attempt starts: it streams
        self._task: asyncio.Task[AgentRun] = asyncio.ensure_future(finish())
        self._task.add_done_callback(lambda _: self._queue.put_nowait(_END))

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._events()

    async def _events(self) -> AsyncIterator[Any]:
        while True:
            item = await self._queue.get()
            if item is _END:
                self._queue.put_nowait(_END)  # a later loop ends at once too
                if not self._task.cancelled() and self._task.exception() is not None:
                    raise self._task.exception()  # type: ignore[misc]
                return
            yield item

    async def stream_text(self, *, delta: bool = False) -> AsyncIterator[str]:
        """The text of the model's responses as it streams.

        Args:
            delta: True: each new piece of text; False: the text of the current model
                response so far (each response starts again from its own text).

        Yields:
            str pieces (a request answered from the log gives its text at once).
        """
        texts: dict[int, str] = {}
        async for event in self:
            piece = None
            if isinstance(event, PartStartEvent):
                if event.index == 0:
                    texts = {}  # a new response
                if isinstance(event.part, TextPart):
                    piece = event.part.content
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                piece = event.delta.content_delta
            if not piece:
                continue
            index = event.index
            texts[index] = texts.get(index, "") + piece
            yield piece if delta else "".join(texts[i] for i in sorted(texts))

    async def result(self) -> AgentRun:
        """Wait for the run to complete, wait or fail, and return its `AgentRun`.

        Raises:
            What `DurableAgent.run` raises (a store failure, ...).
        """
        return await asyncio.shield(self._task)

    async def get_output(self) -> Any:
        """The typed output of the run once it completed; None if it waits or failed
        (`result` says why)."""
        run = await self.result()
        return run.output if run.status is RunStatus.COMPLETED else None

    def partial(self) -> dict[str, str]:
        """The text streamed so far by the run's model requests streaming now, by call key."""
        return self._live.partial(self.run_id)

    async def aclose(self) -> None:
        """Stop listening. The run goes on in the engine (see the module docstring)."""
        self._live.unlisten(self.run_id, self._queue)
        task = self._task
        if not task.done():
            task.cancel()  # only this wait: cancelling a caller of engine.run stops no run
            await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # read: an error nobody asked for is not reported at exit


class Streams(Generic[AgentDepsT]):
    """The streaming verbs of a `DurableAgent` (see `DurableAgent`)."""

    _engine: WorkflowEngine
    _step: AgentStep[AgentDepsT]
    _reporter: Reporter
    _live: LiveRuns
    start: Callable[..., Awaitable[str]]

    def partial(self, run_id: str) -> dict[str, str]:
        """The text streamed so far by the model requests of `run_id` streaming now.

        For the live view of a conversation (a notebook's): only requests streaming in this
        process, inside a run that streams (`run_stream`, `run_stream_events`, `iter`, or
        an ``event_stream_handler``); an entry is removed when its request ends (the log
        then holds the whole response).

        Args:
            run_id: The run.

        Returns:
            ``{call key: text}``, the key as the log records the request (``"model:3"``);
            ``{}`` when none streams.
        """
        return self._live.partial(run_id)

    @asynccontextmanager
    async def run_stream(
        self,
        prompt: str | Sequence[UserContent],
        *,
        run_id: str,
        message_history: Sequence[ModelMessage] | None = None,
        continue_from: str | None = None,
        deps: AgentDepsT | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> AsyncIterator[DurableStream]:
        """Run the agent as `run` does, streaming the run to this caller.

        ``async with durable.run_stream(prompt, run_id=...) as stream:`` then
        ``async for text in stream.stream_text(delta=True)``, ``async for event in
        stream``, ``await stream.get_output()`` or ``await stream.result()``. Unlike
        pydantic-ai's, the run does not stop at the first final result: it runs as `run`
        runs it (tool calls after it, approvals). Leaving the block before the end stops
        listening only; the run goes on in the engine.

        Args and errors (raised on entering the block, nothing stored) as `run`.

        Yields:
            The `DurableStream` of the run.
        """
        await self.start(prompt, run_id=run_id, message_history=message_history,
                         continue_from=continue_from, deps=deps, **options)
        stream = DurableStream(run_id, self._live, lambda: self._complete(run_id))
        try:
            yield stream
        finally:
            await stream.aclose()

    @asynccontextmanager
    async def iter(
        self,
        prompt: str | Sequence[UserContent],
        *,
        run_id: str,
        message_history: Sequence[ModelMessage] | None = None,
        continue_from: str | None = None,
        deps: AgentDepsT | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> AsyncIterator[DurableStream]:
        """Run the agent as `run` does, iterating over the run as it goes.

        The durable counterpart of pydantic-ai's ``iter``: the agent's graph runs inside
        the run's durable step (an attempt may run in another process, after a crash or an
        approval), so its nodes are not handed out; ``async for event in run`` yields the
        events each node makes (model deltas, tool calls and results), and ``await
        run.result()`` the `AgentRun`. The same `DurableStream` as `run_stream`'s.

        Args and errors as `run`.
        """
        async with self.run_stream(
            prompt, run_id=run_id, message_history=message_history,
            continue_from=continue_from, deps=deps, **options,
        ) as stream:
            yield stream

    async def run_stream_events(
        self,
        prompt: str | Sequence[UserContent],
        *,
        run_id: str,
        message_history: Sequence[ModelMessage] | None = None,
        continue_from: str | None = None,
        deps: AgentDepsT | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> AsyncGenerator[Any]:
        """Run the agent as `run` does, yielding its events, then a `DurableRunResultEvent`.

        Like pydantic-ai's ``run_stream_events``: ``async for event in
        durable.run_stream_events(prompt, run_id=...)``. Close it when leaving early
        (``contextlib.aclosing``); the run goes on in the engine either way.

        Args and errors as `run`.

        Yields:
            pydantic-ai's ``AgentStreamEvent``\\ s, live; last, a `DurableRunResultEvent`.
        """
        async with self.run_stream(
            prompt, run_id=run_id, message_history=message_history,
            continue_from=continue_from, deps=deps, **options,
        ) as stream:
            async for event in stream:
                yield event
            yield DurableRunResultEvent(await stream.result())

    async def _complete(self, run_id: str) -> AgentRun:
        """Run the stored run `run_id` to its end (or a wait) and report it, as `run` does."""
        live = self._step.given_options(run_id)  # taken first: a completed run releases them
        self._step.expect(run_id)  # the completing attempt's messages: no rebuild to report
        try:
            result = await self._engine.run(run_id)
        finally:
            finished = self._step.take(run_id)
        if result.status is RunStatus.COMPLETED:
            self._step.release(run_id)  # nothing continues a completed run
        return await self._reporter.report(result, live, finished)
