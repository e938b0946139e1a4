"""What changed in a store since the last refresh: new event rows, and the touched workflows.

One `Source` serves every view of a widget tree, so a refresh reads the store once: the cheap
`last_seq()` first, then (only if it moved) the events after the last one seen, then the rows
of the workflows those events touched. The cost of a refresh follows what changed, not the
size of the log. The durable call counts (`CallTally`) are folded from the same event rows.

The first poll does not read the whole log: it reads the workflows' projection rows (the index
that search and paging walk), the last `TAIL_EVENTS` events (the timeline, the call counts and
the wait order start from there), and the step rows of every waiting workflow (the approval
panel needs those). Step rows of other workflows are read when a page or a search shows them
(`StepCache.ensure`), once, and kept up to date from then on.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any

from agentq.events import EventKind
from agentq.store import DurableStore, StepRow, StepState, WorkflowRow, WorkflowState
from agentq.widgets.models.calls import CallTally

__all__ = ["FULL_READ_AFTER", "TAIL_EVENTS", "Source", "StepCache"]

FULL_READ_AFTER = 32
"""When one refresh touches more workflows than this, the workflow index is read whole."""
TAIL_EVENTS = 5_000
"""How many of the latest events the first poll reads (older ones are read per workflow)."""

StepKey = tuple[str, int]


class StepCache:
    """Every workflow's projection row (most recently active last) and the step rows read.

    Attributes:
        index: Every workflow's `WorkflowRow`, least recently active first.
        counts: Workflows per `WorkflowState` value.
        waiting: The waiting steps by ``(workflow_id, step_index)``.
        wait_seq: ``seq`` of the latest `StepWaiting` event of each step seen waiting.
        waiting_cap: At most how many waiting workflows to keep read for the approval panel
            (its slots; 0 without a panel; None: all). The least recently active are read
            first (the oldest waits), and more are read as those stop waiting (review 14 #4:
            the first render read the steps of every waiting workflow, linear in the backlog).
    """

    def __init__(self) -> None:
        self.index: OrderedDict[str, WorkflowRow] = OrderedDict()
        self._steps: dict[str, tuple[StepRow, ...]] = {}
        self.counts: Counter[str] = Counter()
        self.waiting: dict[StepKey, StepRow] = {}
        self.wait_seq: dict[StepKey, int] = {}
        self.waiting_cap: int | None = 0  # the approval panel raises it to its slots

    def __len__(self) -> int:
        return len(self.index)

    def newest(self) -> Iterator[WorkflowRow]:
        """Yield the workflows, most recently active first."""
        return reversed(self.index.values())

    @property
    def unread_waiting(self) -> int:
        """How many waiting workflows of the index have step rows not read (over the cap).

        Derived from the index and the rows read, never kept as a separate count: a page of
        the step table that reads waiting workflows, or waits answered elsewhere, change it
        at once (issue 22 fault 4: a stored count was not told and the panel's "n more"
        counted those waits twice). Costs one look-up per workflow read.
        """
        waiting = self.counts[WorkflowState.WAITING.value]
        if not waiting:
            return 0
        index = self.index
        read = sum(1 for wf in self._steps
                   if (row := index.get(wf)) is not None and row.state is WorkflowState.WAITING)
        return max(0, waiting - read)

    def steps_of(self, workflow_id: str) -> tuple[StepRow, ...] | None:
        """Return a workflow's step rows, or None when they have not been read."""
        return self._steps.get(workflow_id)

    def newest_first(self) -> Iterator[StepRow]:
        """Yield the step rows read, most recently active workflow first, steps in order."""
        for wf in self.newest():
            yield from self._steps.get(wf.workflow_id, ())

    def set_workflow(self, row: WorkflowRow) -> None:
        """Store a workflow's row and mark it as the most recently active."""
        old = self.index.pop(row.workflow_id, None)
        if old is not None:
            self.counts[old.state.value] -= 1
        self.index[row.workflow_id] = row
        self.counts[row.state.value] += 1

    def replace(self, workflow_id: str, rows: Sequence[StepRow]) -> None:
        """Store a workflow's current step rows."""
        for row in self._steps.pop(workflow_id, ()):
            self.waiting.pop((row.workflow_id, row.step_index), None)
        if not rows:
            return
        self._steps[workflow_id] = tuple(rows)
        for row in rows:
            if row.state is StepState.WAITING:
                self.waiting[(row.workflow_id, row.step_index)] = row

    def note_events(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Remember the ``seq`` of each `StepWaiting` event (to tell one wait from the next)."""
        for row in rows:
            if row[5] == EventKind.STEP_WAITING and row[3] is not None:
                self.wait_seq[(row[2], row[3])] = row[0]

    async def ensure(self, store: DurableStore, workflow_ids: Iterable[str]) -> int:
        """Read the step rows of those of `workflow_ids` not read yet; return how many.

        The reads are queued at once (``asyncio.gather``), not one after the other: the
        store's thread then runs them back to back, where awaiting each in turn paid a
        round trip between the threads per workflow (on a loaded machine, a wait for the
        scheduler each time: the first render's wall time was several times its CPU time).
        """
        todo = list(dict.fromkeys(wf for wf in workflow_ids if wf not in self._steps))
        for wf, rows in zip(todo, await asyncio.gather(*map(store.step_rows, todo)),
                            strict=True):
            self.replace(wf, rows)
        return len(todo)

    async def load(
        self,
        store: DurableStore,
        rows: Sequence[tuple[Any, ...]],
        full: bool,
        index: Awaitable[list[WorkflowRow]] | None = None,
    ) -> None:
        """Bring the cache up to date after new event `rows` (the first poll when `full`).

        `index`, when given, is a read of the workflow index already under way (the first
        poll starts it beside the events read); it is used instead of reading it again.
        """
        self.note_events(rows)
        recency = dict.fromkeys(reversed([r[2] for r in rows]))  # last appearance first
        touched = list(reversed(recency))  # … and last in the list
        if full or index is not None or len(touched) > FULL_READ_AFTER:
            self._set_index(await (index if index is not None else store.workflows()))
            if full:  # the approval panel needs waiting steps (`waiting_cap`); pages the rest
                await self._fill_waiting(store)
                return
        else:
            for wf in touched:
                row = await store.get_workflow(wf)
                if row is not None:
                    self.set_workflow(row)
        for wf in touched:  # keep what was read (and every waiting step) current
            row_ = self.index.get(wf)
            if wf in self._steps or (row_ is not None and row_.state is WorkflowState.WAITING):
                self.replace(wf, await store.step_rows(wf))
        cap = self.waiting_cap
        if self.unread_waiting and (cap is None or len({k[0] for k in self.waiting}) < cap):
            await self._fill_waiting(store)  # waits left the panel: read the next ones

    async def _fill_waiting(self, store: DurableStore) -> None:
        """Read waiting workflows' steps, least recently active first, up to `waiting_cap`."""
        if not self.counts[WorkflowState.WAITING.value]:  # none: no walk of the index
            return
        unread = [w for w, r in self.index.items()
                  if r.state is WorkflowState.WAITING and w not in self._steps]
        room = len(unread)
        if self.waiting_cap is not None:
            room = max(0, self.waiting_cap - len({k[0] for k in self.waiting}))
        await self.ensure(store, unread[:room])

    def _set_index(self, rows: list[WorkflowRow]) -> None:
        rows.sort(key=attrgetter("last_seq"))  # least recently active first
        self.index = OrderedDict(zip(map(attrgetter("workflow_id"), rows), rows, strict=True))
        by_state = Counter(map(attrgetter("state"), rows))  # (a member's .value is slow)
        self.counts = Counter({state.value: n for state, n in by_state.items()})


class Source:
    """Reads a store incrementally for a widget tree: each call returns only what is new.

    Args:
        store: The store to watch.
        steps: Whether to keep a `StepCache` of the projection (the step table and the
            approval panel need it; the timeline alone does not).
    """

    def __init__(self, store: DurableStore, *, steps: bool = True) -> None:
        self.store = store
        self.seen = 0
        """The highest event ``seq`` read so far."""
        self.floor = 0
        """The ``seq`` after which the first poll read the log (0: the whole log)."""
        self.steps: StepCache | None = StepCache() if steps else None
        self.calls = CallTally()
        """Durable call counts per step and in total, from the event rows read so far (the
        last `TAIL_EVENTS` of the log at the first poll, then every new one)."""
        self.folds: list[Callable[[list[tuple[Any, ...]]], object]] = [self.calls.apply]
        """Pure folds (no I/O) applied to each batch of new event rows, in order, as soon as
        it is read: the call counts, and the timeline of a widget tree that has one."""
        self._loaded = False

    def want_steps(self) -> StepCache:
        """Return the step cache, creating it (and a full read next poll) if there was none."""
        if self.steps is None:
            self.steps = StepCache()
            self._loaded = False
        return self.steps

    async def poll(self) -> list[tuple[Any, ...]] | None:
        """Return the event rows appended since the last poll, or None when nothing changed.

        The first poll reads the last `TAIL_EVENTS` events (and the workflow index); later
        polls read only what follows the last ``seq`` seen.
        """
        store = self.store
        if self._loaded and await store.last_seq() == self.seen:
            return None
        full = not self._loaded
        after = self.seen
        if full and not self.seen:
            last = await store.last_seq()
            after = self.floor = max(0, last - TAIL_EVENTS)
        events = asyncio.ensure_future(store.event_rows(after_seq=after))
        # The first poll reads the workflow index too: queued right behind the events, so the
        # store's thread reads it while this one folds the events (wall time, not CPU: the
        # two reads and the folds used to run one after the other).
        index = None
        if full and self.steps is not None:
            index = asyncio.ensure_future(store.workflows())
        try:
            rows = await events
            if rows:
                self.seen = rows[-1][0]
            for fold in self.folds:
                fold(rows)
            if self.steps is not None:
                await self.steps.load(store, rows, full, index)
        finally:  # a failed read or fold: end the other read, and retrieve its error
            tasks = [task for task in (events, index) if task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._loaded = True
        return rows
