"""The durable call of another run that code runs in: a sub-agent's parent (`ParentCall`).

Each tool call and other durable operation of an agent run runs its body with its
`ParentCall` current (`PARENT`): a `DurableAgent` run made there is a child run of that run
(see `_nested`). Its id, when none is given, is derived from the call: ``<parent
id>/<call key>`` for the first run the call makes, ``<parent id>/<call key>#<n>`` for the
n-th after it (counted again from 0 each time the call's body runs, so a call run again
after a crash makes the same ids and joins the same children). A child cancelled with its
parent gives the call no answer (`ChildCancelledWithParent`); once the parent is retried,
its call runs again and retries the child.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from agentq.errors import AgentqError, ChildFailed, EngineError
from agentq.literal import visible
from agentq.store import closed_with_parent
from agentq.workflows import RunStatus, StepContext, WorkflowDef, WorkflowEngine

__all__ = ["PARENT", "ChildCancelledWithParent", "ParentCall", "in_call", "run_child"]


class ChildCancelledWithParent(AgentqError):
    """A sub-agent's child run was cancelled because its parent run was (a cancel, or the
    parent's deadline, goes down to its open children), so it has no answer for the parent.

    Raised by the sub-agent's `DurableAgent.run` inside the parent's tool call (or other
    durable operation) when the parent is closed: the call is recorded failed, not
    completed with an empty output, so a `retry` of the parent runs the call again, and
    that run retries the child (docs/agents.md, "Sub-agents").

    Attributes:
        run_id: The child run's id (``<parent id>/<key>``).
        status: The child run's status (``"cancelled"``).
        reason: Why it was cancelled, as its workflow records it.
    """

    __module__ = "agentq.integrations.pydantic_ai"  # its public path, as errors are shown
    retryable = False  # agentq.retry.classify: final (the parent is closed)

    def __init__(self, run_id: str, status: str, reason: str | None) -> None:
        super().__init__(
            f"child run {run_id!r} is {status} ({visible(reason or 'no reason given')}): it has no "
            "answer for its parent's call; retry the parent to run the call and the child again"
        )
        self.run_id = run_id
        self.status = status
        self.reason = reason


class _Run(Protocol):
    @property
    def status(self) -> RunStatus: ...

    @property
    def reason(self) -> str | None: ...


R = TypeVar("R", bound=_Run)


@dataclass(slots=True)
class ParentCall:
    """A durable call of an agent run, as the sub-agent runs it makes see it.

    Attributes:
        ctx: The parent run's step context (its attempt).
        key: The call's key in the parent's log (``tool:0.1:c7``).
    """

    ctx: StepContext
    key: str
    _made: int = field(default=0, repr=False)

    @property
    def run_id(self) -> str:
        """The parent run's id."""
        return self.ctx.workflow_id

    def child_key(self, run_id: str | None) -> str | None:
        """The child key of a sub-agent run given `run_id` (None: derived from the call).

        Returns:
            The key (the part of the child's id after ``<parent id>/``), or None when
            `run_id` is given and names no child of this run (it is then a run of its own).
        """
        if run_id is not None:
            parent, sep, key = run_id.rpartition("/")
            return key if sep and parent == self.run_id and key else None
        n, self._made = self._made, self._made + 1
        base = self.key.replace("/", "_")
        return base if n == 0 else f"{base}#{n}"


PARENT: ContextVar[ParentCall | None] = ContextVar("agentq_pydantic_ai_parent", default=None)
"""The durable call of an agent run whose body runs in this task, if any."""


def in_call(
    ctx: object, key: str, body: Callable[[], Awaitable[object]]
) -> Callable[[], Awaitable[object]]:
    """`body` of the durable call `key` of the run of `ctx`, run with its `ParentCall`
    (unchanged when `ctx` is not a step's: the read-only rebuild runs no body)."""
    if not isinstance(ctx, StepContext):
        return body

    async def run() -> object:
        token = PARENT.set(ParentCall(ctx, key))
        try:
            return await body()
        finally:
            PARENT.reset(token)

    return run


async def run_child(
    parent: ParentCall,
    key: str,
    definition: WorkflowDef,
    engine: WorkflowEngine,
    run_input: Awaitable[dict[str, Any]],
    give: Callable[[], object],
    complete: Callable[[], Awaitable[R]],
) -> R:
    """A run made inside the durable call `parent` of another run: its child run `key`.

    The call awaits the child while it runs (holding the parent's lease); while the child
    waits (an approval), the parent's step waits on it, holding none, and the call runs
    again once the child ended. A child that failed, or was cancelled on its own, is the
    result. A child cancelled because the parent was (`closed_with_parent`) is retried when
    the parent runs again (a retry of the parent ran the call again); while the parent is
    closed it is no result.

    Args:
        parent: The call the run is made in.
        key: The child's key (`ParentCall.child_key`).
        definition: The agent's `WorkflowDef`.
        engine: The engine the agent runs on.
        run_input: The child run's stored input, still to be made.
        give: Keeps the run's deps and options in this process.
        complete: Runs (or reads) the child run to where it stops: its result.

    Returns:
        The child run's result once it has ended (never a run that still waits).

    Raises:
        ChildCancelledWithParent: The child was cancelled with its parent, which is closed.
        EngineError: The parent's wait on the child was answered while the child still
            waits (the store refuses such a resume, so this is a broken log, not a use).
    """
    stored = await run_input
    child_id = await parent.ctx.start_child(definition, stored, key=key)
    give()
    run = await complete()
    if _with_parent(child_id, run):
        row = await engine.store.get_workflow(parent.run_id)
        if row is not None and not row.state.closed:  # the parent was retried since
            await engine.retry(child_id)
            await parent.ctx.start_child(definition, stored, key=key)  # re-opens its row
            run = await complete()
        if _with_parent(child_id, run):
            raise ChildCancelledWithParent(child_id, str(run.status), run.reason)
    if run.status is RunStatus.WAITING:
        # Parks the parent's step; a child that failed is reported as its own run reports it.
        with suppress(ChildFailed):
            await parent.ctx.child(definition, stored, key=key)
        run = await complete()  # it ended meanwhile
        if run.status is RunStatus.WAITING:  # never a waiting run as the tool's result
            raise EngineError(
                f"child run {parent.run_id}/{key} still waits, yet its parent's wait on it "
                "was answered; answer the child run"
            )
    return run


def _with_parent(child_id: str, run: _Run) -> bool:
    """Whether `run` (child run `child_id`) was cancelled because its parent was."""
    return run.status is RunStatus.CANCELLED and closed_with_parent(child_id, run.reason)
