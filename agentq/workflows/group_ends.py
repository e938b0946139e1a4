"""Following a run group's members to their ends: `ended_rows`, under `RunGroup.results`.

It reads every member once (the group's rows), then, each time a run of this engine ends
otherwise than waiting (`Runs.watch`), that member's row only; and
every member again once ``poll_interval`` has passed since the last such read, for what no
run of this engine tells: members run by another process, or ended with no run here (a
cancel from elsewhere). Following N members that end one after another thus costs about N
reads of one row, plus one read of the group per poll interval; reading the group again at
each end (as `results` did before) cost N reads of N rows (issue 25: 40,000 rows decoded
for the 200 tasks of the BFCL replay). A member whose run here completed it comes with that
run's step outputs, so that `RunGroup.results` need not read its steps again.

Private to `agentq.workflows.groups`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection
from typing import Any

from agentq.clock import Clock
from agentq.store import WorkflowRow, WorkflowState
from agentq.workflows.model import RunResult, RunStatus
from agentq.workflows.waits import until

__all__ = ["ended_rows"]

Watch = Callable[[Callable[[str, asyncio.Task[RunResult]], None]], Callable[[], None]]
"""`Runs.watch`: tell a function the id and task of each run that ends; returns how to
stop."""


async def ended_rows(
    group_id: str,
    keys: Collection[str],
    *,
    read_all: Callable[[], Awaitable[dict[str, WorkflowRow]]],
    read_one: Callable[[str], Awaitable[WorkflowRow | None]],
    watch: Watch,
    clock: Clock,
    poll_interval: float,
) -> AsyncGenerator[tuple[str, WorkflowRow, tuple[Any, ...] | None], None]:
    """Yield ``(key, row, outputs)`` for each member once it has ended, until every key has
    been: `outputs` are the step outputs of the run of this engine that completed the member
    (its `RunResult.outputs`, as stored), or None when no such run was told (ended
    elsewhere, before, or otherwise than completed).

    Args:
        group_id: The group's id; member ``k`` is the workflow ``<group_id>/k``.
        keys: The members' keys (the manifest's).
        read_all: Reads the stored rows of the members, by key.
        read_one: Reads one workflow's stored row by id (None: not stored).
        watch: Tells the id of each run of this engine that ends (see `Watch`).
        clock: The engine's clock: the poll interval is measured on it.
        poll_interval: Seconds between reads of every member (> 0).

    Each read's ended members come in the order they ended (end time, then log position);
    those that ended before the call first. Use it on the engine's event loop.
    """
    prefix = group_id + "/"
    members = frozenset(keys)
    left = set(members)
    told: list[str] = []  # ids of members whose run ended since the last read, as told
    completed: dict[str, tuple[Any, ...]] = {}  # outputs of the runs told completing a member
    news: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def tell(workflow_id: str, run: asyncio.Task[RunResult]) -> None:
        if not workflow_id.startswith(prefix) or workflow_id[len(prefix):] not in members:
            return
        if _waits(run):
            return  # it waits (for input, a child run): its member has not ended
        result = _completed(run)
        if result is not None:
            completed[workflow_id] = result.outputs
        told.append(workflow_id)
        if not news.done():
            news.set_result(None)

    unwatch = watch(tell)  # before the first read: a run that ends after it is told
    try:
        rows = await read_all()
        polled = clock.time()
        while True:
            ended = sorted(
                (row for key, row in rows.items() if key in left and row.state.closed),
                key=lambda row: (row.updated_at, row.last_seq),
            )
            for row in ended:
                key = row.workflow_id[len(prefix):]
                left.discard(key)
                outputs = completed.pop(row.workflow_id, None)
                yield key, row, outputs if row.state is WorkflowState.COMPLETED else None
            if not left:
                return
            wait = polled + poll_interval - clock.time()
            if not told and wait > 0:
                await until(news, clock.sleep(wait))
            if news.done():
                news = asyncio.get_running_loop().create_future()
            rows = {}
            if clock.time() >= polled + poll_interval:
                rows = await read_all()
                polled = clock.time()
            # One read per run told, whether or not a poll came between: the reads depend
            # on the runs, not on the timing (a run's own row is the fresher one).
            ids = list(told)
            told.clear()
            for workflow_id in ids:
                found = await read_one(workflow_id)
                if found is not None:
                    rows[workflow_id[len(prefix):]] = found
    finally:
        unwatch()


def _completed(run: asyncio.Task[RunResult]) -> RunResult | None:
    """The result of a run that ended completed, else None."""
    if run.cancelled() or run.exception() is not None:
        return None
    result = run.result()
    return result if result.status is RunStatus.COMPLETED else None


def _waits(run: asyncio.Task[RunResult]) -> bool:
    """Whether a run that ended returned waiting (its workflow is still open)."""
    return not run.cancelled() and run.exception() is None and (
        run.result().status is RunStatus.WAITING
    )
