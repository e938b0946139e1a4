"""Child runs inside a step: what `ctx.child` and `ctx.children` do (`ChildRunner`).

A child run is an instance of a `WorkflowDef` whose id is ``<parent id>/<key>``. The parent's
attempt starts it once (`DurableStore.start_child`: the child and the parent's wait row
``child:<key>`` in one transaction) and then parks its step on that wait, holding no lease;
the engine runs the child (`Spawner.spawn`: this engine if it holds the definition, else
whichever engine serves it). The transaction that ends the child answers the parent's wait
with its outcome, so the parent's step runs again, its completed calls and children answer
from the log, and the same `ctx.child` returns the child's output (or raises `ChildFailed`).

A replay (after a resume, a retry, a crash, in any process) finds the wait row and joins the
same child; it never starts a second one.

`children` fans out: it starts the children in input order, at most `limit` open at once,
and parks on the first one (in input order) that has not ended; each end wakes the step
again, which starts the next ones. The first failed or cancelled child (in input order,
among those whose outcome the step has read) raises `ChildFailed`: no further child is
started, and the children still running go on (cancel the parent to stop them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn, Protocol

from agentq.clock import Clock
from agentq.errors import ChildFailed, KeyConflictError, UnknownWorkflowError
from agentq.store import (
    CHILD_WAIT_PREFIX,
    CallRow,
    CallState,
    ChildStart,
    DurableStore,
    Execution,
    StepRow,
    StepState,
    child_of,
    child_workflow_id,
)
from agentq.workflows.model import WorkflowDef
from agentq.workflows.recorder import Definition

__all__ = ["ChildRunner", "Spawner", "waited_child"]


class Spawner(Protocol):
    """What a `ChildRunner` needs from its engine."""

    def definition(self, name: str) -> WorkflowDef | None:
        """The definition registered under `name`, or None."""
        ...

    def spawn(self, parent_id: str, child_id: str, definition: WorkflowDef) -> None:
        """Run the open child `child_id` in the background, if this engine can."""
        ...


class ChildRunner:
    """The child runs of one step attempt (see the module docstring).

    Args:
        store: The workflow's store.
        clock: Time for the records.
        workflow_id: The parent workflow.
        execution: The attempt's current `Execution`.
        rows: Returns the attempt's call rows by key (read once, kept up to date).
        park: Parks the step on a keyed wait (reason, key, details); never returns.
        spawner: The engine's side, or None (children are then run by serving engines).

    Runs on the engine's event loop, from the step body's task.
    """

    def __init__(
        self,
        *,
        store: DurableStore,
        clock: Clock,
        workflow_id: str,
        execution: Callable[[], Execution],
        rows: Callable[[], Awaitable[dict[str, CallRow]]],
        park: Callable[[str, str, dict[str, Any]], NoReturn],
        spawner: Spawner | None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._workflow_id = workflow_id
        self._execution = execution
        self._rows = rows
        self._park = park
        self._spawner = spawner

    def _definition(self, definition: Definition | str) -> WorkflowDef:
        if isinstance(definition, WorkflowDef):
            return definition
        if isinstance(definition, str):
            found = None if self._spawner is None else self._spawner.definition(definition)
            if found is None:
                raise UnknownWorkflowError(
                    f"ctx.child: no definition named {definition!r} is registered with this "
                    "engine; pass the WorkflowDef itself or register it first"
                )
            return found
        raise TypeError(f"ctx.child expects a WorkflowDef or its name, got {definition!r:.80}")

    async def child(self, definition: Definition | str, input: Any, key: str) -> Any:
        """Start (once) child run `key` and return its output; see `StepContext.child`."""
        found = self._definition(definition)
        child_id = child_workflow_id(self._workflow_id, key)
        rows = await self._rows()
        row = self._check(rows.get(CHILD_WAIT_PREFIX + key), child_id)
        if row is not None and row.state is CallState.ANSWERED:
            return _output(key, row.output)
        start = await self._start(found, key, input, rows)
        if start.wait.state is CallState.ANSWERED:  # it ended while a call awaited it
            return _output(key, start.wait.output)
        self._wait(found, child_id, start)

    async def start(self, definition: Definition | str, input: Any, key: str) -> str:
        """Start (once) child run `key` without waiting for it; its id. See
        `StepContext.start_child`. Always goes to the store, a row this attempt read answered
        included: its caller reads the child itself, not the recorded answer, so if the child
        was retried since (its outcome is no longer the row's), the store re-opens the row
        (this attempt joins the child again, and the child's next end answers it)."""
        found = self._definition(definition)
        child_id = child_workflow_id(self._workflow_id, key)
        rows = await self._rows()
        self._check(rows.get(CHILD_WAIT_PREFIX + key), child_id)
        await self._start(found, key, input, rows)  # stored once; run unless it ended
        return child_id

    async def children(
        self, definition: Definition | str, inputs: Mapping[str, Any], limit: int | None
    ) -> dict[str, Any]:
        """Fan out over `inputs`; see `StepContext.children`."""
        found = self._definition(definition)
        if not isinstance(inputs, Mapping):
            raise TypeError(f"ctx.children expects a mapping of key to input, got {inputs!r:.80}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise ValueError(f"ctx.children: limit must be a positive int or None, got {limit!r}")
        ids = {key: child_workflow_id(self._workflow_id, key) for key in inputs}
        rows = await self._rows()
        outputs: dict[str, Any] = {}
        waiting_on: tuple[str, ChildStart] | None = None
        running = 0
        pending: list[str] = []
        for key, child_id in ids.items():
            row = self._check(rows.get(CHILD_WAIT_PREFIX + key), child_id)
            if row is None:
                pending.append(key)
            elif row.state is CallState.ANSWERED:
                outputs[key] = _output(key, row.output)  # raises on the first failure
            else:
                start = await self._start(found, key, inputs[key], rows)
                if start.wait.state is CallState.ANSWERED:  # ended while a call awaited it
                    outputs[key] = _output(key, start.wait.output)
                    continue
                if start.outcome is not None:  # ended, not read yet: read it now
                    self._wait(found, child_id, start)
                running += 1
                waiting_on = waiting_on or (child_id, start)
        for key in pending:
            if limit is not None and running >= limit:
                break
            start = await self._start(found, key, inputs[key], rows)
            running += 1
            waiting_on = waiting_on or (ids[key], start)
        if waiting_on is None:
            return {key: outputs[key] for key in inputs}
        self._wait(found, *waiting_on)

    def _check(self, row: CallRow | None, child_id: str) -> CallRow | None:
        if row is not None and child_of(row) != child_id:
            raise KeyConflictError(
                f"key {row.key!r} of workflow {self._workflow_id!r} is recorded for another "
                f"wait, not for child run {child_id!r}: use another child key"
            )
        return row

    async def _start(
        self, definition: WorkflowDef, key: str, input: Any, rows: dict[str, CallRow]
    ) -> ChildStart:
        start = await self._store.start_child(
            self._execution(),
            key,
            definition=definition.name,
            step_names=definition.step_names,
            input=input,
            now=self._clock.time(),
        )
        rows[start.wait.key] = start.wait
        if start.outcome is None and self._spawner is not None:
            self._spawner.spawn(self._workflow_id, start.child.workflow_id, definition)
        return start

    def _wait(self, definition: WorkflowDef, child_id: str, start: ChildStart) -> NoReturn:
        """Park the step on the child's wait (answered at once if it ended already)."""
        reason = start.wait.reason or ""
        self._park(reason, start.wait.key, {"child": child_id, "definition": definition.name})


def waited_child(step: StepRow) -> str | bool | None:
    """What a run that ended waiting finds in its step's row: the id of the child run the
    step waits on; True if a child's end has answered the step's wait already (it is
    pending again, its resume input a child's outcome); None otherwise."""
    answer = step.resume_input
    if (
        step.state is StepState.PENDING
        and isinstance(answer, dict)
        and str(answer.get("child", "")).startswith(step.workflow_id + "/")
    ):
        return True
    if (
        step.state is not StepState.WAITING
        or step.wait_key is None
        or not step.wait_key.startswith(CHILD_WAIT_PREFIX)
    ):
        return None
    child = (step.wait_details or {}).get("child")
    return child if isinstance(child, str) else None


def _output(key: str, outcome: Any) -> Any:
    """The output a child's recorded outcome holds, or raise `ChildFailed`."""
    if not isinstance(outcome, dict):  # pragma: no cover - written only by the store rules
        raise ChildFailed("?", key, "failed", f"unreadable outcome {outcome!r:.80}")
    if outcome.get("state") == "completed":
        return outcome.get("output")
    raise ChildFailed(
        str(outcome.get("child")), key, str(outcome.get("state")), outcome.get("reason")
    )
