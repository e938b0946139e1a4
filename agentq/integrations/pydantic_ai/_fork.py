"""A fork of an agent run: the same conversation up to a model request or a tool call.

`fork_run` finds the fork point among the keys the parent run recorded (``model:3``, a tool
call's key, exactly as the log has them: never rebuilt from a tool call id), converts each
`replace` value to the JSON the log records for that call (pydantic-ai's codec: a
``ModelResponse`` for a model request, a tool's return value wrapped as pydantic-ai records
tool results), and hands the rest to `WorkflowEngine.fork`, which copies the run's history
before that point into the fork's own log and runs the fork live from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_ai.durable_exec import JSON_CODEC, CallToolResult
from pydantic_ai.messages import ModelResponse

from agentq.errors import UnknownWorkflowError
from agentq.integrations.pydantic_ai._runs import STEP
from agentq.store import CallRow
from agentq.workflows import RunResult, WorkflowEngine

__all__ = ["fork_run", "recorded_output"]


def recorded_output(row: CallRow, value: Any) -> Any:
    """The JSON the log records for `row`'s call when it returns `value`.

    A model request (label kind ``model``) takes a ``ModelResponse``; a tool call (label kind
    ``tool``) takes what the tool returned, as the tool returned it; any other call or wait
    takes its recorded JSON as is.

    Raises:
        TypeError: A model request's value is not a ``ModelResponse``.
        ValueError: A tool's value cannot be recorded as pydantic-ai records tool results.
    """
    kind = (row.label or {}).get("kind")
    if kind == "model":
        if not isinstance(value, ModelResponse):
            raise TypeError(
                f"replace[{row.key!r}]: a model request is replaced by a "
                f"pydantic_ai.messages.ModelResponse, got {value!r:.80}"
            )
        return JSON_CODEC.dump(ModelResponse, value)
    if kind == "tool":
        try:
            wrapped = JSON_CODEC.load(CallToolResult, {"result": value, "kind": "tool_return"})
            return JSON_CODEC.dump(CallToolResult, wrapped)
        except (ValidationError, TypeError) as exc:
            raise ValueError(
                f"replace[{row.key!r}]: {value!r:.80} cannot be recorded as the result of tool "
                f"call {row.key!r} ({exc})"
            ) from exc
    return value


async def fork_run(
    engine: WorkflowEngine,
    agent_name: str,
    run_id: str,
    new_run_id: str,
    at: str,
    replace: Mapping[str, Any] | None,
) -> RunResult:
    """Fork the run `run_id` of the agent `agent_name` at the call `at`; run the fork.

    Raises:
        UnknownWorkflowError: No run `run_id` of this agent in the store.
        TypeError: `at` is not a str, or `replace` not a mapping (or a bad value: see
            `recorded_output`).
        ValueError: `at` or a `replace` key is not a call the run recorded (the message lists
            its keys), or a replace key comes after `at`.
        WorkflowMismatchError: `new_run_id` exists.
        PayloadError: A replaced value is not JSON or too large once converted.
    """
    row = await engine.store.get_workflow(run_id)
    if row is None or row.definition != agent_name:
        raise UnknownWorkflowError(f"no run {run_id!r} of agent {agent_name!r} in the store")
    if not isinstance(at, str):
        raise TypeError(
            f"at must be the key of a model request ('model:3') or a tool call, as the run's "
            f"log records it, got {at!r:.80}"
        )
    if replace is not None and not isinstance(replace, Mapping):
        raise TypeError(f"replace must be a mapping of call key to value, got {replace!r:.80}")
    rows = {r.key: r for r in await engine.store.calls(run_id)}
    for key in (at, *(replace or {})):
        if key not in rows:
            shown = [k for k in rows if not k.endswith(":ask")][:30]
            raise ValueError(
                f"run {run_id!r} of agent {agent_name!r} recorded no call {key!r}: its model "
                f"requests and tool calls are {shown!r}"
            )
    recorded = {k: recorded_output(rows[k], v) for k, v in (replace or {}).items()}
    return await engine.fork(run_id, new_run_id, at=(STEP, at), replace=recorded)
