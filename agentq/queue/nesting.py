"""Waiting for room, and waiting from inside a job: where a queue could deadlock (BH-20).

A job that waits for another job of its own queue holds a permit while it waits. Three rules
keep such waits from hanging silently:

1. A nested `Queue.push_and_wait` (or ``await handle``) from inside a running job never
   waits for a permit of its own lane: a child that must run there, or that still waits in
   its lane, runs inline in the waiting job's task, on its permit (which would sit idle
   anyway). A child made while a sibling already runs inline takes a permit of the lane that
   is free at once (nothing queued before it), so the concurrent calls of one job (the tool
   calls of one model response) run side by side up to the lane's permits; those that find
   none take turns on the caller's permit (``record.lend``). A child for *another* lane
   goes through that lane and its permits (so a workflow step in MEDIUM can push tool calls
   into HIGH and LOW lanes), unless that lane could never free a permit — every permit held
   by a job waiting, directly or through other lanes, the same way — in which case it too
   runs inline: the wait that would close a cycle of lanes never starts.
2. Waiting for a job that is already running is refused with `DeadlockError` when that job
   waits, directly or through others, for the caller (``record.waiting_on`` edges).
3. A plain `Queue.push` from inside a job that must wait for room raises `DeadlockError`
   when the wait could never end: every permit of the full lane is held by a job that is
   itself waiting for room in a full lane in the same situation.

These rules are functions over the queue's `Dispatcher` (which admits, takes and abandons
records) and its `Ledger` (keys and lanes); the waits themselves are noted on the records
(`Record.wait_on`, `Record.block`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from agentq.errors import DeadlockError, QueueClosed
from agentq.outcomes import Outcome
from agentq.queue import persistence
from agentq.queue.dispatch import Dispatcher
from agentq.queue.jobs import Job
from agentq.queue.lane import CLAIMED, CLOSED, QUEUED, Lane
from agentq.queue.ledger import HIT_CACHED, HIT_JOINED, HIT_RUN
from agentq.queue.records import CURRENT, Record
from agentq.queue.runner import run_record


async def enqueue(dispatch: Dispatcher, job: Job) -> Record:
    """Claim `job`'s key and admit it to its lane, waiting for room when the lane is full."""
    rec = claim_and_admit(dispatch, job)
    if rec.state == CLAIMED:
        await wait_for_room(dispatch, rec)
    return rec


def claim_and_admit(dispatch: Dispatcher, job: Job) -> Record:
    """Claim `job`'s key and admit it to its lane if it has room now; else the record stays
    `CLAIMED` and the caller waits for room (`wait_for_room`). No coroutine: the common
    push (a lane with room) costs no await."""
    ledger = dispatch.ledger
    lane = ledger.lanes[job.priority]
    rec = ledger.keys.claim(ledger, job, lane)  # `Ledger.claim`, inline: once per job
    if not lane.space and lane.queued + lane.running < lane.limit:  # `Lane.has_room`
        dispatch.admit(rec)
    return rec


async def wait_for_room(dispatch: Dispatcher, rec: Record) -> None:
    """Wait until the claimed `rec` is admitted to its lane (or settled meanwhile).

    Raises:
        QueueClosed: The queue closed while waiting; the key was released.
        DeadlockError: From inside a job, when the wait could never end (rule 3).
    """
    ledger = dispatch.ledger
    lane = rec.lane
    fut: asyncio.Future[object] = ledger.running_loop().create_future()
    lane.wait_for_room(rec, fut)
    parent = CURRENT.get()
    root = None
    if parent is not None and parent.owner is ledger and parent.in_body:
        root = parent.root or parent
        root.block(lane)
        if _stuck(ledger.lanes.values(), lane):
            root.unblock(lane)
            lane.release_space(rec)
            dispatch.abandon(rec, "its push would wait forever")
            raise DeadlockError(
                f"{parent.title} pushed {rec.title} into lane {lane.priority}, which is "
                f"full (capacity {lane.capacity}, permits {lane.permits}), and every permit is "
                "held by a job waiting for room the same way: this wait could never end. "
                "Use push_and_wait (it runs the child inline), more capacity, or another lane"
            )
    try:
        await fut
    except asyncio.CancelledError:
        if rec.outcome is None and (rec.state == CLAIMED or rec.state == QUEUED):
            dispatch.abandon(rec, "its push was cancelled")
        raise
    finally:
        if root is not None:
            root.unblock(lane)
    if fut.result() is CLOSED:
        raise QueueClosed(f"the queue closed while {rec.title} waited for room")


