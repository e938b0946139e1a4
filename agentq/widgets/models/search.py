"""Search and paging over the workflows a `StepCache` indexes (pure but for `page_of`'s reads).

A `Query` says what to look for: part of a workflow id, part of a step name, a step status, a
time window (the workflow's latest event within the last N seconds). `page_of` walks the
workflow index, most recently active first, keeps the workflows that match, and fills one page
of at most `limit` step rows from a given position, reading the step rows of only the
workflows it shows (`StepCache.ensure`). A workflow with more matching steps than `limit` is
paged by rows: its page shows `limit` of them, `Page.cut` says how many follow, and the next
page starts at the same workflow with `Page.next_offset` set (no step is ever out of reach).
Without a query it stops at the end of the page, so its cost does not grow with the log; with
one, it scans the index (one pass over the workflow rows in memory, no I/O) to count the matches.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agentq.store import DurableStore, StepRow, WorkflowRow
from agentq.widgets.models.source import StepCache

__all__ = ["Page", "Query", "page_of"]

# A step in this status can only be in a workflow in one of these states (a cheap pre-filter
# on the index, before any step row is read).
_STATES_OF = {
    "pending": {"running", "waiting", "failed", "cancelled"},
    "leased": {"running"},
    "waiting": {"waiting"},
    "completed": {"running", "waiting", "completed", "failed", "cancelled"},
    "failed": {"failed", "cancelled", "running"},
}


@dataclass(frozen=True, slots=True)
class Query:
    """What the step table shows.

    Attributes:
        workflow: Part of the workflow id ('' for any); case-sensitive.
        step: Part of a step name ('' for any).
        status: A `StepState` value ('' for any): only steps in that state are listed.
        window: Seconds: only workflows whose latest event is that recent (0 for any).
    """

    workflow: str = ""
    step: str = ""
    status: str = ""
    window: float = 0.0

    @property
    def empty(self) -> bool:
        """True when nothing is filtered."""
        return not (self.workflow or self.step or self.status or self.window)

    def admits(self, wf: WorkflowRow, now: float) -> bool:
        """Whether a workflow may have rows to list (from its index row alone)."""
        if self.workflow and self.workflow not in wf.workflow_id:
            return False
        if self.step and not any(self.step in name for name in wf.step_names):
            return False
        if self.window and wf.updated_at < now - self.window:
            return False
        return not self.status or wf.state.value in _STATES_OF.get(self.status, ())

    def rows(self, steps: tuple[StepRow, ...]) -> list[StepRow]:
        """The rows of one workflow's steps that match."""
        return [
            r for r in steps
            if (not self.status or r.state.value == self.status)
            and (not self.step or self.step in r.step_name)
        ]


@dataclass(slots=True)
class Page:
    """One page of the step table.

    Attributes:
        rows: The step rows to draw, in order.
        start: Position, among the matching workflows, of the page's first workflow.
        next_start: Position of the next page's first workflow (== `matches` on the last).
        matches: Workflows that match the query (for a step status, those that may have such
            a step, judged from their state).
        workflows: The workflows drawn, in order.
        offset: Rows of the first workflow skipped (shown on earlier pages); 0 normally.
        next_offset: The next page's `offset`: non-zero when the page ends inside a workflow
            with more matching steps than `limit`.
        cut: Matching rows of the page's last workflow not drawn on it (the "… n more steps"
            line); 0 unless the page ends inside a workflow.
    """

    rows: list[StepRow] = field(default_factory=list)
    start: int = 0
    next_start: int = 0
    matches: int = 0
    workflows: list[str] = field(default_factory=list)
    offset: int = 0
    next_offset: int = 0
    cut: int = 0


async def page_of(
    cache: StepCache, store: DurableStore, query: Query, *, start: int, limit: int, now: float,
    offset: int = 0,
) -> Page:
    """Fill a page of at most `limit` rows from the `start`-th matching workflow.

    A workflow's rows are not split across pages unless it has more matching rows than
    `limit`: such a workflow fills pages alone, `limit` rows each, from its `offset`-th row;
    `Page.cut` counts its rows after the page and `Page.next_start`/`Page.next_offset` point
    at them.

    Args:
        cache: The step cache whose index is walked.
        store: Where step rows not cached yet are read.
        query: What to keep.
        start: Position (0-based) of the first workflow among the matching ones.
        limit: Maximum rows on the page (>= 1).
        now: Unix seconds, for the query's time window.
        offset: Rows of the first workflow to skip (a continued long workflow); default 0.

    Raises:
        StoreError: Reading the step rows of a workflow shown failed.
    """
    page = Page(start=start, offset=offset)
    # A snapshot of the order: reading step rows awaits, and a refresh running meanwhile
    # reorders the index (a live iterator would raise "OrderedDict mutated during iteration").
    order = tuple(cache.newest())
    if not (query.status or query.step):  # the index says which workflows fill the page
        await cache.ensure(store, _plain_page(order, query, start, limit, now))
    position = 0
    full = False
    for wf in order:
        if not query.admits(wf, now):
            continue
        position += 1
        if position <= start or full:
            if query.empty and full:
                position = len(cache)  # no query: every workflow matches, no need to walk
                break
            continue
        plain = not (query.status or query.step)  # every step listed: the index says how many
        rows: list[StepRow] = []
        if plain and page.rows and len(page.rows) + len(wf.step_names) > limit:
            count = len(wf.step_names)  # does not fit: no need to read its steps
        else:
            await cache.ensure(store, [wf.workflow_id])
            rows = query.rows(cache.steps_of(wf.workflow_id) or ())
            if not page.rows and position == start + 1 and offset:
                rows = rows[offset:]  # the rest of a long workflow paged by rows
            count = len(rows)
        if not page.rows and count > limit:  # alone and too long: page it by rows
            page.rows.extend(rows[:limit])
            page.workflows.append(wf.workflow_id)
            page.cut = count - limit
            page.next_offset = (offset if position == start + 1 else 0) + limit
            page.next_start = position - 1
            full = True
            if query.empty:
                position = len(cache)
                break
            continue
        if page.rows and len(page.rows) + count > limit:
            full = True
            page.next_start = position - 1
            if query.empty:
                position = len(cache)
                break
            continue
        if rows:
            page.rows.extend(rows[: limit - len(page.rows)])
            page.workflows.append(wf.workflow_id)
    page.matches = position
    if not full:
        page.next_start = position
    return page


def _plain_page(
    order: Iterable[WorkflowRow], query: Query, start: int, limit: int, now: float
) -> list[str]:
    """The workflows a page lists when every step of a workflow is listed (no step or status
    query), in `order` (newest first): from the `start`-th admitted one while their steps fit
    in `limit` rows (the first one always). `page_of` reads their steps in one batch before it
    walks the index."""
    chosen: list[str] = []
    rows = position = 0
    for wf in order:
        if not query.admits(wf, now):
            continue
        position += 1
        if position <= start:
            continue
        if chosen and rows + len(wf.step_names) > limit:
            break
        chosen.append(wf.workflow_id)
        rows += len(wf.step_names)
    return chosen
