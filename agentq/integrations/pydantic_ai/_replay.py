"""A completed run's messages, rebuilt from its log (they are not stored with its result).

A run's result keeps only the agent's output and usage: the message list grows with every
tool return and would go over the store's per-value limit (1 MiB of JSON) on a run whose every
call fitted, failing the run after all its side effects. Its messages are rebuilt on demand
by running the agent once more against the log, read-only: `LogReader` stands in for the
step's context, answering each model request, tool call and wait from its recorded row; it
never runs anything. An operation the log does not hold (a failed call, a wait never
answered) raises `NotInLog`, a `MessagesUnavailableError`; a run that did not complete is
refused before any rebuild (`check_completed`), naming its state.

An output type is not JSON, so it is not stored: a run given ``output_type=`` ended on a call
of its output tool (``final_result``), which the agent without that type takes for an
unknown tool (it would ask the model again, past the log's end). The rebuild uses the output
type given to it; given none, the recorded responses are authoritative: `output_tools_of`
stands in for the run's output tools (a tool of each recorded name taking the recorded
arguments as they are), so the rebuild ends on the recorded call as the run did. When it
cannot (an output tool called before the last response: the run retried it), a
`MessagesUnavailableError` says to give the run's ``output_type``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_ai.durable_exec import JSON_CODEC
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.output import ToolOutput

from agentq.errors import AgentqError
from agentq.queue import Job
from agentq.store import CallRow, CallState, WorkflowState

__all__ = [
    "LogReader", "MessagesUnavailableError", "NotInLog", "check_completed", "output_tools_of"]

_OUTPUT_TOOL = "final_result"
"""The name pydantic-ai gives an output tool (``final_result`` or ``final_result_<Type>``)."""


class MessagesUnavailableError(AgentqError, LookupError):
    """A run's messages cannot be rebuilt from its log.

    The run did not complete (it waits, failed or was cancelled: its log ends before the
    agent's last answer), or the rebuild needs an outcome the log does not hold. The message
    names the run and its state, or what is missing.
    """


class NotInLog(MessagesUnavailableError):
    """The read-only replay reached an operation whose outcome the log does not hold."""


def check_completed(run_id: str, state: WorkflowState) -> None:
    """Refuse to rebuild the messages of a run that did not complete.

    Raises:
        MessagesUnavailableError: `state` is not completed (named in the message).
    """
    if state is not WorkflowState.COMPLETED:
        raise MessagesUnavailableError(
            f"run {run_id!r} is {state.value}: its messages are rebuilt from its log once it "
            "completed (a waiting run: answer its approvals first; a failed one: retry it)"
        )


class _Recorded(BaseModel, extra="allow"):
    """Any object of arguments (an object schema, so pydantic-ai does not wrap it)."""


def _output_calls(rows: list[CallRow]) -> list[list[str]]:
    """The output-tool calls (their names) of each recorded model response, in order."""
    responses = sorted(
        (int(r.key.split(":", 1)[1]), r.output) for r in rows
        if r.state is CallState.COMPLETED and (r.label or {}).get("kind") == "model"
        and r.key.split(":", 1)[1].isdigit()
    )
    out = []
    for _, output in responses:
        try:
            response = JSON_CODEC.load(ModelResponse, output)
        except ValidationError:  # not a response pydantic-ai reads: the rebuild will say so
            response = ModelResponse(parts=[])
        out.append([p.tool_name for p in response.parts if isinstance(p, ToolCallPart)
                    and p.tool_name.startswith(_OUTPUT_TOOL)])
    return out


def output_tools_of(run_id: str, rows: list[CallRow]) -> list[ToolOutput[Any]] | None:
    """The output spec that ends a rebuild on the run's recorded output-tool call, or None.

    One `ToolOutput` per output tool the last recorded response called, taking any object
    of arguments (the recorded ones); None when the last response called none.

    Raises:
        MessagesUnavailableError: An earlier response called one too (the run retried its
            output: only its own output type rebuilds that).
    """
    calls = _output_calls(rows)
    if not calls or not calls[-1]:
        return None  # the run did not end on an output tool
    if any(calls[:-1]):
        names = sorted({name for names in calls for name in names})
        raise MessagesUnavailableError(
            f"run {run_id!r} called its output tool {names!r} before its last response: give "
            f"output_type=... (the type run {run_id!r} used) to rebuild its messages"
        )
    return [ToolOutput(_Recorded, name=name) for name in dict.fromkeys(calls[-1])]


class LogReader:
    """The context a `RunJournal` uses during a read-only replay: answers come from `rows`.

    Args:
        workflow_id: The run.
        rows: The run's call and wait rows (``store.calls(run_id)``).
    """

    def __init__(self, workflow_id: str, rows: list[CallRow]) -> None:
        self.workflow_id = workflow_id
        self._rows = {row.key: row for row in rows}

    async def call(
        self,
        job: Job,
        *,
        label: Mapping[str, Any] | None = None,
        usage: Mapping[str, Any] | Callable[[Any], Mapping[str, Any] | None] | None = None,
    ) -> Any:
        """Return the recorded output of `job`'s key (a `ModelRetry` raised again).

        Raises:
            ModelRetry: The call recorded a `ModelRetry` (pydantic-ai turned it into a retry
                prompt to the model, as it does again now).
            NotInLog: The key has no completed outcome.
        """
        row = self._rows.get(job.key)
        if row is not None and row.state is CallState.COMPLETED:
            return row.output
        error = None if row is None else row.error
        if error is not None and error.type.rsplit(".", 1)[-1] == "ModelRetry":
            raise ModelRetry(error.message)
        problem = f"run {self.workflow_id!r}: the log has no outcome of {job.key!r}"
        if row is None and job.key.startswith("model:"):
            problem += ("; the rebuild took another path than the run: give the output_type, "
                        "toolsets or Model object the run was given")
        raise NotInLog(problem)

    async def wait_for_input(
        self,
        key: str,
        reason: object,
        *,
        details: Mapping[str, Any] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (StepContext's signature)
    ) -> Any:
        """Return the recorded answer of the wait `key`.

        Raises:
            NotInLog: The wait was not answered.
        """
        row = self._rows.get(key)
        if row is not None and row.state is CallState.ANSWERED:
            return row.output
        raise NotInLog(f"run {self.workflow_id!r}: the log has no answer to {key!r}")
