"""Retention, written once for every store: which workflows a sweep keeps, and its batches.

`DurableStore.sweep` runs as a loop of short transactions (`sweep`): each one examines at most
`SWEEP_BATCH` workflows of one ended state, in start order after a cursor (the ``started_seq``
of the last one examined), and removes those the rules below allow. A store supplies the
transaction (`Sweeper.batch`: read the candidates, remove the chosen ones); the rules are here:

- a candidate is in the state asked for, ended strictly before the cutoff (its latest event),
  and has no step fenced by a revoked lease whose expiry is at or after the cutoff
  (`kept_by_fence`);
- a workflow still held by another stored one is kept, unless its holder is removed in the
  same batch (`chosen`). A child run is held by its parent while the parent is stored (a
  parent that recorded it: the parent's wait row ``child:<key>`` exists, `recorded_child`):
  a parent's step run again joins its child by id and would start it anew if it were gone.
  A workflow skipped so is looked at again by another round of the sweep, once its holder
  may have gone (`sweep` runs rounds while they remove something and skipped one);
- a member of a run group is kept while the group's manifest is stored (`group_member`:
  resubmitting the group would run a swept completed member again); ``forget`` lets it go;
- a workflow is kept while an engine delivers its end-of-run hooks (`hook_holds`: an outbox
  row claimed at least once and not delivered yet; the hooks are at-least-once).

A removed workflow goes with its messages and its end-hook outbox rows (delivered, or never
claimed: no engine holds a hook for its definition).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NamedTuple

from agentq.store.contract.children import parent_of
from agentq.store.contract.hooks import HookRow
from agentq.store.contract.rows import WorkflowState
from agentq.store.contract.sweep import SWEEP_BATCH, SweepReport

__all__ = [
    "Candidate", "SweepBatch", "Sweeper", "chosen", "group_member", "hook_holds",
    "kept_by_fence", "recorded_child", "sweep",
]

YIELDS = 8
"""Loop turns a sweep yields between two of its transactions: verbs that waited for the store
meanwhile go first, in a transaction of their own (SQLite's group commit lingers a few turns
for more verbs, and would otherwise take them into the sweep's next batch, to wait for it)."""

MAX_ROUNDS = 8
"""At most this many rounds of batches per sweep (a round more per generation of child runs
whose parent a round removed)."""


class Candidate(NamedTuple):
    """A workflow a batch examines.

    Attributes:
        workflow_id: Its id.
        started_seq: The sequence number of its `WorkflowStarted` (the start order).
        ended_at: Unix seconds of its latest event.
        fenced_until: The latest lease expiry among its steps (a fence, for an ended
            workflow), or None.
    """

    workflow_id: str
    started_seq: int
    ended_at: float
    fenced_until: float | None


class SweepBatch(NamedTuple):
    """What one transaction of a sweep did.

    Attributes:
        report: What it removed.
        cursor: The ``started_seq`` of the last workflow it examined, to go on after; None
            when no workflow of the state is left after it.
        skipped_child: Whether it kept a child run because its parent is stored.
    """

    report: SweepReport
    cursor: int | None
    skipped_child: bool


class Sweeper(NamedTuple):
    """How a store runs one transaction of a sweep.

    Attributes:
        batch: ``batch(tx, cutoff, state, after, limit) -> SweepBatch``: in one transaction,
            examine at most `limit` workflows in `state` whose ``started_seq`` is greater
            than `after`, in start order, and remove those `chosen` allows with everything
            the store keeps of them.
    """

    batch: Callable[..., SweepBatch]


def kept_by_fence(candidate: Candidate, cutoff: float) -> bool:
    """Whether `candidate` must be kept: not ended before `cutoff`, or a step still fenced
    by a revoked lease (its body may still run) that expires at or after it."""
    if not candidate.ended_at < cutoff:
        return True
    return candidate.fenced_until is not None and candidate.fenced_until >= cutoff


def chosen(
    candidates: Iterable[Candidate],
    cutoff: float,
    holder: Callable[[str], str | None],
    kept: Callable[[str], bool] = lambda _: False,
) -> tuple[list[str], bool]:
    """The ids of `candidates` (in start order) a batch removes, and whether it kept one for
    its holder.

    Args:
        candidates: The workflows examined, in start order.
        cutoff: Unix seconds: only workflows ended strictly before go.
        holder: ``holder(workflow_id)``: the id of the stored workflow that still holds it
            (the parent that started it as a child run: `recorded_child`), or None. A held
            workflow goes only with its holder, in the same batch.
        kept: ``kept(workflow_id)``: whether something that is not a workflow keeps it (a
            run group's manifest: `group_member`; an end hook being delivered: `hook_holds`); not
            counted as skipped.

    Returns:
        ``(ids, kept_for_holder)``.
    """
    removed: set[str] = set()
    ids: list[str] = []
    skipped = False
    for candidate in candidates:
        if kept_by_fence(candidate, cutoff):
            continue
        if kept(candidate.workflow_id):
            continue
        held = holder(candidate.workflow_id)
        if held is not None and held not in removed:
            skipped = True
            continue
        removed.add(candidate.workflow_id)
        ids.append(candidate.workflow_id)
    return ids, skipped


def recorded_child(workflow_id: str, has_wait: Callable[[str, str], bool]) -> str | None:
    """The parent that holds child run `workflow_id`, or None.

    Args:
        workflow_id: A workflow's id (a child run's is ``<parent>/<key>``).
        has_wait: ``has_wait(parent_id, wait_key)``: whether workflow `parent_id` is stored
            with a wait row `wait_key` (it started that child).
    """
    link = parent_of(workflow_id)
    if link is None or not has_wait(*link):
        return None
    return link[0]


def group_member(workflow_id: str, has_item: Callable[[str, str], bool]) -> str | None:
    """The run group whose manifest holds `workflow_id` as a member, or None.

    A member's id is ``<group_id>/<key>``, and either part may hold a ``/``: every split is
    tried. A member stays while its group's manifest does (a resubmission would otherwise run
    a swept completed member again); ``group.forget()`` lets it go.

    Args:
        workflow_id: A workflow's id.
        has_item: ``has_item(group_id, key)``: whether a stored manifest lists `key`.
    """
    cut = workflow_id.find("/")
    while cut != -1:
        if has_item(workflow_id[:cut], workflow_id[cut + 1 :]):
            return workflow_id[:cut]
        cut = workflow_id.find("/", cut + 1)
    return None


def hook_holds(row: HookRow) -> bool:
    """Whether end-hook outbox `row` keeps its workflow from a sweep.

    It does while an engine delivers it: claimed at least once (an engine holds a hook for
    the workflow's definition) and not delivered yet; the hooks are at-least-once, and a
    delivery reads the workflow's final result from the store. A row no engine ever claimed
    (no engine holds a hook for it; every end writes one) does not keep it, or a store used
    without hooks would never be swept: it goes with the workflow, as a delivered one does.
    """
    return not row.delivered and row.attempts > 0


async def sweep(
    run: Callable[..., Awaitable[SweepBatch]],
    batch: Callable[..., SweepBatch],
    cutoff: float,
    states: Sequence[WorkflowState],
    limit: int | None = None,
) -> SweepReport:
    """Run the batches of a sweep, one transaction each (``await run(batch, *args)``).

    Each state is swept in start order; rounds follow while the last one removed something
    and kept a child run for its parent (which may have gone since).

    Args:
        run: The store's way of running a function in one transaction.
        batch: The store's `Sweeper.batch`.
        cutoff: Unix seconds (checked).
        states: Ended states (checked).
        limit: Workflows examined per transaction (None: `SWEEP_BATCH`).

    Returns:
        The sum of the batches' reports.
    """
    limit = SWEEP_BATCH if limit is None else limit
    report = SweepReport()
    for _ in range(MAX_ROUNDS):
        before, skipped = report, False
        for state in states:
            after: Any = 0
            while after is not None:
                for _ in range(YIELDS):
                    await asyncio.sleep(0)
                done = await run(batch, cutoff, state.value, after, limit)
                report += done.report
                skipped = skipped or done.skipped_child
                after = done.cursor
        if not skipped or report == before:
            break
    return report