def _stuck(
    lanes: Iterable[Lane[Record]], target: Lane[Record], *, for_room: bool = True
) -> bool:
    """Whether room (or, with ``for_room=False``, a permit) in `target` could never be made.

    The greatest fixpoint of rule 3: a lane is stuck when it is full and every permit holder
    waits for room or a permit in stuck lanes.
    """
    stuck = set(lanes)
    changed = True
    while changed:
        changed = False
        for lane in tuple(stuck):
            if (
                lane.running < lane.permits
                or (for_room and lane.has_room())
                or not all(
                    h.blocked and all(b in stuck for b in h.blocked) for h in lane.holders
                )
            ):
                stuck.discard(lane)
                changed = True
    return target in stuck


async def push_and_wait(dispatch: Dispatcher, job: Job, parent: Record) -> Outcome:
    """`Queue.push_and_wait` from inside `parent`'s body (rule 1)."""
    ledger = dispatch.ledger
    if ledger.store is None:
        rec = ledger.keys.get(job.key)
        code = HIT_RUN if rec is None else ledger.hit(job, rec)
    else:  # read the key's stored outcome first, if it must run
        code, rec = await persistence.answer(ledger, job)
    if code == HIT_CACHED:
        assert rec is not None and rec.outcome is not None
        return rec.outcome
    if code == HIT_JOINED:
        assert rec is not None
        return await join(dispatch, rec, parent)
    target = ledger.lanes[job.priority]
    root = parent.root or parent
    if target is not root.lane and not _would_block_forever(ledger.lanes.values(), target, root):
        return await _through_lane(dispatch, job, parent)
    rec = ledger.claim(job)
    lend = parent.lend
    if (
        lend is not None
        and lend.locked()  # a sibling runs inline on the caller's permit now
        and target is root.lane
        and target.running < target.permits
        and not target.queued
        and not target.space
        and target.has_room()
    ):
        dispatch.admit(rec)  # a free permit goes with it: it runs beside its caller
    try:
        return await join(dispatch, rec, parent)
    except asyncio.CancelledError:
        if rec.outcome is None and rec.state == CLAIMED:
            dispatch.abandon(rec, "its push_and_wait was cancelled")
        raise


def _would_block_forever(
    lanes: Iterable[Lane[Record]], target: Lane[Record], root: Record
) -> bool:
    """Whether `root` waiting for a permit of `target` would close a cycle of lanes."""
    root.block(target)
    try:
        return _stuck(lanes, target, for_room=False)
    finally:
        root.unblock(target)


async def _through_lane(dispatch: Dispatcher, job: Job, parent: Record) -> Outcome:
    """A nested call into another lane: admitted there, run on one of its permits."""
    rec = await enqueue(dispatch, job)
    lane = rec.lane
    root = parent.root or parent
    root.block(lane)
    parent.wait_on(rec)
    try:
        outcome = rec.outcome
        return outcome if outcome is not None else await rec.wait()
    except asyncio.CancelledError:
        if rec.outcome is None and rec.state == QUEUED:
            dispatch.abandon(rec, "its push_and_wait was cancelled")
        raise
    finally:
        root.unblock(lane)
        parent.stop_waiting_on(rec)


async def await_record(dispatch: Dispatcher, rec: Record) -> Outcome:
    """`await handle`: a plain wait, or from inside a job of this queue a nested join."""
    ledger = dispatch.ledger
    ledger.bind()
    parent = CURRENT.get()
    if parent is not None and parent.owner is ledger and parent.in_body:
        return await join(dispatch, rec, parent)
    return await rec.wait()


async def join(dispatch: Dispatcher, rec: Record, parent: Record) -> Outcome:
    """Wait for `rec` from inside `parent`'s body: run it inline if it has not started."""
    while True:
        outcome = rec.outcome
        if outcome is not None:
            return outcome
        if rec.state == CLAIMED or rec.state == QUEUED:
            await _run_inline(dispatch, rec, parent)
            continue
        if rec.waits_for(parent):
            raise DeadlockError(
                f"{parent.title} would wait for {rec.title}, which is waiting for "
                f"{parent.title}: this wait could never end"
            )
        parent.wait_on(rec)
        try:
            return await rec.wait()
        finally:
            parent.stop_waiting_on(rec)


async def _run_inline(dispatch: Dispatcher, rec: Record, parent: Record) -> None:
    parent.wait_on(rec)
    try:
        async with parent.lend_lock():
            if rec.outcome is None and (rec.state == CLAIMED or rec.state == QUEUED):
                dispatch.take(rec)
                rec.root = parent.root or parent
                task = asyncio.current_task()
                assert task is not None
                await run_record(dispatch.ledger, rec, task)
    finally:
        parent.stop_waiting_on(rec)
