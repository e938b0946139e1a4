"""Ready work: what a serving worker may take up now, and the optional wake-up hook.

`DurableStore.ready_workflows` lists the open workflows of some definitions whose current step
(the first one not completed) a worker may take up now; `is_ready` is the rule, which every
store applies (`MemoryStore` in Python, `SqliteStore` in one query). A store that can tell when
new work arrives (PostgreSQL's ``LISTEN/NOTIFY``) also implements `WorkNotifier`; a serving
engine then waits on it instead of sleeping between polls.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentq.store.contract.rows import StepRow, StepState, WorkflowRow, WorkflowState

__all__ = ["ReadyWork", "WorkNotifier", "current_step", "is_ready"]


@dataclass(frozen=True, slots=True)
class ReadyWork:
    """An open workflow whose current step a worker may take up now.

    Attributes:
        workflow: The workflow's row (its `definition` names the `WorkflowDef`).
        step_index: Its current step: the first one that has not completed.
        state: The step's state, which says what taking it up means: `StepState.PENDING`
            (claim it: never started, retried, resumed, or its retry time has come),
            `StepState.LEASED` (its lease expired: a claim takes it over, recording
            `WorkerRecovered`) or `StepState.WAITING` (its wait's deadline passed:
            `time_out_wait`, then claim).
    """

    workflow: WorkflowRow
    step_index: int
    state: StepState


def current_step(steps: Iterable[StepRow]) -> StepRow | None:
    """The first step (by index) that has not completed, or None."""
    return min(
        (s for s in steps if s.state is not StepState.COMPLETED),
        key=lambda s: s.step_index,
        default=None,
    )


def is_ready(workflow: WorkflowRow, step: StepRow, now: float) -> bool:
    """Whether a worker may take up `step`, the current step of `workflow`, at `now`.

    A running workflow's step that is pending with no retry time or one ``<= now`` (and not
    fenced by a lease a cancel revoked, until it expires: ``now > lease_expires_at``), or
    leased with a lease that expired (``now > expires_at``); a waiting workflow's step whose
    keyed wait has a deadline ``<= now``. Nothing else: a live lease or fence, a retry time
    ahead, a wait without a deadline, a closed workflow. An open workflow whose own deadline
    is ``<= now`` is ready whatever its step (taking it up fails it: `time_out_workflow`).
    """
    if workflow.state.closed:
        return False
    if workflow.deadline is not None and workflow.deadline <= now:
        return True
    if workflow.state is WorkflowState.RUNNING:
        if step.state is StepState.PENDING:  # not fenced by a lease a cancel revoked
            return (step.retry_at is None or step.retry_at <= now) and (
                step.lease_expires_at is None or now > step.lease_expires_at
            )
        return (
            step.state is StepState.LEASED
            and step.lease_expires_at is not None
            and now > step.lease_expires_at
        )
    return (
        workflow.state is WorkflowState.WAITING
        and step.state is StepState.WAITING
        and step.wait_deadline is not None
        and step.wait_deadline <= now
    )


@runtime_checkable
class WorkNotifier(Protocol):
    """The optional wake-up hook of a store that knows when new work arrives.

    A serving engine (`WorkflowEngine.serve`) calls it between polls when its store
    implements it, and sleeps on its own clock otherwise (`SqliteStore`, `MemoryStore`). A
    store implementing it starts no task of its own for it: the wait runs in the caller's.
    """

    async def wait_for_work(self, timeout: float) -> bool:  # noqa: ASYNC109 - a poll bound
        """Wait until new work may be ready, at most `timeout` seconds.

        A store that listens lazily starts listening at its first call; a call with a
        `timeout` of 0 only makes sure it listens (and returns at once), so that news
        committed after it returns wakes a later call.

        Returns:
            True if the store was told of new work (a started, resumed, retried or
            re-admitted workflow; a completed step), False once `timeout` has passed. A
            True may be spurious: the caller reads `ready_workflows` either way.
        """
        ...
