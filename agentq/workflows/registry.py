"""`Registry`: the workflows an engine knows by id, and the checks on registering one again.

Step bodies are code, not data: `resume` and `recover` can continue a workflow only if its
`Workflow` (with its step functions) is registered with the engine. Registering an id again
replaces the bodies (a notebook cell run twice) but never the step names or the input: a
workflow id names one run. The engine removes a registration once its run has ended
(completed, failed or cancelled), so that a long-lived engine does not keep every workflow
it ever ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.codec import decode, encode
from agentq.errors import (
    PayloadError,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowMismatchError,
)
from agentq.workflows.model import Workflow

__all__ = ["Registry", "step_index"]


def _same_json(a: Any, b: Any) -> bool:
    """Whether two workflow inputs are the same value once stored (as the store compares)."""
    try:
        return bool(decode(encode(a, "input")) == decode(encode(b, "input")))
    except PayloadError:
        return bool(a == b)  # the store refuses such an input anyway


class Registry:
    """The registered workflows of one engine, by id, in registration order."""

    def __init__(self) -> None:
        self._workflows: dict[str, Workflow] = {}

    def add(self, workflow: Workflow) -> None:
        """Register `workflow`, replacing the bodies of one with the same id.

        Raises:
            TypeError: `workflow` is not a `Workflow`.
            WorkflowMismatchError: The id is registered with different step names or another
                input (nothing is replaced).
        """
        if not isinstance(workflow, Workflow):
            raise TypeError(f"expected a Workflow, got {workflow!r}")
        known = self._workflows.get(workflow.id)
        if known is not None and known.step_names != workflow.step_names:
            raise WorkflowMismatchError(
                f"workflow {workflow.id!r} is registered with steps {list(known.step_names)}, "
                f"not {list(workflow.step_names)}"
            )
        if known is not None and not _same_json(known.input, workflow.input):
            raise WorkflowMismatchError(
                f"workflow {workflow.id!r} is registered with another input; a workflow id "
                "names one run: use a new id for new input"
            )
        self._workflows[workflow.id] = workflow

    def remove(self, workflow_id: str) -> bool:
        """Forget the workflow registered under `workflow_id`; whether there was one."""
        return self._workflows.pop(workflow_id, None) is not None

    def __len__(self) -> int:
        return len(self._workflows)

    def get(self, workflow_id: str) -> Workflow | None:
        """Return the registered workflow with this id, or None."""
        return self._workflows.get(workflow_id)

    @property
    def ids(self) -> tuple[str, ...]:
        """Ids of the registered workflows, in registration order."""
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
