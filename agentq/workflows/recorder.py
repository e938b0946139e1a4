"""What a `StepContext` needs from the machinery that runs it: `CallRecorder`, `Definition`.

`ctx.call`, `ctx.wait_for_input`, `ctx.sleep`, ``ctx.child`` and ``ctx.receive`` are carried
out by the attempt's call log (`agentq.workflows.calls.CallLog`), which the driver attaches
to the context of each attempt. The context knows it only through these small protocols, so
that the model stays below the machinery that runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agentq.queue import Job
from agentq.store import CallRow

__all__ = ["CallRecorder", "Definition"]


class Definition(Protocol):
    """What `StepContext.child` takes as a definition: a `WorkflowDef` (its name and steps)."""

    @property
    def name(self) -> str: ...

    @property
    def step_names(self) -> tuple[str, ...]: ...


class CallRecorder(Protocol):
    """What a `StepContext` needs from its attempt's call log."""

    async def call(
        self,
        job: Job,
        label: Mapping[str, Any] | None,
        usage: Mapping[str, Any] | Callable[[Any], Mapping[str, Any] | None] | None,
    ) -> Any: ...

    async def wait(
        self,
        key: str,
        reason: object,
        details: Mapping[str, Any] | None,
        timeout: float | None,  # noqa: ASYNC109 (a durable deadline, stored)
    ) -> Any: ...

    async def sleep(self, wake_at: float) -> None: ...

    def now(self) -> float: ...

    async def recorded(self) -> list[CallRow]: ...

    async def child(self, definition: Definition | str, input: Any, key: str) -> Any: ...

    async def children(
        self, definition: Definition | str, inputs: Mapping[str, Any], limit: int | None
    ) -> dict[str, Any]: ...

    async def start_child(self, definition: Definition | str, input: Any, key: str) -> str: ...
    async def receive(
        self, topic: str, timeout: float | None  # noqa: ASYNC109 (a durable deadline, stored)
    ) -> Any: ...

