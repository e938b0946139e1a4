"""The pages of ``agentq ls`` and ``agentq events``: a bounded listing and its cursor.

A listing shows `DEFAULT_LIMIT` rows unless told otherwise (``--limit N``, or ``--all``), and
when more rows follow it ends with one line naming the cursor of the next page (``--after``
the last workflow id, or the last event's sequence number). A page of events is one
``LIMIT``ed read of the log; a page of workflows reads the workflow rows once (the store has
no paged read of them) and the step rows of the page's workflows only, so its table has 50
rows to render whatever the store's size (a table of 20,000 takes Rich about 20 s).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Generic, TypeVar

from agentq.cli.literal import visible
from agentq.cli.target import Refused
from agentq.events import Event
from agentq.store import DurableStore, StepRow, WorkflowRow, WorkflowState

__all__ = ["DEFAULT_LIMIT", "Page", "event_page", "workflow_page"]

DEFAULT_LIMIT = 50
"""Rows a listing shows when neither ``--limit`` nor ``--all`` is given."""

R = TypeVar("R")


@dataclass(frozen=True)
class Page(Generic[R]):
    """One page of a listing.

    Attributes:
        rows: The rows shown, in the listing's order.
        cursor: The ``--after`` value of the next page, or None on the last page.
        total: How many rows the whole listing has, when known cheaply (workflows).
    """

    rows: list[R]
    cursor: str | None
    total: int | None = None

    def footer(self, noun: str) -> str | None:
        """The line that says how to get the next page (None on the last page).

        Example: ``50 of 20000 workflows shown; the next page: --after wf-49 (all at once:
        --all)``; the cursor is shell-quoted and printed literally.
        """
        if self.cursor is None:
            return None
        of = "" if self.total is None else f" of {self.total}"
        return (f"{len(self.rows)}{of} {noun} shown; the next page: --after "
                f"{visible(shlex.quote(self.cursor))} (all at once: --all)")


async def workflow_page(
    store: DurableStore, state: WorkflowState | None, after: str | None, limit: int | None,
    *, with_steps: bool = True,
) -> tuple[Page[WorkflowRow], list[StepRow]]:
    """The workflows of one page, in the order they started, and (`with_steps`) their step
    rows: one read of the workflows, and one of each listed workflow's steps (of all the
    steps at once when `limit` is None).

    Args:
        store: The open store.
        state: Only workflows in this state, or None for all.
        after: The id of the workflow the previous page ended with (its place in the start
            order counts, whatever its state now), or None from the first.
        limit: At most this many rows (>= 1), or None for every one.
        with_steps: Read the page's step rows (the table's progress column); False: none.

    Returns:
        The page (``total``: the workflows in `state`, on every page) and the step rows of
        its workflows (empty unless `with_steps`).

    Raises:
        Refused: `after` is not a workflow of this store.
    """
    every = await store.workflows()
    start = 0
    if after is not None:
        start = next((i + 1 for i, wf in enumerate(every) if wf.workflow_id == after), -1)
        if start < 0:
            raise Refused(f"no workflow {after!r} in this store (--after)")
    matching = [wf for wf in every if state is None or wf.state is state]
    rest = [wf for wf in every[start:] if state is None or wf.state is state]
    rows = rest if limit is None else rest[:limit]
    cursor = rows[-1].workflow_id if len(rest) > len(rows) else None
    if not with_steps:
        steps = []
    elif limit is None:
        steps = await store.step_rows()
    else:
        steps = [step for wf in rows for step in await store.step_rows(wf.workflow_id)]
    return Page(rows, cursor, len(matching)), steps


async def event_page(
    store: DurableStore, workflow_id: str | None, after: int, limit: int | None
) -> Page[Event]:
    """The events of one page, by sequence number.

    Args:
        store: The open store.
        workflow_id: Only this workflow's events, or None for all.
        after: Only events with a greater sequence number (0: from the first).
        limit: At most this many (>= 1), or None for every one.
    """
    found = await store.load_events(
        workflow_id, after_seq=after, limit=None if limit is None else limit + 1
    )
    rows = found if limit is None else found[:limit]
    cursor = str(rows[-1].seq) if len(found) > len(rows) else None
    return Page(rows, cursor)
