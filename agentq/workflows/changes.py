"""The stored changes that `resume` and `retry` make before a new run continues a workflow.

Each is a coroutine function that `Runs.replace` calls at the right moment (after the run in
progress for a resume, before it for a retry), and `unregistered_retry` says why a retry by id
of a workflow this engine does not know cannot run. `resume_elsewhere` and `retry_elsewhere`
only record the change, for an instance of a definition this engine has not registered: a
serving engine that holds it runs the workflow on. Private to `agentq.workflows.engine`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from agentq.clock import Clock
from agentq.errors import NotRetryableError, NotWaitingError, UnknownWorkflowError
from agentq.store import DurableStore, WorkflowRow, WorkflowState
from agentq.workflows.model import Recorded, Workflow
from agentq.workflows.registry import step_index

__all__ = [
    "resume_change",
    "resume_elsewhere",
    "retry_change",
    "retry_check",
    "retry_elsewhere",
    "unregistered_retry",
]

Change = Callable[[], Awaitable[None]]


def resume_change(
    store: DurableStore,
    clock: Clock,
    wf: Workflow,
    index: int,
    input: Any,
    key: str | None,
    *,
    stored: WorkflowRow | None = None,
) -> Change:
    """Deliver `input` to step `index` of `wf` (``resume_step``), the workflow stored first.

    `stored`: the stored row `wf` was built from (an instance of a registered definition),
    or None. Given, `wf` is stored as it is and the change only resumes the step.
    """

    async def deliver() -> None:
        now = clock.time()
        row = stored or await store.get_workflow(wf.id)
        if row is not None and row is not stored:  # the run must be able to continue
            await store.start_workflow(  # before the wait is used: same steps, same input
                wf.id, wf.step_names, wf.input, now, definition=wf.definition
            )
        await store.resume_step(wf.id, index, input, now, key=key)

    return deliver


def retry_check(store: DurableStore, wf: Workflow) -> Change:
    """Refuse a retry of `wf` unless it is stored failed or cancelled.

    The check raises `UnknownWorkflowError` (never stored) or `NotRetryableError` (naming the
    state); nothing is recorded.
    """

    async def check() -> None:
        row = await store.get_workflow(wf.id)
        if row is None:
            raise UnknownWorkflowError(
                f"workflow {wf.id!r} is not in the store: it never ran, so there is "
                "nothing to retry; run it"
            )
        if row.state not in (WorkflowState.FAILED, WorkflowState.CANCELLED):
            raise NotRetryableError(
                f"cannot retry workflow {wf.id!r}: it is {row.state}; only a failed or "
                "cancelled workflow runs again"
            )

    return check


def retry_change(store: DurableStore, clock: Clock, wf: Workflow, index: int | None) -> Change:
    """Reopen `wf` from step `index` (None: its first step that did not complete)."""

    async def again() -> None:
        now = clock.time()
        await store.start_workflow(
            wf.id, wf.step_names, wf.input, now, definition=wf.definition
        )
        await store.retry_workflow(wf.id, index, now)

    return again


async def unregistered_retry(store: DurableStore, workflow_id: str) -> NoReturn:
    """Refuse `retry(workflow_id)` of an id this engine has not registered.

    Raises:
        NotRetryableError: The workflow is stored completed: nothing to retry, whatever the
            bodies.
        UnknownWorkflowError: Otherwise: step bodies are code, so the `Workflow` is needed
            (a registration is dropped once its run ended).
    """
    stored = await store.get_workflow(workflow_id)
    if stored is not None and stored.state is WorkflowState.COMPLETED:
        raise NotRetryableError(
            f"cannot retry workflow {workflow_id!r}: it is {stored.state}; only a failed or "
            "cancelled workflow runs again"
        )
    where = f"is {stored.state} in the store" if stored else "is not in the store"
    raise UnknownWorkflowError(
        f"workflow {workflow_id!r} {where}, and its steps are not registered with this "
        "engine (step bodies are code, not data): pass the Workflow, engine.retry(workflow)"
    )


async def resume_elsewhere(
    store: DurableStore,
    clock: Clock,
    row: WorkflowRow,
    step: str | int,
    input: Any,
    key: str | None,
) -> Recorded:
    """Record a resume of `row`, an open instance of a definition not registered here.

    The store checks it as for any resume (`NotWaitingError`, `WorkflowClosedError`, ...);
    a serving engine that holds the definition runs the step on.
    """
    assert row.definition is not None
    index = step_index(row.workflow_id, row.step_names, step)
    try:
        await store.resume_step(row.workflow_id, index, input, clock.time(), key=key)
    except NotWaitingError:  # too late? then the wait times out now, as a timer would
        await store.time_out_wait(row.workflow_id, index, clock.time())
        raise
    return Recorded(row.workflow_id, row.definition, "resumed")


async def retry_elsewhere(
    store: DurableStore, clock: Clock, row: WorkflowRow, from_step: str | int | None
) -> Recorded:
    """Record a retry of `row`, an instance of a definition not registered here.

    The store checks it as for any retry (`NotRetryableError`, ...); a serving engine that
    holds the definition runs the workflow on.
    """
    assert row.definition is not None
    index = None if from_step is None else step_index(row.workflow_id, row.step_names, from_step)
    await store.retry_workflow(row.workflow_id, index, clock.time())
    return Recorded(row.workflow_id, row.definition, "retried")

