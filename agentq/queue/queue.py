"""The in-process job queue: idempotency keys, priority lanes, backpressure, isolation.

See `Queue`. How a push travels through the queue is told in ``docs/queue-internals.md``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from agentq.clock import Clock, SystemClock
from agentq.errors import JobFailed, JobLost, QueueFull
from agentq.keys import validate_key
from agentq.outcomes import Completed, Failed, Outcome, State
from agentq.outcomes import Pending as _Pending
from agentq.outcomes import Processing as _Processing
from agentq.queue import nested as _nested
from agentq.queue import shutdown as _shutdown
from agentq.queue.core import _QueueCore
from agentq.queue.jobs import (
    HIT_CACHED,
    HIT_JOINED,
    QUEUED,
    Accepted,
    Cached,
    InFlight,
    Job,
    JobEvent,
    JobEventKind,
    JobHandle,
    Queued,
    as_priority,
)
from agentq.queue.lanes import LANE_ORDER, LaneConfig, Priority, QueueStats
from agentq.queue.runner import CURRENT

__all__ = ["CloseReport", "Queue"]

_PENDING = _Pending()
_PROCESSING = _Processing()


@dataclass(frozen=True, slots=True)
class CloseReport:
    """What `Queue.close` had to abandon.

    Attributes:
        dropped: Keys of admitted jobs that never ran. Their handles yield
            ``Failed(cancelled)`` whose exception is `JobLost`, and their keys were released.
        cancelled: Keys of running jobs that were cancelled (``Failed(cancelled)``).
        unstopped: Keys of cancelled jobs whose body had not stopped when close returned (a
            thread, or a body that ignores cancellation); each keeps its permit until it does.
    """

    dropped: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()
    unstopped: tuple[str, ...] = ()

    @property
    def abandoned(self) -> tuple[str, ...]:
        """Every job that did not finish on its own: ``dropped + cancelled``."""
        return self.dropped + self.cancelled

    @property
    def clean(self) -> bool:
        """Whether every admitted job finished on its own."""
        return not (self.dropped or self.cancelled or self.unstopped)


def _check_ttl(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds or None, got {value!r}")
    try:
        valid = math.isfinite(value) and value >= 0
    except OverflowError:  # an int beyond the float range
        valid = False
    if not valid:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")


def _unwrap(key: str, outcome: Outcome) -> Any:
    if type(outcome) is Completed:
        return outcome.output
    assert isinstance(outcome, Failed)
    exc = outcome.exception
    if isinstance(exc, JobLost):
        raise JobLost(outcome.error.message)  # a fresh one per caller, same message
    raise JobFailed(key, outcome) from exc


class Queue(_QueueCore):
    """An in-process asyncio job queue with idempotency keys and three priority lanes.

    Key semantics (keys are global across lanes):

    - never seen, or Failed: the job is admitted to its lane and runs;
    - Pending or Processing: the push joins that job (one execution, every caller gets the
      same outcome) and needs no lane capacity;
    - Completed: the push gets the cached output without running anything and needs no
      capacity, until the key expires (`key_ttl`), is evicted (`max_keys`) or is forgotten.

    A key pushed again with a different call (another function, other arguments: see
    `Job.fingerprint`) raises `KeyConflictError` while the key is pending, running or
    completed; a Failed key accepts any call.

    Backpressure: a lane admits at most ``permits + capacity`` unfinished jobs (see
    `LaneConfig`); `push` waits for room, `push_nowait` raises `QueueFull`.

    The queue starts on the running event loop at first use (workers are created as jobs
    arrive) and belongs to that loop: using it from another raises `WrongLoopError`. Use it as
    ``async with Queue() as queue:`` to close it on exit (draining, or cancelling everything
    if the block raised), or just push from a notebook cell and `close` it later.

    Args:
        lanes: `LaneConfig` per `Priority` (or per its text value, ``"high"``…); lanes not
            named get ``LaneConfig()`` (capacity 100, 5 permits).
        key_ttl: Seconds a finished key (Completed or Failed) is remembered after it finished,
            by `clock`; None for no limit.
        max_keys: Most finished keys remembered; beyond it the least recently finished is
            forgotten. Keys in flight are never evicted and not counted. None for no limit:
            memory then grows with every distinct key (about 0.5 KB per key plus its output;
            see ``docs/idempotency.md``).
        clock: Time source for timeouts, backoff and key expiry; `SystemClock` by default.

    Raises:
        TypeError: `lanes` is not a mapping of `Priority` to `LaneConfig`, or `clock` is not a
            `Clock`.
        ValueError: Unknown priority (the message names the allowed values), or
            `key_ttl` / `max_keys` negative or not finite.

    Example:
        >>> async def fetch(city: str) -> str:
        ...     return f"sunny in {city}"
        >>> async def main() -> None:
        ...     lanes = {Priority.HIGH: LaneConfig(capacity=10, permits=2)}
        ...     async with Queue(lanes, max_keys=10_000) as queue:
        ...         job = Job("weather:paris", functools.partial(fetch, "Paris"), Priority.HIGH)
        ...         print(await queue.push_and_wait(job))  # runs fetch once
        ...         print(await queue.push(job))  # Cached(output='sunny in Paris')
        >>> asyncio.run(main())
        sunny in Paris
        Cached(output='sunny in Paris')
    """

    def __init__(
        self,
        lanes: Mapping[Priority, LaneConfig] | None = None,
        *,
        key_ttl: float | None = None,
        max_keys: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        configs: dict[Priority, LaneConfig] = {}
        if lanes is not None:
            if not isinstance(lanes, Mapping):
                raise TypeError(
                    f"lanes must be a mapping of Priority to LaneConfig, got {lanes!r}"
                )
            for name, config in lanes.items():
                priority = as_priority(name, "unknown lane")
                if not isinstance(config, LaneConfig):
                    raise TypeError(f"lane {priority}: expected a LaneConfig, got {config!r}")
                configs[priority] = config
        _check_ttl("key_ttl", key_ttl)
        if max_keys is not None and (
            isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 0
        ):
            raise ValueError(f"max_keys must be an int >= 0 or None, got {max_keys!r}")
        if clock is None:
            clock = SystemClock()
        elif not isinstance(clock, Clock):
            raise TypeError(f"clock must be a Clock (time() and sleep()), got {clock!r}")
        super().__init__(configs, key_ttl, max_keys, clock)

    @property
    def clock(self) -> Clock:
        """The clock that measures timeouts, backoff and key expiry."""
        return self._clock

    @property
    def closed(self) -> bool:
        """True once `close` has begun: no new job is admitted (`QueueClosed`)."""
        return self._closing

    # ----------------------------------------------------------------- public API

    async def push(self, job: Job) -> Accepted:
        """Submit `job`; wait for room in its lane if the job must run and the lane is full.

        Returns:
            `Queued(handle)` if the job was admitted, `InFlight(handle)` if its key is
            pending or running (joined, no capacity needed), `Cached(output)` if its key
            completed (nothing runs, no capacity needed).

        Raises:
            TypeError: `job` is not a `Job`.
            KeyConflictError: The key is known with a different call (see `Job.fingerprint`).
            QueueClosed: The queue is closing or closed (also while waiting for room).
            DeadlockError: Called from inside a job, the wait for room could never end:
                every permit of the full lane is held by a job waiting the same way.
            WrongLoopError: The queue belongs to another event loop.

        Cancelling a push that waits for room releases its claimed key (its earlier Failed
        state comes back); pushes that joined it meanwhile get `JobLost`.
        """
        self._enter(job, nested=False)
        known = self._known(job)
        if known is not None:
            return known
        rec = await _nested.enqueue(self, job)
        return Queued(JobHandle(rec))

    def _known(self, job: Job) -> Accepted | None:
        """Answer a push whose key is known: `Cached`, `InFlight`, or None when it must run."""
        rec = self._keys.get(job.key)
        if rec is None:
            return None
        code = self._hit(job, rec)
        if code == HIT_CACHED:
            return Cached(rec.outcome.output)  # type: ignore[union-attr]
        if code == HIT_JOINED:
            return InFlight(JobHandle(rec))
        return None

    def push_nowait(self, job: Job) -> Accepted:
        """Submit `job` without waiting; must be called on the queue's loop.

        Returns:
            `Queued(handle)`, `InFlight(handle)` or `Cached(output)`, as `push`.

        Raises:
            QueueFull: The job must run and its lane holds ``permits + capacity`` unfinished
                jobs (or pushes are already waiting for room); nothing was admitted.
            TypeError, KeyConflictError, QueueClosed, WrongLoopError: As `push`.
            RuntimeError: No event loop is running.
        """
        self._enter(job, nested=False)
        known = self._known(job)
        if known is not None:
            return known
        lane = self._lanes[job.priority]
        if lane.space or not lane.has_room():
            raise QueueFull(
                f"lane {lane.priority} is full ({lane.queued} queued, {lane.running} running; "
                f"capacity {lane.capacity}, permits {lane.permits}): job {job.key!r} not admitted"
            )
        rec = self._claim(job)
        self._admit(rec)
        return Queued(JobHandle(rec))

    async def push_and_wait(self, job: Job) -> Any:
        """Submit `job` and return its output (cached, joined or freshly run).

        From inside a running job of this same queue (a nested call), key semantics are the
        same (a completed child is cached, a pending or running one joined), and a child that
        must run never waits for a permit that could never come:

        - a child for the caller's own lane runs inline, in the calling task on the caller's
          permit (which would sit idle anyway); nested calls that the caller makes
          concurrently take turns on it;
        - a child for another lane goes through that lane, its capacity and its permits
          (so a step in MEDIUM can push tool calls into HIGH and LOW), unless that lane
          could never free a permit (every permit held by a job waiting, directly or through
          other lanes, on the caller's lane: a cycle); then it too runs inline;
        - a child still waiting in its lane that the caller joins is taken out and run inline.

        Waiting for a job that (transitively) waits for the caller raises `DeadlockError`.
        Cancelling the parent cancels an inline child (a child running on another lane's
        permit runs on, like any dispatched job).

        Returns:
            The job's output.

        Raises:
            JobFailed: The job failed, timed out or was cancelled; the original exception
                (if any) is ``__cause__`` and ``.outcome`` the `Failed`.
            JobLost: The job was abandoned before it ran (its push was cancelled, or the
                queue closed).
            DeadlockError: A nested call would wait for itself or an ancestor.
            TypeError, KeyConflictError, QueueClosed, WrongLoopError: As `push`.

        Cancelling this call before the job was dispatched releases the key (as `push`);
        once dispatched, the job runs to completion and the output is kept for its key.
        """
        if type(job) is Job:  # the cache-hit fast path: no loop, lane or context needed
            rec = self._keys.get(job.key)
            if rec is not None:
                outcome = rec.outcome
                if (
                    type(outcome) is Completed
                    and self._key_ttl is None
                    and not self._closing
                    and asyncio.get_running_loop() is self._loop
                ):
                    if job is not rec.job:
                        self._same_call(job, rec)
                    self._lanes[job.priority].cache_hits += 1
                    if self._subscribers:
                        self._emit(JobEventKind.CACHED, job.key, job.priority, None, outcome)
                    return outcome.output
        parent = CURRENT.get()
        nested = parent is not None and parent.queue is self and parent.in_body
        self._enter(job, nested=nested)
        if nested:
            assert parent is not None
            return _unwrap(job.key, await _nested.push_and_wait(self, job, parent))
        rec = self._keys.get(job.key)
        if rec is not None:
            code = self._hit(job, rec)
            if code == HIT_CACHED:
                return rec.outcome.output  # type: ignore[union-attr]
            if code == HIT_JOINED:
                return _unwrap(job.key, await self._wait(rec))
        rec = await _nested.enqueue(self, job)
        outcome = rec.outcome
        if outcome is None:
            try:
                outcome = await self._wait(rec)
            except asyncio.CancelledError:
                if rec.state == QUEUED and rec.outcome is None:
                    self._abandon(rec, "its push_and_wait was cancelled")
                raise
        return _unwrap(job.key, outcome)

    def state(self, key: str) -> State | None:
        """The state of `key`: `Pending`, `Processing`, `Completed(output)`, `Failed`, or None.

        None when the key is unknown, expired, evicted or forgotten.

        Raises:
            TypeError, InvalidKeyError: `key` is not a valid key.
        """
        rec = self._keys.get(validate_key(key))
        if rec is None:
            return None
        outcome = rec.outcome
        if outcome is not None:
            if self._key_ttl is not None and self._expired(rec):
                self._drop(rec)
                return None
            return outcome
        return _PENDING if rec.state <= QUEUED else _PROCESSING

    def stats(self) -> QueueStats:
        """A frozen snapshot of every lane (HIGH, MEDIUM, LOW); cheap, any time."""
        return QueueStats(tuple(self._lanes[p].snapshot() for p in LANE_ORDER))

    def forget(self, key: str) -> bool:
        """Forget a finished key (Completed or Failed), so that its next push runs again.

        A key in flight (pending or running) is not affected.

        Returns:
            True if a finished key was forgotten; False if the key is unknown or in flight.

        Raises:
            TypeError, InvalidKeyError: `key` is not a valid key.
        """
        key = validate_key(key)
        rec = self._keys.get(key)
        if rec is None or rec.outcome is None:
            return False
        del self._keys[key]
        self._finished.pop(key, None)
        return True

    def subscribe(self, callback: Callable[[JobEvent], object]) -> Callable[[], None]:
        """Call `callback(event)` for every `JobEvent` from now on, on the queue's loop.

        Callbacks run synchronously inside the queue's bookkeeping: keep them short and do
        not push from them. An exception in a callback is reported to the loop's exception
        handler and does not affect the queue. Without subscribers no event is built.

        Returns:
            A function that unsubscribes (calling it twice is harmless).
        """
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        self._subscribers = (*self._subscribers, callback)

        def unsubscribe() -> None:
            subs = list(self._subscribers)
            for i, cb in enumerate(subs):
                if cb is callback:
                    del subs[i]
                    self._subscribers = tuple(subs)
                    return

        return unsubscribe

    async def close(
        self,
        drain: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - measured with the queue's clock
    ) -> CloseReport:
        """Stop admitting jobs, finish or cancel the admitted ones, and report what was lost.

        From the first call on, `push`, `push_nowait` and `push_and_wait` raise `QueueClosed`
        (except nested `push_and_wait` calls from jobs still running, which are still served
        as usual), and pushes waiting for room raise `QueueClosed`. With `drain`, admitted
        jobs run to the end; whatever is still unfinished at the deadline (all of it without
        `drain`) is abandoned: waiting jobs are dropped (`JobLost`), running ones cancelled.
        Close then waits for cancelled bodies to stop, until the deadline; a thread cannot be
        stopped, see `CloseReport.unstopped`. Calling close again returns the first report.

        Args:
            drain: Let admitted jobs finish first.
            timeout: Seconds, by the queue's clock, for the whole close; None for no limit.

        Returns:
            A `CloseReport`.

        Raises:
            ValueError: `timeout` is negative or not finite.
            DeadlockError: Called (and awaited) from inside a job of this queue, which close
                would wait for; nothing was changed. Schedule it instead, e.g.
                ``asyncio.get_running_loop().create_task(queue.close())``: that task waits
                for the job like any other.
            WrongLoopError: The queue belongs to another event loop.
        """
        _check_ttl("timeout", timeout)
        return await _shutdown.close(self, drain, timeout)

    async def __aenter__(self) -> Queue:
        self._bind()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close(drain=exc_type is None)

    def __repr__(self) -> str:
        lanes = ", ".join(
            f"{p}={lane.queued}q/{lane.running}r" for p, lane in self._lanes.items()
        )
        status = "closed" if self._closing else "open"
        return f"<Queue {status} keys={len(self._keys)} {lanes}>"

