"""What a caller hands a `DurableAgent`, checked before anything is stored.

- `prompt_json` / `prompt_of`: the prompt (a str, or a sequence of user content: text,
  `ImageUrl`, `BinaryContent`, `DocumentUrl`, ...) as the JSON stored in the run's input, and
  back;
- `history_json`: a ``message_history`` as the JSON stored in the run's input, or a clear
  `TypeError` / `ValueError` naming the offending element (a str, a dict that is not a
  message, an `AgentRun` instead of its ``messages``);
- `check_size`: a run's whole input within the store's per-value limit, or a `PayloadError`
  that says which part is large and what to do (an image by URL, a trimmed history);
- `ArgsChecker`: a tool's ``override_args`` checked against the tool's argument schema, the
  problem named (``order_id: Field required``). ``override_args`` keep pydantic-ai's meaning,
  the *complete* arguments of the call, not a patch of the model's;
- `request_input_names`: the names of the agent's ``RequestInput`` waits, whose payloads are
  checked as ``DeferredToolResults`` inside the run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_ai import Agent
from pydantic_ai.capabilities import RequestInput
from pydantic_ai.messages import (
    BinaryContent,
    CachePoint,
    FileUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextContent,
    UploadedFile,
    UserContent,
)
from pydantic_ai.toolsets import FunctionToolset

from agentq.codec import MAX_PAYLOAD_BYTES, encode
from agentq.errors import PayloadError

__all__ = [
    "ArgsChecker",
    "check_size",
    "history_json",
    "prompt_json",
    "prompt_of",
    "request_input_names",
]

_ONE_MESSAGE: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)
_CONTENT: TypeAdapter[list[UserContent]] = TypeAdapter(list[UserContent])
_CONTENT_TYPES = (str, TextContent, FileUrl, BinaryContent, UploadedFile, CachePoint)


def prompt_json(prompt: object) -> str | list[Any]:
    """Return `prompt` as the JSON stored with a run.

    Args:
        prompt: A str, or a sequence of pydantic-ai user content (str, `TextContent`,
            `ImageUrl`, `AudioUrl`, `DocumentUrl`, `VideoUrl`, `BinaryContent`,
            `UploadedFile`, `CachePoint`).

    Returns:
        The str itself (as runs always stored it), or a list of the items' JSON
        (`BinaryContent` as base64).

    Raises:
        TypeError: Neither (None, bytes, a dict, ...), or an item that is not user content
            (its index named).
    """
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, bytes | Mapping) or not isinstance(prompt, Sequence):
        raise TypeError(
            "prompt must be a str or a sequence of user content (str, ImageUrl, "
            f"BinaryContent, DocumentUrl, ...), got {prompt!r:.80}"
        )
    for i, item in enumerate(prompt):
        if not isinstance(item, _CONTENT_TYPES):
            raise TypeError(
                f"prompt[{i}] is {item!r:.80}, not user content (str, ImageUrl, "
                "BinaryContent, DocumentUrl, ...)"
            )
    dumped: list[Any] = _CONTENT.dump_python(list(prompt), mode="json")
    return dumped


def prompt_of(stored: str | list[Any]) -> str | list[UserContent]:
    """The prompt of a run's stored input, as pydantic-ai takes it (see `prompt_json`)."""
    return stored if isinstance(stored, str) else _CONTENT.validate_python(stored)


def check_size(run_input: Mapping[str, Any]) -> None:
    """Refuse a run's input over the store's limit for one value, saying what to do.

    Raises:
        PayloadError: The input's JSON is over `MAX_PAYLOAD_BYTES` (1 MiB); the message
            gives its size and the sizes of the prompt and the history, and suggests passing
            images and documents by URL (`ImageUrl`, `DocumentUrl`), smaller ones, or a
            trimmed history. Nothing is stored.
    """
    total = len(json.dumps(run_input, separators=(",", ":"), ensure_ascii=False).encode())
    if total <= MAX_PAYLOAD_BYTES:
        encode(run_input, "input")  # what is not JSON is named by the codec
        return
    parts = {
        name: len(json.dumps(run_input.get(name), separators=(",", ":")).encode())
        for name in ("prompt", "message_history")
    }
    raise PayloadError(
        f"the run's input is {total / 1e6:.2f} MB of JSON (prompt {parts['prompt'] / 1e6:.2f} "
        f"MB, message_history {parts['message_history'] / 1e6:.2f} MB), over the store's "
        f"limit of {MAX_PAYLOAD_BYTES} bytes for one value; nothing was stored. Pass large "
        "images and documents by URL (ImageUrl, DocumentUrl) or send smaller ones "
        "(BinaryContent is stored as base64, a third larger), and trim message_history",
        "input",
    )


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
