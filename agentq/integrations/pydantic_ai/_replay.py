"""A completed run's messages, rebuilt from its log (they are not stored with its result).

A run's result keeps only the agent's output and usage: the message list grows with every
tool return and would go over the store's per-value limit (1 MiB of JSON) on a run whose every
call fitted, failing the run after all its side effects. Its messages are rebuilt on demand
by running the agent once more against the log, read-only: `LogReader` stands in for the
step's context, answering each model request, tool call and wait from its recorded row; it
never runs anything. An operation the log does not hold (a failed call, a wait never
answered) raises `NotInLog`, a `MessagesUnavailableError`; a run that did not complete is
refused before any rebuild (`check_completed`), naming its state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic_ai.exceptions import ModelRetry

from agentq.errors import AgentqError
from agentq.queue import Job
from agentq.store import CallRow, CallState, WorkflowState

__all__ = ["LogReader", "MessagesUnavailableError", "NotInLog", "check_completed"]


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
        raise NotInLog(f"run {self.workflow_id!r}: the log has no outcome of {job.key!r}")

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
