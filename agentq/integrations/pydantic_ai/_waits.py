"""`EventWaiter`: pydantic-ai's external-event waits (``RequestInput``,
``wait_for_external_event``) inside an agent run, as agentq durable waits.

The wait is asked once through a durable call (``event:<name>:<n>:ask``, pydantic-ai's
``ask(token)``), then waits in ``ctx.wait_for_input`` under ``event:<name>:<n>``; its token is
``<run_id>/<wait key>``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial

from pydantic import JsonValue, TypeAdapter, ValidationError
from pydantic_ai import DeferredToolResults
from pydantic_ai.durable_exec import ExternalEventError, ExternalEventWaiter

from agentq.errors import InputTimeout
from agentq.integrations.pydantic_ai._journal import RunJournal
from agentq.queue import Job, Priority

__all__ = ["EventWaiter"]


class EventWaiter(ExternalEventWaiter):
    """`wait_for_external_event` inside an agent run, as an agentq durable wait.

    The payload of a ``RequestInput`` wait (a name in `checked`) must be the JSON form of
    ``DeferredToolResults``; another payload is recorded and asked again under
    ``event:<name>:<n>#<asked>``, its reason saying what was wrong (as a mistyped approval).
    """

    def __init__(
        self, journal: RunJournal, priority: Priority, checked: frozenset[str] = frozenset()
    ) -> None:
        self._journal = journal
        self._priority = priority
        self._checked = checked

    async def wait(
        self,
        name: str,
        *,
        ask: Callable[[str], Awaitable[JsonValue]],
        timeout: timedelta | None,  # noqa: ASYNC109 (pydantic-ai's signature)
    ) -> JsonValue:
        journal = self._journal
        op = journal.event(name)
        token = f"{journal.ctx.workflow_id}/{op.key}"
        ask_job = Job(
            f"{op.key}:ask", partial(ask, token), self._priority, fingerprint=("ask", name)
        )
        answer = await journal.ctx.call(ask_job, label={"kind": "ask", "event": name})
        if answer is not None:
            return answer  # type: ignore[no-any-return]
        details = {"event": name, "token": token, "agent": journal.agent_name}
        seconds = None if timeout is None else timeout.total_seconds()
        key, problem, asked = op.key, "", 1
        try:
            while True:
                reason = (
                    f"{problem}{'; ' if problem else ''}external event {name}: answer with "
                    f"engine.resume(run_id, 'agent', payload, key={key!r})"
                )
                answer = await journal.ctx.wait_for_input(
                    key, reason, details=details, timeout=seconds
                )
                problem = _payload_problem(answer) if name in self._checked else ""
                if not problem:
                    return answer  # type: ignore[no-any-return]
                key = journal.event_again(op, asked).key
                asked += 1
        except InputTimeout as exc:
            raise ExternalEventError(f"no input arrived for {key} within {timeout}") from exc


_RESULTS: TypeAdapter[DeferredToolResults] = TypeAdapter(DeferredToolResults)


def _payload_problem(payload: object) -> str:
    """What is wrong with a ``RequestInput`` payload (not a ``DeferredToolResults``), or ""."""
    try:
        _RESULTS.validate_python(payload)
    except ValidationError as exc:
        n = exc.error_count()
        return f"the payload {payload!r:.80} is not a DeferredToolResults ({n} errors)"
    return ""
