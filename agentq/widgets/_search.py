"""Search and paging over the workflows a `StepCache` indexes (pure but for `page_of`'s reads).

A `Query` says what to look for: part of a workflow id, part of a step name, a step status, a
time window (the workflow's latest event within the last N seconds). `page_of` walks the
workflow index, most recently active first, keeps the workflows that match, and fills one page
of at most `limit` step rows from a given position, reading the step rows of only the
workflows it shows (`StepCache.ensure`). Without a query it stops at the end of the page, so
its cost does not grow with the log; with one, it scans the index (one pass over the workflow
rows in memory, no I/O) to count the matches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentq.store import DurableStore, StepRow, WorkflowRow
from agentq.widgets._source import StepCache

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
    """

    rows: list[StepRow] = field(default_factory=list)
    start: int = 0
    next_start: int = 0
    matches: int = 0
    workflows: list[str] = field(default_factory=list)


async def page_of(
    cache: StepCache, store: DurableStore, query: Query, *, start: int, limit: int, now: float
) -> Page:
    """Fill a page of at most `limit` rows from the `start`-th matching workflow.

    A workflow's rows are never split across pages; a workflow with more rows than `limit`
    fills a page alone, cut at `limit`.

    Raises:
        StoreError: Reading the step rows of a workflow shown failed.
    """
    page = Page(start=start)
    position = 0
    full = False
    for wf in cache.newest():
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
            count = len(rows)
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
