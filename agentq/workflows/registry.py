"""`Registry`: what an engine can run: plain workflows by id, definitions by name.

Step bodies are code, not data: `resume` and `recover` can continue a workflow only if this
engine knows its step functions. Two ways:

- a plain `Workflow`, registered by id (``register_workflow``, or passed to ``run``): tied to
  this engine. Registering an id again replaces the bodies (a notebook cell run twice) but
  never the step names or the input: a workflow id names one run. The engine removes such a
  registration once its run has ended (completed, failed or cancelled), so that a long-lived
  engine does not keep every workflow it ever ran;
- a `WorkflowDef`, registered by name (``register``): every stored instance whose
  `WorkflowRow.definition` has that name is built from it when it is needed (`instance_of`),
  with the stored input, in any process. Registering a name again replaces the definition;
  stored instances whose step names differ from the new one are refused when they are run
  (`WorkflowMismatchError`). Instances are never kept here, so a re-registered definition's
  new bodies serve the next step of every instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.codec import decode, encode
from agentq.difference import first_difference
from agentq.errors import (
    PayloadError,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowMismatchError,
)
from agentq.store import WorkflowRow
from agentq.workflows.model import Workflow, WorkflowDef

__all__ = ["Registry", "instance_of", "step_index"]


def _same_json(a: Any, b: Any) -> bool:
    """Whether two workflow inputs are the same value once stored (as the store compares)."""
    try:
        return bool(decode(encode(a, "input")) == decode(encode(b, "input")))
    except PayloadError:
        return bool(a == b)  # the store refuses such an input anyway


def instance_of(definition: WorkflowDef, row: WorkflowRow) -> Workflow:
    """The `Workflow` of the stored instance `row`, with `definition`'s step bodies.

    Raises:
        WorkflowMismatchError: The stored step names differ from the definition's (the
            message names both); nothing is changed.
    """
    if row.step_names != definition.step_names:
        raise WorkflowMismatchError(
            f"workflow {row.workflow_id!r} was started from definition {definition.name!r} "
            f"with steps {list(row.step_names)}, but the definition registered with this "
            f"engine has steps {list(definition.step_names)}; register the definition it "
            "was started with to run it (nothing was changed)"
        )
    return definition.workflow(row.workflow_id, row.input)


class Registry:
    """The registered plain workflows (by id) and definitions (by name) of one engine."""

    def __init__(self) -> None:
        self._workflows: dict[str, Workflow] = {}
        self._definitions: dict[str, WorkflowDef] = {}
        self._ending: dict[str, None] = {}  # names of the definitions that have an on_end

    # ------------------------------------------------------------ plain workflows

    def add(self, workflow: Workflow) -> None:
        """Register `workflow`, replacing the bodies of one with the same id.

        An instance of a definition registered here (same name, same step names) is not
        kept: the definition serves it.

        Raises:
            TypeError: `workflow` is not a `Workflow`.
            WorkflowMismatchError: The id is registered with different step names, another
                input or another definition (nothing is replaced).
        """
        if not isinstance(workflow, Workflow):
            raise TypeError(f"expected a Workflow, got {workflow!r:.80}")
        known = self._workflows.get(workflow.id)
        if known is not None and known.step_names != workflow.step_names:
            raise WorkflowMismatchError(
                f"workflow {workflow.id!r} is registered with steps {list(known.step_names)}, "
                f"not {list(workflow.step_names)}"
            )
        if known is not None and not _same_json(known.input, workflow.input):
            raise WorkflowMismatchError(
                f"workflow {workflow.id!r} is registered with another input (registered vs "
                f"given: {first_difference(known.input, workflow.input, 'input')}); a workflow "
                "id names one run: use a new id for new input"
            )
        if known is not None and known.definition != workflow.definition:
            raise WorkflowMismatchError(
                f"workflow {workflow.id!r} is registered with definition "
                f"{known.definition!r}, not {workflow.definition!r}"
            )
        served = self._definitions.get(workflow.definition or "")
        if served is not None and served.step_names == workflow.step_names:
            return
        self._workflows[workflow.id] = workflow

    def remove(self, workflow_id: str) -> bool:
        """Forget the workflow registered under `workflow_id`; whether there was one."""
        return self._workflows.pop(workflow_id, None) is not None

    def __len__(self) -> int:
        return len(self._workflows)

    def get(self, workflow_id: str) -> Workflow | None:
        """Return the plain workflow registered with this id, or None."""
        return self._workflows.get(workflow_id)

    @property
    def ids(self) -> tuple[str, ...]:
        """Ids of the registered plain workflows, in registration order."""
        return tuple(self._workflows)

    def lookup(self, workflow: Workflow | str) -> Workflow:
        """Return the workflow to run: a `Workflow` (registered on the way) or a known id's.

        Raises:
            UnknownWorkflowError: An id that is not registered.
            WorkflowMismatchError: See `add`.
        """
        if isinstance(workflow, Workflow):
            self.add(workflow)
            return workflow
        found = self._workflows.get(workflow)
        if found is None:
            raise UnknownWorkflowError(
                f"workflow {workflow!r} is not registered with this engine; pass the Workflow "
                "or call register_workflow() first"
            )
        return found

    # ------------------------------------------------------------ definitions

    def define(self, definition: WorkflowDef) -> None:
        """Register `definition` under its name, replacing one registered before.

        Raises:
            TypeError: `definition` is not a `WorkflowDef`.
        """
        if not isinstance(definition, WorkflowDef):
            raise TypeError(f"register() expects a WorkflowDef, got {definition!r:.80}")
        self._definitions[definition.name] = definition
        if definition.on_end is None:
            self._ending.pop(definition.name, None)
        else:
            self._ending.setdefault(definition.name, None)

    def undefine(self, name: str) -> bool:
        """Forget the definition registered under `name`; whether there was one."""
        self._ending.pop(name, None)
        return self._definitions.pop(name, None) is not None

    def definition(self, name: str) -> WorkflowDef | None:
        """Return the definition registered under `name`, or None."""
        return self._definitions.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the registered definitions, in registration order."""
        return tuple(self._definitions)

    @property
    def ending(self) -> tuple[str, ...]:
        """Names of the registered definitions that have an ``on_end`` (kept as they are
        registered: no scan of every definition)."""
        return tuple(self._ending)

    @property
    def served(self) -> dict[str, tuple[str, ...]]:
        """The registered definitions' step names by name, as `ready_workflows` takes them."""
        return {name: d.step_names for name, d in self._definitions.items()}

    def resolve(self, workflow_id: str, row: WorkflowRow | None) -> Workflow:
        """Return the workflow to run for `workflow_id`, stored as `row` (None: not stored).

        A registered plain workflow first; else the stored instance built from its
        registered definition.

        Raises:
            UnknownWorkflowError: Neither: the message says what to register (the
                definition named in the store, or the plain `Workflow`).
            WorkflowMismatchError: The registered definition has other step names.
        """
        plain = self._workflows.get(workflow_id)
        if plain is not None:
            return plain
        if row is not None and row.definition is not None:
            definition = self._definitions.get(row.definition)
            if definition is None:
                raise UnknownWorkflowError(
                    f"workflow {workflow_id!r} was started from definition "
                    f"{row.definition!r}, which is not registered with this engine: "
                    f"register it first, engine.register(WorkflowDef({row.definition!r}, "
                    "steps))"
                )
            return instance_of(definition, row)
        where = "is stored as a plain workflow" if row is not None else "is not in the store"
        raise UnknownWorkflowError(
            f"workflow {workflow_id!r} is not registered with this engine and {where}; pass "
            "the Workflow or call register_workflow() first (step bodies are code, not data)"
        )


def step_index(workflow_id: str, names: Sequence[str], step: str | int) -> int:
    """The 0-based index of `step` (a name or an index) among a workflow's step `names`.

    Raises:
        UnknownStepError: No such step; the message lists the steps.
    """
    if isinstance(step, int) and not isinstance(step, bool):
        if 0 <= step < len(names):
            return step
    elif isinstance(step, str) and step in names:
        return names.index(step)
    raise UnknownStepError(
        f"workflow {workflow_id!r} has no step {step!r}; its steps are {list(names)}"
    )
