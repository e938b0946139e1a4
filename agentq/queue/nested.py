"""Waiting for room, and waiting from inside a job: where a queue could deadlock (BH-20).

A job that waits for another job of its own queue holds a permit while it waits. Three rules
keep such waits from hanging silently:

1. A nested `Queue.push_and_wait` (or ``await handle``) from inside a running job never
   waits for a permit of its own lane: a child that must run there, or that still waits in
   its lane, runs inline in the waiting job's task, on its permit (which would sit idle
   anyway). Several nested calls made concurrently by one job take turns on that permit
   (``record.lend``), so a job never uses more than one permit. A child for *another* lane
   goes through that lane and its permits (so a workflow step in MEDIUM can push tool calls
   into HIGH and LOW lanes), unless that lane could never free a permit — every permit held
   by a job waiting, directly or through other lanes, the same way — in which case it too
   runs inline: the wait that would close a cycle of lanes never starts.
2. Waiting for a job that is already running is refused with `DeadlockError` when that job
   waits, directly or through others, for the caller (``record.waiting_on`` edges).
3. A plain `Queue.push` from inside a job that must wait for room raises `DeadlockError`
   when the wait could never end: every permit of the full lane is held by a job that is
   itself waiting for room in a full lane in the same situation.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from agentq.errors import DeadlockError, QueueClosed
from agentq.outcomes import Outcome
from agentq.queue.jobs import CLAIMED, HIT_CACHED, HIT_JOINED, QUEUED, RUNNING, Job, _Record
from agentq.queue.runner import CURRENT, run_record

if TYPE_CHECKING:
    from agentq.queue.core import _QueueCore as Queue
    from agentq.queue.lanes import _Lane

CLOSED: Any = object()
"""Result given to a push waiting for room when the queue closes."""


async def wait_for_room(queue: Queue, rec: _Record) -> None:
    """Wait until the claimed `rec` is admitted to its lane (or settled meanwhile).

    Raises:
        QueueClosed: The queue closed while waiting; the key was released.
        DeadlockError: From inside a job, when the wait could never end (rule 3).
    """
    lane = rec.lane
    fut: asyncio.Future[Any] = queue._loop_or_raise().create_future()
    lane.space.append((rec, fut))
    parent = CURRENT.get()
    root = None
    if parent is not None and parent.queue is queue and parent.in_body:
        root = parent.root
        blocked = _blocked(root)
        blocked.append(lane)
        if _stuck(queue, lane):
            blocked.remove(lane)
            release_space(rec)
            queue._abandon(rec, "its push would wait forever")
            raise DeadlockError(
                f"job {parent.key!r} pushed {rec.key!r} into lane {lane.priority}, which is "
                f"full (capacity {lane.capacity}, permits {lane.permits}), and every permit is "
                "held by a job waiting for room the same way: this wait could never end. "
                "Use push_and_wait (it runs the child inline), more capacity, or another lane"
            )
    try:
        await fut
    except asyncio.CancelledError:
        if rec.outcome is None and (rec.state == CLAIMED or rec.state == QUEUED):
            queue._abandon(rec, "its push was cancelled")
        raise
    finally:
        if root is not None and root.blocked is not None:
            root.blocked.remove(lane)
    if fut.result() is CLOSED:
        raise QueueClosed(f"the queue closed while job {rec.key!r} waited for room")


async def enqueue(queue: Queue, job: Job) -> _Record:
    """Claim `job`'s key and admit it to its lane, waiting for room when the lane is full."""
    rec = queue._claim(job)
    lane = rec.lane
    if not lane.space and lane.has_room():
        queue._admit(rec)
    else:
        await wait_for_room(queue, rec)
    return rec


def release_space(rec: _Record) -> None:
    """Take a claimed record out of its lane's room waiters and let its push return."""
    space = rec.lane.space
    for i, (other, fut) in enumerate(space):
        if other is rec:
            del space[i]
            if not fut.done():
                fut.set_result(None)
            return


