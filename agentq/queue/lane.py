"""One lane's mechanism: its permits, its waiting area, its workers and its room waiters.

A `Lane` owns everything that moves records through one priority lane, and nothing else: it
knows records only through `Entry` (their state and outcome), so it sits below the record
itself. It never starts a task: `admit` and `hand_on` say which record a permit goes to, and
the dispatcher (`agentq.queue.dispatch`) starts the worker that runs it.

The waiting area is a deque of admitted records. A record that leaves it before it ran
(cancelled, abandoned, taken to run inline) stays in the deque as a tombstone, skipped by
`next_queued` since its state is no longer `QUEUED`, so leaving is O(1); `queued` counts the
live ones. Workers are started lazily, one per permit held: a worker lives exactly as long as
it holds a permit (`running` counts both), passing it from record to record while records
wait, and ends when none waits (it never parks idle). A push that finds no room waits on a
future in `space` (FIFO), resolved once it is admitted (None) or refused (`CLOSED`).

A *gated* lane (one with a `LaneConfig.rate` or `tokens` budget, one that a failure paused,
or every lane of a queue with ``total_permits``) never gives a permit by itself: `admit`
only queues the record and `hand_on` releases the permit, and the queue's arbiter
(`agentq.queue.arbitration`) decides which waiting record of which lane gets the next
permit, when its budgets allow. The lane keeps its own budgets (`starts`, `token_budget`)
and pause (`paused_until`).
"""

from __future__ import annotations

from asyncio import Future, Task
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from agentq.queue.lanes import LaneConfig, LaneStats, Priority
from agentq.queue.rates import Window

# Record states: where a record is on its way through its lane.
CLAIMED = 0  # a push claimed the key and waits for room in the lane (or to run inline)
QUEUED = 1  # admitted: in the lane's waiting area
DISPATCHED = 2  # given a permit (a worker), not started yet
RUNNING = 3  # attempts in progress (worker or inline)
STOPPED = 4  # the body has really stopped; the permit is released
LOST = 5  # abandoned before it ran

CLOSED: Any = object()
"""Result given to a push waiting for room when the queue closes."""


class Entry(Protocol):
    """What a lane needs of the records it moves (`agentq.queue.records.Record`)."""

    state: int

    @property
    def outcome(self) -> object | None: ...


R = TypeVar("R", bound=Entry)


