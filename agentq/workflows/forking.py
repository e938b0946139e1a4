"""`Forks`: the engine's `fork` verb, a new workflow whose history up to a point is another's.

The fork is written by one store verb (`DurableStore.fork_workflow`, one transaction: the
parent's history before the fork point copied into the fork's own log), then run like any
workflow: every copied call and wait answers from the fork's log, the rest runs live.

`WorkflowEngine` (``engine.py``) derives from this class, as this class derives from
`Interventions`; private to `agentq.workflows.engine`, the verb is documented as
`WorkflowEngine`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentq.errors import UnknownWorkflowError, WorkflowMismatchError
from agentq.keys import validate_key
from agentq.store import WorkflowRow
from agentq.workflows.interventions import Interventions
from agentq.workflows.model import RunResult, Workflow
from agentq.workflows.registry import instance_of

__all__ = ["ForkPoint", "Forks", "fork_point"]

ForkPoint = str | int | tuple[str | int, str]
"""Where a fork runs live from: a step (name or 0-based index) or a call, ``(step, key)``."""


def fork_point(workflow_id: str, names: tuple[str, ...], at: object) -> tuple[int, str | None]:
    """``(step index, call key or None)`` of `at` among the step `names`.

    Raises:
        ValueError: `at` names no step of the workflow (the message lists them), or is not
            a step or a ``(step, key)`` pair.
    """
    key: str | None = None
    step = at
    if isinstance(at, tuple):
        if len(at) != 2 or not isinstance(at[1], str):
            raise ValueError(
                f"fork of workflow {workflow_id!r}: at must be a step (name or index) or a "
                f"(step, call_key) pair, got {at!r:.200}"
            )
        step, key = at
    if isinstance(step, int) and not isinstance(step, bool) and 0 <= step < len(names):
        return step, key
    if isinstance(step, str) and step in names:
        return names.index(step), key
    raise ValueError(
        f"fork of workflow {workflow_id!r}: at names step {step!r}, which is not one of its "
        f"steps {list(names)!r}"
    )


class Forks(Interventions):
    """The `fork` verb (see `WorkflowEngine.fork`)."""

    async def fork(
        self,
        workflow_id: str | Workflow,
        new_workflow_id: str,
        *,
        at: ForkPoint,
        replace: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Fork a workflow at a step or a call, and run the fork.

        The fork is a new workflow with the parent's steps (the same definition) and input.
        Every durable call and wait the parent recorded before `at` answers from the
        parent's recorded outcome, copied into the fork's own log (marked
        ``forked_from``), so the fork stands alone even if the parent is later swept or
        retried; the steps before `at`'s step are completed with their recorded outputs
        and never run; from `at` on it runs live. The log records ``WorkflowForked``
        (parent, at). The parent is never changed. A fork of a fork works the same.

        Written in one store transaction: a crash leaves no half fork. After a crash
        during the fork's run, it continues like any workflow (``run(new_workflow_id)``,
        `agentq.recover`); a second `fork` with the same new id is refused.

        Args:
            workflow_id: The parent: the id of a stored instance of a `WorkflowDef`
                registered with this engine, or of a plain workflow registered here, or the
                plain `Workflow` itself (its steps are the fork's).
            new_workflow_id: The fork's id (must not exist).
            at: Where the fork runs live from: a step (name or 0-based index, as `resume`
                takes it; the whole step runs again) or a call, ``(step, call_key)`` (the
                step runs again: its calls and waits recorded before that key answer from
                the copies, that call and the ones after it run live).
            replace: ``{call_key: output}``: the recorded output of a call (or the answer
                of a wait) of `at`'s step, at or before `at`, replaced: the fork answers
                it with this JSON value. Replacing the call at `at` itself makes the fork
                continue after it with the edited value.

        Returns:
            The fork's `RunResult`.

        Raises:
            UnknownWorkflowError: The parent is not stored, or its definition (or plain
                workflow) is not registered with this engine.
            WorkflowMismatchError: `new_workflow_id` exists, or the `Workflow` given has
                other steps than the stored parent; nothing is written.
            ValueError: `at` names no step, or no call or wait of its step; a step before it
                did not complete; a `replace` key is not at or before `at` (the message
                names it). Nothing is written.
            PayloadError: A `replace` value is not JSON or too large; nothing is written.

        Example:
            >>> await engine.fork("order-42", "order-42-b", at=("charge", "price"),
            ...                   replace={"price": 9.5})
        """
        plain = workflow_id if isinstance(workflow_id, Workflow) else None
        parent_id = validate_key(plain.id if plain else workflow_id, "workflow id")
        new_id = validate_key(new_workflow_id, "new workflow id")
        row = await self.store.get_workflow(parent_id)
        if row is None:
            raise UnknownWorkflowError(f"cannot fork workflow {parent_id!r}: it is not stored")
        fork = self._fork_of(row, new_id, plain)
        index, key = fork_point(parent_id, row.step_names, at)
        await self.store.fork_workflow(
            parent_id, new_id, step=index, key=key, replace=replace, now=self.clock.time()
        )
        return await self._runs.join(self._registry.lookup(fork))

    def _fork_of(self, row: WorkflowRow, new_id: str, plain: Workflow | None) -> Workflow:
        """The `Workflow` the fork of `row` runs as: its definition's instance, or the plain
        workflow's steps under the new id."""
        if row.definition is not None:
            definition = self._registry.definition(row.definition)
            if definition is None:
                raise UnknownWorkflowError(
                    f"cannot fork workflow {row.workflow_id!r}: its definition "
                    f"{row.definition!r} is not registered with this engine (register it "
                    "first: the fork runs its steps)"
                )
            instance_of(definition, row)  # raises if the step names differ
            return definition.workflow(new_id, row.input)
        plain = plain or self._registry.get(row.workflow_id)
        if plain is None:
            raise UnknownWorkflowError(
                f"cannot fork workflow {row.workflow_id!r}: it is a plain workflow not "
                "registered with this engine; pass the Workflow itself (or make it from a "
                "WorkflowDef, which any engine can fork)"
            )
        if plain.step_names != row.step_names:
            raise WorkflowMismatchError(
                f"cannot fork workflow {row.workflow_id!r}: it is stored with steps "
                f"{list(row.step_names)!r}, not {list(plain.step_names)!r}"
            )
        return Workflow(new_id, plain.steps, row.input)
