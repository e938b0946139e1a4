"""What changed in a store since the last refresh: new event rows, and the touched step rows.

One `Source` serves every view of a widget tree, so a refresh reads the store once: the cheap
`last_seq()` first, then (only if it moved) the events after the last one seen, then the
projection rows of the workflows those events touched. The cost of a refresh follows what
changed, not the size of the log. The durable call counts (`CallTally`) are folded from the same
event rows: they cost no read of their own.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from agentq.events import EventKind
from agentq.store import DurableStore, StepRow, StepState
from agentq.widgets._calls import CallTally

__all__ = ["FULL_READ_AFTER", "Source", "StepCache"]

FULL_READ_AFTER = 32
"""When one refresh touches more workflows than this, the projection is read whole."""

StepKey = tuple[str, int]


class StepCache:
    """The ``steps`` projection, kept per workflow, the most recently active workflow last.

    Attributes:
        counts: Steps per `StepState` value.
        waiting: The waiting steps by ``(workflow_id, step_index)``, oldest wait first.
        wait_seq: ``seq`` of the latest `StepWaiting` event of each step seen waiting.
    """

    def __init__(self) -> None:
        self._workflows: OrderedDict[str, tuple[StepRow, ...]] = OrderedDict()
        self.counts: Counter[str] = Counter()
        self.waiting: dict[StepKey, StepRow] = {}
        self.wait_seq: dict[StepKey, int] = {}

    def __len__(self) -> int:
        return len(self._workflows)

    def newest_first(self) -> Iterator[StepRow]:
        """Yield the rows, most recently active workflow first, steps in order."""
        for rows in reversed(self._workflows.values()):
            yield from rows

    def replace(self, workflow_id: str, rows: Sequence[StepRow]) -> None:
        """Store a workflow's current rows and mark it as the most recently active."""
        for row in self._workflows.pop(workflow_id, ()):
            self.counts[row.state.value] -= 1
            self.waiting.pop((row.workflow_id, row.step_index), None)
        if not rows:
            return
        self._workflows[workflow_id] = tuple(rows)
        for row in rows:
            self.counts[row.state.value] += 1
            if row.state is StepState.WAITING:
                self.waiting[(row.workflow_id, row.step_index)] = row

    def note_events(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Remember the ``seq`` of each `StepWaiting` event (to tell one wait from the next)."""
        for row in rows:
            if row[5] == EventKind.STEP_WAITING and row[3] is not None:
                self.wait_seq[(row[2], row[3])] = row[0]

    async def load(self, store: DurableStore, rows: Sequence[tuple[Any, ...]], full: bool) -> None:
        """Bring the cache up to date after new event `rows` (read whole when `full`)."""
        self.note_events(rows)
        recency = dict.fromkeys(reversed([r[2] for r in rows]))  # last appearance first
        touched = list(reversed(recency))  # … and last in the list
        if full or len(touched) > FULL_READ_AFTER:
            by_workflow: dict[str, list[StepRow]] = {}
            for row in await store.step_rows():
                by_workflow.setdefault(row.workflow_id, []).append(row)
            order = [wf for wf in by_workflow if wf not in recency] + [
                wf for wf in touched if wf in by_workflow
            ]
            self._workflows.clear()
            self.counts.clear()
            self.waiting.clear()
            for wf in order:
                self.replace(wf, by_workflow[wf])
            return
        for wf in touched:
            self.replace(wf, await store.step_rows(wf))


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
        self.steps: StepCache | None = StepCache() if steps else None
        self.calls = CallTally()
        """Durable call counts per step and in total, from the event rows read so far."""
        self._loaded = False

    def want_steps(self) -> StepCache:
        """Return the step cache, creating it (and a full read next poll) if there was none."""
        if self.steps is None:
            self.steps = StepCache()
            self._loaded = False
        return self.steps

    async def poll(self) -> list[tuple[Any, ...]] | None:
        """Return the event rows appended since the last poll, or None when nothing changed.

        The first poll reads the whole log (and the whole projection); later polls read only
        what follows the last ``seq`` seen.
        """
        store = self.store
        if self._loaded and await store.last_seq() == self.seen:
            return None
        full = not self._loaded
        rows = await store.event_rows(after_seq=self.seen)
        if rows:
            self.seen = rows[-1][0]
        self.calls.apply(rows)
        if self.steps is not None:
            await self.steps.load(store, rows, full)
        self._loaded = True
        return rows
