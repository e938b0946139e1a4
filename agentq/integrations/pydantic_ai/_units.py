"""Each durable call of a run: its place among the model response's parts, the digest of its
arguments, the run context its body gets, and how its result crosses back to pydantic-ai.

pydantic-ai's `BaseDurabilityCapability` hands the user code that runs inside a durable unit (a
model request, a tool call) a guarded copy of the run context: ``ctx.enqueue()`` and
``ctx.cancel()`` there raise, since a call answered from the log does not run its body again
and would silently drop them. Its copy is a `dataclasses.replace` of the 47 fields of
`RunContext` (~27 µs a call, ~140,000 instructions); `guarded` makes the same copy with the same
two guards by copying the instance's attributes (~3 µs). The guards' classes come from
pydantic-ai's private modules (the version is pinned; tests/test_pydantic_ai_units.py checks
the copy against pydantic-ai's own, field for field).

**A result that ran in this attempt is handed back as it is** (`LiveCodec`), where its JSON
would rebuild the same. pydantic-ai's JSON codec makes each result JSON inside the call (what
the log stores) and rebuilds it from that JSON outside it. When the call's body ran in this
attempt and its result's JSON form holds the very values the result holds (str, int, float,
bool, None, lists and dicts of them, no dict with a ``"kind"`` key, which pydantic-ai may load
as a file or a part, in the fields of pydantic-ai's result wrapper: a tool that returned such a
value), that result is handed back instead of one rebuilt. Anything else is
rebuilt from its JSON as before, so a live run and a recovered one see the same values: a tool
that returns a dataclass, a datetime or a tuple, and every model response (its JSON form does
not rebuild every response exactly: a provider's ``provider_details`` may hold a datetime that
comes back a string). A call answered from the log is rebuilt from its JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pydantic_ai._enqueue import EnqueueGuard
from pydantic_ai.durable_exec._toolset import CancelGuard, cancel_not_supported_message
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.tools import RunContext
from pydantic_core import to_jsonable_python

from agentq.integrations.pydantic_ai._journal import args_digest

__all__ = ["Live", "LiveCodec", "call_args", "guarded", "place_of"]


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


@dataclasses.dataclass(frozen=True, slots=True)
class Live:
    """A call's result as its body returned it (`value`) and its JSON form (`json`, what the
    log stores), from a body that ran in this attempt."""

    value: Any
    json: Any


class LiveCodec:
    """An operation result's codec: pydantic-ai's (`dump` makes JSON, `load` rebuilds from
    it), except that a result whose JSON would rebuild the same value is dumped as a `Live`
    and loaded as the value itself (see the module's docstring)."""

    __slots__ = ("_dump", "_load")

    def __init__(self, dump: Callable[[Any], Any], load: Callable[[Any], Any]) -> None:
        """Wrap pydantic-ai's `dump` (value to JSON; raises what it raises on a value it
        cannot make JSON) and `load` (JSON to value) of one result type."""
        self._dump = dump
        self._load = load

    def dump(self, value: Any) -> Any:
        """`value`'s JSON form, or a `Live` of `value` and its JSON form when they are the same."""
        json = self._dump(value)
        return Live(value, json) if _same(value, json) else json

    def load(self, payload: Any) -> Any:
        """The value of a `Live`, else the value pydantic-ai rebuilds from the JSON `payload`."""
        return payload.value if type(payload) is Live else self._load(payload)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _same(value: Any, json: Any) -> bool:
    """Whether rebuilding `value` from its JSON form `json` gives `value` again: a JSON value,
    or a dataclass (pydantic-ai's result wrapper, not a message) whose fields all hold JSON
    values equal to those of `json` (its JSON may hold more keys: a file record)."""
    if isinstance(value, ModelResponse):
        return False  # typed fields (datetimes) and provider details: rebuilt, as a replay is
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(json) is dict and all(
            f.name in json and _json_equal(getattr(value, f.name), json[f.name])
            for f in dataclasses.fields(value)
        )
    return _json_equal(value, json)


def _json_equal(value: Any, json: Any) -> bool:
    """Whether `value` is a JSON value (exact types: no subclass, tuple or enum) equal to `json`."""
    kind = type(value)
    if kind in _SCALARS:
        return type(json) is kind and json == value
    if kind is list:
        return type(json) is list and len(json) == len(value) and all(
            _json_equal(v, j) for v, j in zip(value, json, strict=True)
        )
    if kind is dict:  # one with a "kind" may load as a file or a part (``{"kind": "binary"}``)
        return "kind" not in value and type(json) is dict and json.keys() == value.keys() and all(
            type(k) is str and _json_equal(v, json[k]) for k, v in value.items()
        )
    return False
