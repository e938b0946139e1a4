"""Each durable call of a run: its place among the model response's parts, the digest of its
arguments, and the run context its body gets.

pydantic-ai's `BaseDurabilityCapability` hands the user code that runs inside a durable unit (a
model request, a tool call) a guarded copy of the run context: ``ctx.enqueue()`` and
``ctx.cancel()`` there raise, since a call answered from the log does not run its body again
and would silently drop them. Its copy is a `dataclasses.replace` of the 47 fields of
`RunContext` (~27 µs a call, ~140,000 instructions); `guarded` makes the same copy with the same
two guards by copying the instance's attributes (~3 µs).
"""

from __future__ import annotations

from typing import Any

from pydantic_ai._enqueue import EnqueueGuard
from pydantic_ai.durable_exec._toolset import CancelGuard, cancel_not_supported_message
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.tools import RunContext
from pydantic_core import to_jsonable_python

from agentq.integrations.pydantic_ai._journal import args_digest

__all__ = ["call_args", "guarded", "place_of"]


def place_of(messages: list[ModelMessage], call: ToolCallPart | None, tool_call_id: str) -> int:
    """The position of a tool call among the parts of the latest model response, or -1.

    The part itself when pydantic-ai hands it over (`wrap_tool_execute`, an approval), else
    (edited arguments make a copy) the first part of the same tool and ``tool_call_id``.
    """
    response = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
    if response is None:
        return -1
    parts = response.parts
    for i, part in enumerate(parts):
        if part is call:
            return i
    for i, part in enumerate(parts):
        if (
            isinstance(part, ToolCallPart)
            and part.tool_call_id == tool_call_id
            and (call is None or part.tool_name == call.tool_name)
        ):
            return i
    return -1


def call_args(args: object) -> str:
    """The digest of a call's validated arguments (`args_digest` of their JSON form)."""
    return args_digest(to_jsonable_python(args, fallback=lambda v: type(v).__qualname__))


def guarded(ctx: RunContext[Any], unit_noun: str, container_noun: str) -> RunContext[Any] | None:
    """A copy of `ctx` whose ``enqueue()`` and ``cancel()`` raise, as pydantic-ai's
    ``guard_run_context`` makes it, or None when `ctx` is not a plain `RunContext` (a
    subclass may hold state outside its attributes: the caller then uses pydantic-ai's own).

    Args:
        ctx: The run context of the operation.
        unit_noun: What a durable unit is called in the errors (``"call"``).
        container_noun: What the durable container is called (``"workflow"``).

    Returns:
        A new `RunContext` sharing every field of `ctx` but ``pending_messages`` (an
        ``EnqueueGuard``) and ``_cancellation`` (a ``CancelGuard``), each new; or None.
    """
    if type(ctx) is not RunContext:
        return None
    copy: RunContext[Any] = object.__new__(RunContext)
    fields = ctx.__dict__.copy()
    fields["pending_messages"] = EnqueueGuard(unit_noun, container_noun)
    fields["_cancellation"] = CancelGuard(cancel_not_supported_message(unit_noun, container_noun))
    copy.__dict__ = fields
    return copy
