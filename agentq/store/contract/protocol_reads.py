"""The read verbs of `DurableStore`: `DurableReads`.

`agentq.store.contract.protocol.DurableStore` inherits this protocol; it lives apart to keep
each module short, along the seam between what a store is asked (here: rows, events, leases
to take back, ready work; nothing is written) and what it is told to do (the write verbs,
each one atomic transaction, in `DurableStore`). Every read raises `StoreError` (with the
backend's exception as ``__cause__``) when the backend fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agentq.events import Event
from agentq.store.contract.claims import Execution
from agentq.store.contract.ready import ReadyWork
from agentq.store.contract.rows import StepRow, WorkflowRow, WorkflowState

__all__ = ["DurableReads"]


class DurableReads(Protocol):
    """The read side of a store: nothing is appended or changed (see `DurableStore` for what
    every verb shares).

    All methods are coroutines to be awaited on one event loop.
    """

    async def expired_leases(self, now: float) -> list[Execution]:
        """Return the leases that expired before `now` (``now > expires_at``).

        Ordered by ``expires_at``, then workflow id, then step index.
        """
        ...

    async def live_leases(self, now: float, worker_prefix: str) -> list[Execution]:
        """Return the leases live at `now` (``now <= expires_at``) whose holder's worker id
        starts with `worker_prefix`, and the fences of leases a cancel revoked on the pending
        steps of running workflows (a retry before the old body stopped; ``revoked=True``).

        A serving engine reads those of its own host (``"{host}:"``, see
        ``agentq.workflows.workers``) to take back at once the leases of a sibling process
        that died, as `recover` does. One small read (the leased steps, by expiry).

        Args:
            now: Unix seconds.
            worker_prefix: A prefix of worker ids (a str; "" lists every live lease).

        Returns:
            Ordered by ``expires_at``, then workflow id, then step index.

        Raises:
            TypeError / ValueError: A bad argument (the message names it).
        """
        ...

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        """Return one workflow's row, or None."""
        ...

    async def ready_workflows(
        self, now: float, definitions: Mapping[str, Sequence[str]], limit: int
    ) -> list[ReadyWork]:
        """Return open workflows of these definitions whose current step is ready at `now`.

        The current step is a workflow's first step that has not completed; it is ready
        when `agentq.store.contract.ready.is_ready` says so: pending with no retry time or one
        ``<= now``, leased with an expired lease, or (in a waiting workflow) waiting on a
        keyed wait whose deadline is ``<= now``. One small read (SQLite: one indexed query);
        nothing is claimed or written: a serving engine claims what it takes up, and two
        engines reading the same work each learn from the claim which one won.

        Args:
            now: Unix seconds.
            definitions: The served `WorkflowDef`s: each name mapped to its step names.
                Only instances of these names started with these very steps are listed;
                instances of other definitions, instances of a listed name started with
                other steps (an old version, another service's definition of that name)
                and plain workflows are never listed, so that however many of them wait,
                they never take the places of the work the caller can run. Empty: nothing
                is listed.
            limit: At most this many (an int >= 1), in the order the workflows started.

        Returns:
            One `ReadyWork` per workflow (its row, the step's index and state).

        Raises:
            TypeError / ValueError: A bad argument (the message names it), e.g. names
                given without their step names.
        """
        ...

    async def workflows(self, state: WorkflowState | None = None) -> list[WorkflowRow]:
        """Return workflows (optionally only those in `state`), in the order they started."""
        ...

    async def step_rows(self, workflow_id: str | None = None) -> list[StepRow]:
        """Return projection rows of one workflow (or all), by workflow start order then step
        index."""
        ...

    async def load_events(
        self, workflow_id: str | None = None, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Return events with ``seq > after_seq`` (of one workflow, or all), by seq."""
        ...

    async def event_rows(
        self, workflow_id: str | None = None, *, after_seq: int = 0
    ) -> list[tuple[Any, ...]]:
        """Return events as plain tuples in `EVENT_COLUMNS` order (for DataFrames), by seq.

        ``reason`` is set for StepFailed, StepWaiting, WorkflowFailed, WorkflowCancelled and
        CallFailed; ``output`` (JSON text) for StepCompleted and CallCompleted; ``input``
        (JSON text) for WorkflowStarted, StepResumed and ChildEnded; ``key`` (text) for the
        call events, WaitTimedOut, ChildStarted, ChildEnded, and a keyed wait's StepWaiting
        and StepResumed; ``label`` (JSON text) for the call events of a call that has a
        label; ``forked_from`` (text) the parent's id on a fork's WorkflowForked and on the
        copies of its parent's history; else None.
        """
        ...

    async def last_seq(self) -> int:
        """Return the highest sequence number in the log (0 when empty); cheap."""
        ...
