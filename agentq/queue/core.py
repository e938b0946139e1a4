"""The queue's mechanism: the key table, admission, lane workers, settling, events.

`Queue` (in `agentq.queue`) is the public face: small methods over this class. The helpers
in `_runner`, `_nested` and `_shutdown` work on it too.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from agentq.clock import Clock
from agentq.errors import JobLost, KeyConflictError, QueueClosed, WrongLoopError
from agentq.outcomes import Completed, ErrorInfo, Failed, FailureReason, Outcome
from agentq.queue import nested as _nested
from agentq.queue import shutdown as _shutdown
from agentq.queue.fingerprint import derive_fingerprint
from agentq.queue.jobs import (
    CLAIMED,
    DISPATCHED,
    HIT_CACHED,
    HIT_JOINED,
    HIT_RUN,
    LOST,
    NO_FINGERPRINT,
    QUEUED,
    RUNNING,
    Job,
    JobEvent,
    JobEventKind,
    _Record,
    wake,
)
from agentq.queue.lanes import LANE_ORDER, LaneConfig, Priority, _Lane
from agentq.queue.runner import CURRENT, cancelled_outcome, interrupt, run_record

_FAIRNESS = 64  # a worker yields to the loop after this many jobs in a row


def short_repr(value: object, limit: int = 120) -> str:
    """`repr(value)`, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


