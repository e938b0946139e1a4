"""The durable call of another run that code runs in: a sub-agent's parent (`ParentCall`).

Each tool call and other durable operation of an agent run runs its body with its
`ParentCall` current (`PARENT`): a `DurableAgent` run made there is a child run of that run
(see `_nested`). Its id, when none is given, is derived from the call: ``<parent
id>/<call key>`` for the first run the call makes, ``<parent id>/<call key>#<n>`` for the
n-th after it (counted again from 0 each time the call's body runs, so a call run again
after a crash makes the same ids and joins the same children).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from agentq.errors import ChildFailed, EngineError
from agentq.workflows import RunStatus, StepContext, WorkflowDef

__all__ = ["PARENT", "ParentCall", "in_call", "run_child"]


class _Run(Protocol):
    @property
    def status(self) -> RunStatus: ...


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
    run_input: Awaitable[dict[str, Any]],
    give: Callable[[], object],
    complete: Callable[[], Awaitable[R]],
) -> R:
    """A run made inside the durable call `parent` of another run: its child run `key`.

    The call awaits the child while it runs (holding the parent's lease); while the child
    waits (an approval), the parent's step waits on it, holding none, and the call runs
    again once the child ended.

    Args:
        parent: The call the run is made in.
        key: The child's key (`ParentCall.child_key`).
        definition: The agent's `WorkflowDef`.
        run_input: The child run's stored input, still to be made.
        give: Keeps the run's deps and options in this process.
        complete: Runs (or reads) the child run to where it stops: its result.

    Returns:
        The child run's result once it has ended (never a run that still waits).

    Raises:
        EngineError: The parent's wait on the child was answered while the child still
            waits (the store refuses such a resume, so this is a broken log, not a use).
    """
    stored = await run_input
    await parent.ctx.start_child(definition, stored, key=key)
    give()
    run = await complete()
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