class Lane(Generic[R]):
    """The permits, waiting area, workers and room waiters of one priority lane.

    Attributes are read by the other mechanisms (counters, `holders` for deadlock detection,
    `waiting` when the queue closes); they are changed only by these methods, except the
    statistics counters (`completed`, `failed`, `cache_hits`, `joins`).
    """

    __slots__ = (
        "cache_hits",
        "capacity",
        "completed",
        "failed",
        "gated",
        "holders",
        "joins",
        "limit",
        "on_pause",
        "paused_until",
        "permits",
        "priority",
        "queued",
        "running",
        "space",
        "starts",
        "token_budget",
        "waiting",
        "worker_name",
        "workers",
    )

    def __init__(self, priority: Priority, config: LaneConfig) -> None:
        self.priority = priority
        # Budgets: jobs started and tokens charged per window (None: no limit).
        self.starts = None if config.rate is None else Window(config.rate)
        self.token_budget = None if config.tokens is None else Window(config.tokens)
        self.paused_until = 0.0  # clock time before which no job of the lane starts
        # Told of a pause this process decided (a store shares it: `agentq.queue.budgets`).
        self.on_pause: Callable[[float], None] | None = None
        # The arbiter gives this lane's permits (budgets, a pause, or shared permits).
        self.gated = self.starts is not None or self.token_budget is not None
        self.capacity = config.capacity
        self.permits = config.permits
        self.limit = config.permits + config.capacity
        self.waiting: deque[R] = deque()
        self.queued = 0
        self.running = 0
        # Records run by this lane's workers (each holds one permit), for deadlock detection.
        self.holders: set[R] = set()
        # Pushes waiting for room, FIFO: (record, future resolved once admitted or settled).
        self.space: deque[tuple[R, Future[Any]]] = deque()
        # The live worker tasks, kept reachable while the queue lives (a worker adds and
        # removes itself).
        self.workers: set[Task[None]] = set()
        self.worker_name = f"agentq-{priority}-worker"
        self.completed = 0
        self.failed = 0
        self.cache_hits = 0
        self.joins = 0

    def has_room(self) -> bool:
        """Whether one more job may be admitted now."""
        return self.queued + self.running < self.limit

    def snapshot(self, now: float) -> LaneStats:
        """A frozen copy of the counters; `now` (clock time) dates the rate windows."""
        starts = self.starts
        tokens = self.token_budget
        return LaneStats(
            priority=self.priority,
            capacity=self.capacity,
            permits=self.permits,
            queued=self.queued,
            running=self.running,
            completed=self.completed,
            failed=self.failed,
            cache_hits=self.cache_hits,
            joins=self.joins,
            paused_until=self.paused_until if self.paused_until > now else None,
            window_starts=None if starts is None else starts.usage(now),
            window_tokens=None if tokens is None else tokens.usage(now),
        )

    def pause(self, until: float, *, share: bool = True) -> None:
        """Start no job of this lane before clock time `until`; the lane becomes gated.

        With `share` (a failure here asked for it), `on_pause` is told, if set; a pause read
        from a store is not told back.
        """
        if until > self.paused_until:
            self.paused_until = until
        if share and self.on_pause is not None:
            self.on_pause(until)
        self.gated = True

    # ------------------------------------------------------------ permits and workers

    def admit(self, rec: R) -> R | None:
        """Put a claimed record into the lane; return the record a new worker must start with.

        A free permit goes with it at once, to a new worker the caller starts (returns the
        record it starts with). Only when every permit is in use does it wait in the deque
        (returns None). So ``queued > 0`` implies ``running == permits`` at every point
        another piece of code can observe, except in a gated lane: there the record always
        waits (returns None) for the arbiter to give it a permit.
        """
        if self.running < self.permits and not self.gated:
            first: R | None = rec
            if self.queued:
                # Only after a worker was cancelled from outside: the records it left
                # waiting go first, so the lane stays FIFO.
                rec.state = QUEUED
                self.waiting.append(rec)
                self.queued += 1
                first = self.next_queued()
            else:
                rec.state = DISPATCHED
                self.holders.add(rec)
            self.running += 1
            return first
        rec.state = QUEUED
        self.waiting.append(rec)
        self.queued += 1
        return None

    def next_queued(self) -> R | None:
        """Take the next live record from the waiting area (the caller passes it a permit)."""
        waiting = self.waiting
        while waiting:
            rec = waiting.popleft()
            if rec.state == QUEUED:  # else: a tombstone of a cancelled or stolen record
                self.queued -= 1
                rec.state = DISPATCHED
                self.holders.add(rec)
                return rec
        return None

    def hand_on(self, done: R) -> R | None:
        """A worker finished `done`: pass its permit to the next waiting record (returned), or
        release the permit (None: the worker ends). A gated lane always releases it: the
        arbiter gives it on."""
        holders = self.holders
        holders.discard(done)
        waiting = self.waiting
        while waiting and not self.gated:  # as next_queued, inline: this runs once per job
            rec = waiting.popleft()
            if rec.state == QUEUED:
                self.queued -= 1
                rec.state = DISPATCHED
                holders.add(rec)
                return rec
        self.running -= 1
        return None

    def grant(self) -> R | None:
        """Give a permit of this lane to its next waiting record (the arbiter's choice)."""
        rec = self.next_queued()
        if rec is not None:
            self.running += 1
        return rec

    def peek_queued(self) -> R | None:
        """The next live record of the waiting area, left in place (tombstones are dropped)."""
        waiting = self.waiting
        while waiting:
            rec = waiting[0]
            if rec.state == QUEUED:
                return rec
            waiting.popleft()
        return None

    def release_permit(self, rec: R) -> None:
        """Give back the permit `rec` held (its worker stops)."""
        self.holders.discard(rec)
        self.running -= 1

    def requeue(self, rec: R) -> None:
        """Give back the permit of a record a cancelled worker had not started."""
        self.release_permit(rec)
        if rec.outcome is None:
            rec.state = QUEUED
            self.waiting.appendleft(rec)
            self.queued += 1

    # ------------------------------------------------------------ the waiting area

    def leave(self, rec: R, state: int) -> None:
        """`rec` leaves the waiting area before it ran, for `state` (`STOPPED` or `LOST`); its
        deque entry stays as a tombstone."""
        rec.state = state
        self.queued -= 1

    def take(self, rec: R) -> bool:
        """Take a record that has not started (claimed or waiting) out of the lane, to run it
        elsewhere (inline); True if it left the waiting area, which made room."""
        if rec.state == QUEUED:
            rec.state = RUNNING
            self.queued -= 1
            return True
        rec.state = RUNNING
        self.release_space(rec)
        return False

    def clear_waiting(self) -> None:
        """Forget the waiting area (the queue closed; every live record was abandoned)."""
        self.waiting.clear()

    # ------------------------------------------------------------ pushes waiting for room

    def wait_for_room(self, rec: R, fut: Future[Any]) -> None:
        """Queue a claimed record's push for room; `fut` is resolved once it is admitted."""
        self.space.append((rec, fut))

    def next_admissible(self) -> tuple[R, Future[Any]] | None:
        """Take the first push still waiting for room, if there is room for it now."""
        space = self.space
        while space and self.has_room():
            rec, fut = space.popleft()
            if not fut.done():  # else: the push was cancelled or settled meanwhile
                return rec, fut
        return None

    def next_room_waiter(self) -> tuple[R, Future[Any]] | None:
        """Take the first push still waiting for room, room or not (the queue is closing)."""
        space = self.space
        while space:
            rec, fut = space.popleft()
            if not fut.done():
                return rec, fut
        return None

    def release_space(self, rec: R) -> None:
        """Take a claimed record out of the room waiters and let its push return."""
        space = self.space
        for i, (other, fut) in enumerate(space):
            if other is rec:
                del space[i]
                if not fut.done():
                    fut.set_result(None)
                return