class _QueueCore:
    """State and mechanism of a `Queue` (see the module docstring)."""

    def __init__(
        self,
        configs: dict[Priority, LaneConfig],
        key_ttl: float | None,
        max_keys: int | None,
        clock: Clock,
    ) -> None:
        self._lanes = {p: _Lane(p, configs.get(p, LaneConfig())) for p in LANE_ORDER}
        self._key_ttl = key_ttl
        self._max_keys = max_keys
        self._clock: Clock = clock
        self._keys: dict[str, _Record] = {}
        # Records whose outcome was decided while their body still runs (a timed-out thread,
        # a body ignoring cancellation), by key: the key's next run waits for them to stop.
        self._unstopped: dict[str, _Record] = {}
        self._finished: OrderedDict[str, _Record] = OrderedDict()
        self._subscribers: tuple[Callable[[JobEvent], object], ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._closer: asyncio.Future[Any] | None = None
        self._watch: asyncio.Future[None] | None = None  # woken when a permit is released

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._loop is not None:
                raise WrongLoopError(
                    "this Queue started on another event loop and belongs to it; "
                    "create one Queue per event loop"
                )
            self._loop = loop
        return loop

    def _loop_or_raise(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the queue has not started")
        return self._loop

    def _enter(self, job: Job, *, nested: bool) -> None:
        if type(job) is not Job and not isinstance(job, Job):
            raise TypeError(f"expected a Job, got {short_repr(job)}")
        if asyncio.get_running_loop() is not self._loop:
            self._bind()
        if self._closing and not nested:
            raise QueueClosed(f"the queue is closed: job {job.key!r} not admitted")

    def _hit(self, job: Job, rec: _Record) -> int:
        """Answer a push of a known key: HIT_RUN, HIT_CACHED or HIT_JOINED."""
        outcome = rec.outcome
        if outcome is None:
            self._same_call(job, rec)
            self._lanes[job.priority].joins += 1
            if self._subscribers:
                self._emit(JobEventKind.JOINED, job.key, job.priority, None, None)
            return HIT_JOINED
        if type(outcome) is Completed:
            if self._key_ttl is not None and self._expired(rec):
                self._drop(rec)
                return HIT_RUN
            self._same_call(job, rec)
            self._lanes[job.priority].cache_hits += 1
            if self._subscribers:
                self._emit(JobEventKind.CACHED, job.key, job.priority, None, outcome)
            return HIT_CACHED
        return HIT_RUN

    def _same_call(self, job: Job, rec: _Record) -> None:
        first = rec.job
        if job is first or (job.fn is first.fn and job.fingerprint == first.fingerprint):
            return
        mine = job.fingerprint if job.fingerprint is not None else derive_fingerprint(job.fn)
        theirs = rec.fp
        if theirs is NO_FINGERPRINT:
            theirs = rec.fp = (
                first.fingerprint if first.fingerprint is not None else derive_fingerprint(first.fn)
            )
        if mine != theirs:
            if first.fingerprint is not None or job.fingerprint is not None:
                was, now = first.fingerprint, job.fingerprint
            else:
                was, now = first.fn, job.fn
            what = f"{short_repr(was, 80)}, now {short_repr(now, 80)}"
            raise KeyConflictError(
                f"idempotency key {job.key!r} is already used for another call (first {what});"
                " use another key, forget() this one, or give both jobs the same fingerprint="
            )

    def _claim(self, job: Job) -> _Record:
        """Make a record for `job` and make it the key's record (keeping a Failed one as prev)."""
        key = job.key
        prev = self._keys.get(key)
        rec = _Record(self, job, self._lanes[job.priority], prev)
        self._keys[key] = rec
        return rec

    def _admit(self, rec: _Record) -> None:
        """Put a claimed record into its lane.

        A free permit goes with it at once (to an idle worker, or to a new worker); only when
        every permit is in use does it wait in the deque. So ``queued > 0`` implies
        ``running == permits`` at every point another piece of code can observe.
        """
        lane = rec.lane
        idle = lane.idle
        while idle:
            worker = idle.pop()
            if not worker.done():  # skip a worker cancelled while idle
                lane.running += 1
                rec.state = DISPATCHED
                lane.holders.add(rec)
                worker.set_result(rec)
                break
        else:
            if lane.running < lane.permits and len(lane.workers) < lane.permits:
                first = rec
                if lane.queued:
                    # Only after a worker was cancelled from outside: the records it left
                    # waiting go first, so the lane stays FIFO.
                    rec.state = QUEUED
                    lane.waiting.append(rec)
                    lane.queued += 1
                    first = self._next_queued(lane)  # type: ignore[assignment]
                else:
                    rec.state = DISPATCHED
                    lane.holders.add(rec)
                lane.running += 1
                self._spawn(lane, first)
            else:
                rec.state = QUEUED
                lane.waiting.append(rec)
                lane.queued += 1
        if self._subscribers:
            self._emit(JobEventKind.QUEUED, rec.key, lane.priority, None, None)

    def _spawn(self, lane: _Lane, first: _Record) -> None:
        loop = self._loop_or_raise()
        task = loop.create_task(self._work(lane, first), name=f"agentq-{lane.priority}-worker")
        lane.workers.add(task)
        task.add_done_callback(lane.workers.discard)

    @staticmethod
    def _next_queued(lane: _Lane) -> _Record | None:
        """Take the next live record from the waiting area (the caller passes it a permit)."""
        waiting = lane.waiting
        while waiting:
            rec = waiting.popleft()
            if rec.state == QUEUED:  # else: a tombstone of a cancelled or stolen record
                lane.queued -= 1
                rec.state = DISPATCHED
                lane.holders.add(rec)
                return rec
        return None

    async def _work(self, lane: _Lane, rec: _Record | None) -> None:
        """A lane worker: holds one permit while it runs a record, then passes it on.

        A finishing job hands its permit straight to the next waiting record; with none
        waiting, the worker registers as idle *before* room is announced, so that a push
        admitted by that room is handed to it directly.
        """
        holders = lane.holders
        loop = self._loop_or_raise()
        task = asyncio.current_task()
        assert task is not None
        streak = 0
        idle: asyncio.Future[_Record | None] | None = None
        while True:
            if rec is None:
                if idle is None:
                    if self._closing:
                        return
                    idle = loop.create_future()
                    lane.idle.append(idle)
                try:
                    rec = await idle
                except asyncio.CancelledError:
                    _shutdown.worker_cancelled(lane, idle)
                    raise
                idle = None
                if rec is None:
                    return
                streak = 0
            elif streak >= _FAIRNESS:  # jobs that never suspend must not starve the loop
                streak = 0
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:
                    _shutdown.requeue(lane, rec)
                    raise
            try:
                if rec.outcome is None:
                    await run_record(self, rec, task)
            except asyncio.CancelledError:  # from outside (the loop shutting down): stop
                holders.discard(rec)
                lane.running -= 1
                rec.mark_stopped()
                self._freed(lane)
                raise
            except BaseException as exc:
                # run_record lets out only KeyboardInterrupt (by design), a GeneratorExit of
                # this coroutine being closed, and faults outside any job body (a broken
                # clock...); the job is settled. The lane goes on.
                if type(exc) is GeneratorExit:
                    raise
                holders.discard(rec)
                rec.mark_stopped()
                if isinstance(exc, KeyboardInterrupt | SystemExit):
                    rec = self._next_queued(lane)
                    if rec is None:
                        lane.running -= 1
                    else:  # the permit passes to a new worker, in FIFO order
                        self._spawn(lane, rec)
                    self._freed(lane)
                    raise
                loop.call_exception_handler(
                    {
                        "message": f"agentq: job {rec.key!r} ended by an error outside its body",
                        "exception": exc,
                        "task": task,
                    }
                )
            holders.discard(rec)
            rec.mark_stopped()
            streak += 1
            rec = self._next_queued(lane)
            if rec is None:
                lane.running -= 1
                if not self._closing:
                    idle = loop.create_future()
                    lane.idle.append(idle)
            self._freed(lane)

    def _freed(self, lane: _Lane) -> None:
        """Room was made in `lane`: admit pushes waiting for it, wake a draining close."""
        space = lane.space
        while space and lane.has_room():
            rec, fut = space.popleft()
            if fut.done():
                continue  # the push was cancelled or settled meanwhile
            self._admit(rec)
            fut.set_result(None)
        watch = self._watch
        if watch is not None and not watch.done():
            watch.set_result(None)

    async def _wait(self, rec: _Record) -> Outcome:
        """Wait for `rec`'s outcome; cancelling the wait leaves the job alone."""
        fut: asyncio.Future[Outcome] = self._loop_or_raise().create_future()
        waiters = rec.waiters
        if waiters is None:
            rec.waiters = waiters = []
        waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut in waiters:
                waiters.remove(fut)
            raise

    async def _await_record(self, rec: _Record) -> Outcome:
        """`await handle`: a plain wait, or from inside a job a nested join."""
        self._bind()
        parent = CURRENT.get()
        if parent is not None and parent.queue is self and parent.in_body:
            return await _nested.join(self, rec, parent)
        return await self._wait(rec)

    def _resolve(self, rec: _Record, outcome: Outcome, kind: JobEventKind) -> None:
        rec.outcome = outcome
        waiters = rec.waiters
        if waiters is not None:
            rec.waiters = None
            wake(waiters, outcome)
        if self._subscribers:
            self._emit(kind, rec.key, rec.job.priority, rec.attempt or None, outcome)

    def _settle(self, rec: _Record, outcome: Outcome) -> bool:
        """Give `rec` its terminal outcome, once; later calls lose the race and return False."""
        if rec.outcome is not None:
            return False
        lane = rec.lane
        if type(outcome) is Completed:
            lane.completed += 1
            kind = JobEventKind.COMPLETED
        else:
            lane.failed += 1
            kind = JobEventKind.FAILED
        if self._keys.get(rec.key) is rec:
            self._remember(rec)
        if kind is JobEventKind.FAILED and rec.in_body:
            self._unstopped[rec.key] = rec  # until mark_stopped: the key's next run waits
        rec.prev = None
        self._resolve(rec, outcome, kind)
        return True

    def _abandon(self, rec: _Record, why: str) -> None:
        """Give up a record that never ran: release its key and tell its waiters `JobLost`."""
        if rec.outcome is not None:
            return
        lane = rec.lane
        was_queued = rec.state == QUEUED
        if was_queued:
            lane.queued -= 1
        rec.state = LOST
        key = rec.key
        if self._keys.get(key) is rec:
            prev = rec.prev
            if prev is not None and self._finished.get(key) is prev:
                self._keys[key] = prev
            else:
                del self._keys[key]
        rec.prev = None
        rec.mark_stopped()
        exc = JobLost(f"job {key!r} was abandoned before it ran: {why}")
        self._resolve(
            rec,
            Failed(FailureReason.CANCELLED, ErrorInfo.from_exception(exc), exc),
            JobEventKind.LOST,
        )
        if was_queued:
            self._freed(lane)

    def _cancel(self, rec: _Record) -> bool:
        """`JobHandle.cancel`: settle as cancelled, then take it out of its lane or interrupt it."""
        if rec.outcome is not None:
            return False
        running = asyncio.events._get_running_loop()
        if running is not None and self._loop is not None and running is not self._loop:
            raise WrongLoopError("this job's queue belongs to another event loop")
        state = rec.state
        ran = state == RUNNING
        message = f"job {rec.key!r} was cancelled " + ("while running" if ran else "before it ran")
        self._settle(rec, cancelled_outcome(message))
        if state == QUEUED:
            rec.mark_stopped()
            rec.lane.queued -= 1
            self._freed(rec.lane)
        elif state == CLAIMED:
            rec.mark_stopped()
            _nested.release_space(rec)
        elif ran:
            interrupt(rec)
        return True

    def _remember(self, rec: _Record) -> None:
        """Record a finished key, then apply `key_ttl` and `max_keys`."""
        finished = self._finished
        key = rec.key
        if self._key_ttl is not None:
            now = rec.finished_at = self._clock.time()
            self._purge(now)
        finished.pop(key, None)
        finished[key] = rec
        limit = self._max_keys
        if limit is not None:
            keys = self._keys
            while len(finished) > limit:
                old_key, old = finished.popitem(last=False)
                if keys.get(old_key) is old:
                    del keys[old_key]

    def _purge(self, now: float) -> None:
        ttl = self._key_ttl
        assert ttl is not None
        finished = self._finished
        keys = self._keys
        while finished:
            old_key = next(iter(finished))
            old = finished[old_key]
            if now - old.finished_at < ttl:
                break
            del finished[old_key]
            if keys.get(old_key) is old:
                del keys[old_key]

    def _expired(self, rec: _Record) -> bool:
        assert self._key_ttl is not None
        return self._clock.time() - rec.finished_at >= self._key_ttl

    def _drop(self, rec: _Record) -> None:
        key = rec.key
        if self._keys.get(key) is rec:
            del self._keys[key]
        if self._finished.get(key) is rec:
            del self._finished[key]

    def _emit(
        self,
        kind: JobEventKind,
        key: str,
        priority: Priority,
        attempt: int | None,
        outcome: Outcome | None,
    ) -> None:
        event = JobEvent(kind, key, priority, self._clock.time(), attempt, outcome)
        for callback in self._subscribers:
            try:
                callback(event)
            except Exception as exc:
                loop = self._loop
                if loop is None:
                    raise
                message = f"agentq: a job event subscriber raised on {kind}"
                loop.call_exception_handler({"message": message, "exception": exc})

