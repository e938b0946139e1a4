"""What a caller hands a `DurableAgent`, checked before anything is stored.

- `history_json`: a ``message_history`` as the JSON stored in the run's input, or a clear
  `TypeError` / `ValueError` naming the offending element (a str, a dict that is not a
  message, an `AgentRun` instead of its ``messages``);
- `ArgsChecker`: a tool's ``override_args`` checked against the tool's argument schema, the
  problem named (``order_id: Field required``). ``override_args`` keep pydantic-ai's meaning,
  the *complete* arguments of the call, not a patch of the model's;
- `request_input_names`: the names of the agent's ``RequestInput`` waits, whose payloads are
  checked as ``DeferredToolResults`` inside the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_ai import Agent
from pydantic_ai.capabilities import RequestInput
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
)
from pydantic_ai.toolsets import FunctionToolset

__all__ = ["ArgsChecker", "history_json", "request_input_names"]

_ONE_MESSAGE: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)


def _problems(exc: ValidationError) -> str:
    """``loc: msg`` for each error of `exc`, joined (the field named, the input left out)."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(x) for x in err["loc"]) or "(the whole value)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def history_json(message_history: object) -> list[Any] | None:
    """Return `message_history` as the JSON stored with a run, checked element by element.

    Args:
        message_history: None, or a sequence of pydantic-ai messages (`ModelRequest` /
            `ModelResponse`) or their JSON form (a previous run's stored messages).

    Returns:
        The messages as JSON (``ModelMessagesTypeAdapter``), or None.

    Raises:
        TypeError: Not a sequence of messages (a str, a dict, an `AgentRun`), or an element
            that is neither a message nor a dict; the message names the value or its index.
        ValueError: A dict element that is not a message's JSON (its index and the fields
            at fault named).
    """
    if message_history is None:
        return None
    if type(message_history).__name__ == "AgentRun":
        raise TypeError(
            "message_history must be a list of messages: pass the previous run's .messages, "
            f"not the run itself ({message_history!r:.80})"
        )
    if isinstance(message_history, str | bytes | Mapping) or not isinstance(
        message_history, Sequence
    ):
        raise TypeError(
            "message_history must be a list of pydantic-ai messages (a previous run's "
            f".messages), got {message_history!r:.80}"
        )
    messages: list[ModelMessage] = []
    for i, item in enumerate(message_history):
        if isinstance(item, ModelRequest | ModelResponse):
            messages.append(item)
        elif isinstance(item, Mapping):
            try:
                messages.append(_ONE_MESSAGE.validate_python(item))
            except ValidationError as exc:
                raise ValueError(
                    f"message_history[{i}] is not a pydantic-ai message ({_problems(exc)}): "
                    f"{item!r:.80}"
                ) from None
        else:
            raise TypeError(
                f"message_history[{i}] is {item!r:.80}, not a pydantic-ai message "
                "(ModelRequest / ModelResponse)"
            )
    dumped: list[Any] = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
    return dumped


class ArgsChecker:
    """Checks a tool call's complete arguments against the tool's schema.

    Only the agent's function tools (``@agent.tool``, ``@agent.tool_plain``, a
    `FunctionToolset`) are known here; the arguments of other tools (MCP, dynamic toolsets)
    pass unchecked, and pydantic-ai checks them when the tool runs.

    Args:
        agent: The pydantic-ai agent whose tools are looked up by name.
    """

    def __init__(self, agent: Agent[Any, Any]) -> None:
        self._agent = agent

    def problem(self, tool: str, args: Mapping[str, Any]) -> str | None:
        """Return what is wrong with `args` for `tool` (``order_id: Field required``), or None."""
        for toolset in self._agent.toolsets:
            found = toolset.tools.get(tool) if isinstance(toolset, FunctionToolset) else None
            if found is None:
                continue
            try:
                found.function_schema.validator.validate_python(dict(args))
            except ValidationError as exc:
                return _problems(exc)
            return None
        return None

    def check(self, run_id: str, tool: str, args: Mapping[str, Any]) -> None:
        """Raise `ValueError` naming the fields at fault when `args` do not fit `tool`.

        Raises:
            ValueError: `args` are not the complete, valid arguments of `tool`.
        """
        problem = self.problem(tool, args)
        if problem is not None:
            raise ValueError(
                f"override_args {dict(args)!r:.120} are not valid arguments of tool {tool!r} "
                f"(run {run_id!r}): {problem}. override_args replace the model's arguments "
                "entirely: give all of them"
            )


def request_input_names(agent: Agent[Any, Any]) -> frozenset[str]:
    """Return the wait names of the ``RequestInput`` capabilities of `agent` (nested too)."""
    names: set[str] = set()
    todo: list[object] = [agent.root_capability]
    while todo:
        cap = todo.pop()
        if isinstance(cap, RequestInput):
            names.add(cap.name)
        todo.extend(getattr(cap, "capabilities", None) or [])
    return frozenset(names)
