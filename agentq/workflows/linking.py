"""`ChildLinks`: the engine's side of child runs (``ctx.child``).

It runs the children that this engine's step attempts start, as background runs
(`ChildLinks.spawn`, when this engine holds the definition: given as a `WorkflowDef`, it is
registered on the way unless a definition of that name is registered); it lets a run whose
step waits on a child join that child's run here (`ChildLinks.join`), so ``engine.run(parent)``
goes on to the parent's end; and when a child it spawned ends later (say, after its own
wait was resumed), it continues the parent in the background (`ChildLinks.ended`). The store
answers the parent's wait in the transaction that ends the child, so none of this is needed
for correctness after a crash: `recover` and `serve` continue parents from the store.

Private to `agentq.workflows.engine`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from agentq.errors import AgentqError
from agentq.store import WorkflowRow, parent_of
from agentq.workflows.attempts import IN_STEP
from agentq.workflows.model import RunResult, RunStatus, Workflow, WorkflowDef
from agentq.workflows.registry import Registry
from agentq.workflows.runs import Runs

__all__ = ["ChildLinks"]

_ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class ChildLinks:
    """Child runs for one engine (implements `agentq.workflows.children.Spawner`).

    Args:
        registry: The engine's registrations.
        runs: The engine's runs.
        instance: Builds the `Workflow` of a stored instance by id (raises if not runnable),
            or gives the stored result of one that has ended.
        run: The engine's `run` by id.
    """

    def __init__(
        self,
        registry: Registry,
        runs: Runs,
        instance: Callable[[str], Awaitable[tuple[Workflow, WorkflowRow | None] | RunResult]],
        run: Callable[[str], Awaitable[RunResult]],
    ) -> None:
        self._registry = registry
        self._runs = runs
        self._instance = instance
        self._run = run
        self._parents: dict[str, str] = {}  # child id -> parent id, for the children spawned

    def definition(self, name: str) -> WorkflowDef | None:
        """The definition registered under `name`, or None."""
        return self._registry.definition(name)

    def spawn(self, parent_id: str, child_id: str, definition: WorkflowDef) -> None:
        """Run the open child `child_id` here, in the background (no-op if it runs already)."""
        if self._registry.definition(definition.name) is None:
            self._registry.define(definition)
        self._parents[child_id] = parent_id
        token = IN_STEP.set(None)  # not nested in the parent's body, which parks: the
        try:  # child's run waits for a claim slot as any run (`admission`)
            self._runs.start_soon_by(child_id, lambda: self._instance(child_id))
        finally:
            IN_STEP.reset(token)

    async def join(self, child_id: str) -> bool:
        """Join (or start) the run of `child_id` here; True once it has ended.

        False if it cannot run here (its definition is not registered) or it waits.
        """
        try:
            result = await self._run(child_id)
        except AgentqError:
            return False
        return result.status in _ENDED

    def ended(self, workflow_id: str, task: asyncio.Task[RunResult]) -> None:
        """A run ended: if it was a child spawned here and it ended, continue its parent."""
        if task.cancelled() or task.exception() is not None:
            return
        if task.result().status not in _ENDED:
            return
        parent_id = self._parents.pop(workflow_id, None)
        if parent_id is None or parent_of(workflow_id) is None or self._runs.busy(parent_id):
            return
        self._runs.start_soon_by(parent_id, lambda: self._instance(parent_id))

    def sizes(self) -> dict[str, int]:
        """Entries held (for tests and leaks)."""
        return {"children": len(self._parents)}
