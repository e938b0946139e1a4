"""The retention verb of `DurableStore`: `DurableSweeps`.

`DurableStore` (``agentq.store.contract.protocol``) inherits this protocol; it lives apart
only to keep each module short. `WorkflowEngine.serve(retention=...)` and ``agentq sweep``
run it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from agentq.store.contract.sweep import SweepReport

__all__ = ["DurableSweeps"]


class DurableSweeps(Protocol):
    """Retention: `sweep` (see `DurableStore` for what every verb shares)."""

    async def sweep(
        self,
        *,
        ended_before: float | datetime,
        states: Iterable[str] = ("completed", "cancelled"),
    ) -> SweepReport:
        """Remove the workflows that ended before `ended_before` in one of `states`.

        Each workflow goes with everything the store keeps of it: its events, its step rows,
        its call and wait rows, and the queue job outcomes of its calls (the
        ``job_outcomes`` rows under each call's queue key, `agentq.keys.call_queue_key`).
        Its id may then be used again (a new workflow, unrelated to the old one). A
        workflow's end is its latest event (`WorkflowRow.updated_at`).

        Never removed, whatever the arguments:

        - a running or waiting workflow (the states allowed are ended states only);
        - a workflow with a step still fenced by a lease a cancel revoked whose expiry is at
          or after `ended_before` (its body may still run and renew it);
        - a child run (``ctx.child``) whose parent is still stored and not removed by this
          same sweep: the parent's step, run again (a crash, a retry), joins the child by
          its id and would start it anew if it were gone. Children go with or after their
          parent.

        A fork stands alone (it holds copies of its parent's outcomes): sweeping the parent
        does not change it, nor sweeping a fork its parent.

        Bounded batches: each transaction examines at most `agentq.store.contract.sweep.SWEEP_BATCH`
        workflows, so other writers (other verbs of this store object, other processes) take
        turns with a long sweep; a workflow that changes meanwhile is judged as it is when its
        batch runs. The file does not shrink by itself on SQLite: freed pages are reused by
        new rows; run ``VACUUM`` to give the space back (docs/store.md, Retention).

        Args:
            ended_before: Unix seconds or an aware `datetime`: workflows whose latest event
                is strictly earlier are removed.
            states: The ended states to remove, among ``"completed"``, ``"failed"`` and
                ``"cancelled"``.

        Returns:
            A `SweepReport`: how many workflows, events and call rows were removed.

        Raises:
            ValueError: A naive `datetime` or a time that is not finite (named
                ``ended_before``), no state, or a state that is not an ended one (named);
                checked before anything is read.
            TypeError: `ended_before` or `states` of the wrong type.
            StoreError: The backend failed; the batches committed before stay removed.
        """
        ...