def _stuck(queue: Queue, target: _Lane, *, for_room: bool = True) -> bool:
    """Whether room (or, with ``for_room=False``, a permit) in `target` could never be made.

    The greatest fixpoint of rule 3: a lane is stuck when it is full and every permit holder
    waits for room or a permit in stuck lanes.
    """
    stuck = set(queue._lanes.values())
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


async def push_and_wait(queue: Queue, job: Job, parent: _Record) -> Outcome:
    """`Queue.push_and_wait` from inside `parent`'s body (rule 1)."""
    rec = queue._keys.get(job.key)
    if rec is not None:
        code = queue._hit(job, rec)
        if code == HIT_CACHED:
            assert rec.outcome is not None
            return rec.outcome
        if code == HIT_JOINED:
            return await join(queue, rec, parent)
    target = queue._lanes[job.priority]
    root = parent.root
    if target is not root.lane and not _would_block_forever(queue, target, root):
        return await _through_lane(queue, job, parent)
    rec = queue._claim(job)
    try:
        return await join(queue, rec, parent)
    except asyncio.CancelledError:
        if rec.outcome is None and rec.state == CLAIMED:
            queue._abandon(rec, "its push_and_wait was cancelled")
        raise


def _would_block_forever(queue: Queue, target: _Lane, root: _Record) -> bool:
    """Whether `root` waiting for a permit of `target` would close a cycle of lanes."""
    blocked = _blocked(root)
    blocked.append(target)
    try:
        return _stuck(queue, target, for_room=False)
    finally:
        blocked.remove(target)


async def _through_lane(queue: Queue, job: Job, parent: _Record) -> Outcome:
    """A nested call into another lane: admitted there, run on one of its permits."""
    rec = await enqueue(queue, job)
    lane = rec.lane
    root = parent.root
    blocked = _blocked(root)
    blocked.append(lane)
    edges = _edges(parent)
    edges.append(rec)
    try:
        outcome = rec.outcome
        return outcome if outcome is not None else await queue._wait(rec)
    except asyncio.CancelledError:
        if rec.outcome is None and rec.state == QUEUED:
            queue._abandon(rec, "its push_and_wait was cancelled")
        raise
    finally:
        blocked.remove(lane)
        edges.remove(rec)


async def join(queue: Queue, rec: _Record, parent: _Record) -> Outcome:
    """Wait for `rec` from inside `parent`'s body: run it inline if it has not started."""
    while True:
        outcome = rec.outcome
        if outcome is not None:
            return outcome
        if rec.state == CLAIMED or rec.state == QUEUED:
            await _run_inline(queue, rec, parent)
            continue
        if rec.waits_for(parent):
            raise DeadlockError(
                f"job {parent.key!r} would wait for job {rec.key!r}, which is waiting for "
                f"{parent.key!r}: this wait could never end"
            )
        edges = _edges(parent)
        edges.append(rec)
        try:
            return await queue._wait(rec)
        finally:
            edges.remove(rec)


async def _run_inline(queue: Queue, rec: _Record, parent: _Record) -> None:
    edges = _edges(parent)
    edges.append(rec)
    try:
        lock = parent.lend
        if lock is None:
            lock = parent.lend = asyncio.Lock()
        async with lock:
            if rec.outcome is None and (rec.state == CLAIMED or rec.state == QUEUED):
                _take(queue, rec)
                rec.root = parent.root
                task = asyncio.current_task()
                assert task is not None
                await run_record(queue, rec, task)
    finally:
        edges.remove(rec)


def _take(queue: Queue, rec: _Record) -> None:
    """Take a record that has not started out of its lane, to run it inline."""
    if rec.state == QUEUED:
        rec.state = RUNNING
        rec.lane.queued -= 1
        queue._freed(rec.lane)
    else:
        rec.state = RUNNING
        release_space(rec)


def _blocked(root: _Record) -> list[_Lane]:
    """The lanes `root` (a job holding a permit) waits on for room or a permit."""
    blocked = root.blocked
    if blocked is None:
        blocked = root.blocked = []
    return blocked


def _edges(rec: _Record) -> list[_Record]:
    edges = rec.waiting_on
    if edges is None:
        edges = rec.waiting_on = []
    return edges
