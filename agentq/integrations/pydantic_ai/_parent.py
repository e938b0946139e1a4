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
from contextvars import ContextVar
from dataclasses import dataclass, field

from agentq.workflows import StepContext

__all__ = ["PARENT", "ParentCall", "in_call"]


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
