"""The ledger: the state every mechanism of a queue shares, and the transitions of its books.

`Ledger` owns the key table, the three lanes, the clock, the event loop the queue belongs to,
the event subscribers and the queue's store, if any (a `JobOutcomeStore`, used by
`agentq.queue.persistence`). Every change of a job's books goes through it: a push of a known
key is answered (`hit`), an unknown or Failed key is claimed (`claim`), and a record gets its
terminal outcome exactly once (`settle`), which counts it in its lane, remembers its key,
wakes its waiters and publishes the event. An outcome read from the store becomes a finished
key too (`restore`, or `answer_stored` for a record claimed before the read). The mechanisms
above it (running a body, dispatching records to workers, the nesting rules, shutdown) take
the ledger and use these methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agentq.clock import Clock, SystemClock
from agentq.errors import WrongLoopError
from agentq.keys import validate_key
from agentq.outcomes import (
    Completed,
    ErrorInfo,
    Failed,
    FailureReason,
    Outcome,
    Pending,
    Processing,
    State,
)
from agentq.queue.builders import Builders
from agentq.queue.jobs import Job, JobEvent, JobEventKind, check_seconds, short_repr
from agentq.queue.keytable import KeyTable
from agentq.queue.lane import QUEUED, Lane
from agentq.queue.lanes import LANE_ORDER, LaneConfig, Priority
from agentq.queue.outcome_store import JobOutcomeStore, StoredJob
from agentq.queue.records import Record

_CANCELLED_TYPE = "asyncio.exceptions.CancelledError"
_PENDING = Pending()
_PROCESSING = Processing()

# How a push of a known key is answered (`Ledger.hit`).
HIT_RUN = 0
HIT_CACHED = 1
HIT_JOINED = 2


# Read once per job by `Ledger.settle`: a module global is a cheap load, an enum member
# an attribute of its class (not specialised by the interpreter).
_COMPLETED = JobEventKind.COMPLETED
_FAILED = JobEventKind.FAILED


def cancelled_outcome(message: str, exc: BaseException | None = None) -> Failed:
    """A `Failed(cancelled)`; with `exc` (a CancelledError) its traceback is kept as text."""
    if exc is not None:
        info = ErrorInfo.from_exception(exc)
        return Failed(FailureReason.CANCELLED, ErrorInfo(info.type, message, info.traceback))
    return Failed(FailureReason.CANCELLED, ErrorInfo(_CANCELLED_TYPE, message))


def error_outcome(exc: BaseException) -> Failed:
    """A `Failed(error)` carrying `exc` (never raises, whatever `exc` is)."""
    return Failed(FailureReason.ERROR, ErrorInfo.from_exception(exc), exc)


class Ledger:
    """The books of one queue: keys, lanes, clock, loop and subscribers (see the module doc)."""

    __slots__ = (
        "builders", "clock", "keys", "lanes", "loop", "store", "subscribers", "told_closed",
    )

    def __init__(
        self,
        configs: dict[Priority, LaneConfig],
        key_ttl: float | None,
        max_keys: int | None,
        clock: Clock | None = None,
        store: JobOutcomeStore | None = None,
    ) -> None:
        """Check the queue's settings (see `agentq.queue.queue.Queue` for their meaning).

        Raises:
            TypeError: `clock` is not a `Clock`, or `store` not a `JobOutcomeStore`.
            ValueError: `key_ttl` or `max_keys` is negative or not finite.
        """
        check_seconds("key_ttl", key_ttl)
        if max_keys is not None and (
            isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 0
        ):
            raise ValueError(f"max_keys must be an int >= 0 or None, got {max_keys!r}")
        if clock is None:
            clock = SystemClock()
        elif isinstance(clock, type) or not isinstance(clock, Clock):
            raise TypeError(f"clock must be a Clock (time() and sleep()), got {clock!r}")
        # A class has the protocol's methods too (``store=MemoryStore`` for
        # ``MemoryStore()``): only an instance implements it.
        if store is not None and (
            isinstance(store, type) or not isinstance(store, JobOutcomeStore)
        ):
            raise TypeError(
                "store must be a JobOutcomeStore instance (load_job, save_job, forget_job) "
                f"or None, got {short_repr(store)}"
                + (" (a class: create an instance)" if isinstance(store, type) else "")
            )
        self.lanes: dict[Priority, Lane[Record]] = {
            p: Lane(p, configs.get(p, LaneConfig())) for p in LANE_ORDER
        }
        self.keys = KeyTable(key_ttl, max_keys, clock, stores=store is not None and key_ttl != 0)
        self.clock: Clock = clock
        self.loop: asyncio.AbstractEventLoop | None = None
        self.subscribers: tuple[Callable[[JobEvent], object], ...] = ()
        self.store = store
        # Whether a save already said the store was closed under the queue (at WARNING; the
        # next ones are said at DEBUG: `agentq.queue.persistence`).
        self.told_closed = False
        # Lambdas that only build a coroutine: called on the loop (`agentq.queue.builders`).
        self.builders = Builders()

    # ------------------------------------------------------------ the event loop

    def bind(self) -> asyncio.AbstractEventLoop:
        """The running loop, which the queue belongs to from its first use on.

        Raises:
            WrongLoopError: The queue belongs to another event loop.
        """
        loop = asyncio.get_running_loop()
        if loop is not self.loop:
            if self.loop is not None:
                raise WrongLoopError(
                    "this Queue started on another event loop and belongs to it; "
                    "create one Queue per event loop"
                )
            self.loop = loop
        return loop

    def running_loop(self) -> asyncio.AbstractEventLoop:
        """The queue's loop (the queue has started)."""
        if self.loop is None:
            raise RuntimeError("the queue has not started")
        return self.loop

    # ------------------------------------------------------------ pushes

    def hit(self, job: Job, rec: Record) -> int:
        """Answer a push of a known key (`rec`): HIT_RUN, HIT_CACHED or HIT_JOINED.

        Raises:
            KeyConflictError: The key is pending, running or completed with another call.
        """
        outcome = rec.outcome
        if outcome is None:
            self.keys.check_same_call(job, rec)
            self.lanes[job.priority].joins += 1
            if self.subscribers:
                self.emit(JobEventKind.JOINED, job.key, job.priority, None, None)
            return HIT_JOINED
        if type(outcome) is Completed:
            keys = self.keys
            if keys.ttl is not None and keys.drop_if_expired(rec):
                return HIT_RUN
            keys.check_same_call(job, rec)
            self.lanes[job.priority].cache_hits += 1
            if self.subscribers:
                self.emit(JobEventKind.CACHED, job.key, job.priority, None, outcome)
            return HIT_CACHED
        return HIT_RUN

    def hit_completed(self, job: Job, closing: bool) -> Completed | None:
        """The cache-hit fast path of ``push_and_wait``: the outcome of `job`'s completed key,
        counted as a cache hit, or None when the push must take the usual path (an unknown or
        unfinished key, keys that expire, a closing queue, another loop).

        Raises:
            KeyConflictError: The key completed with another call.
        """
        rec = self.keys.get(job.key)
        if rec is None:
            return None
        outcome = rec.outcome
        keys = self.keys
        if (
            type(outcome) is not Completed
            or keys.ttl is not None
            or closing
            or asyncio.get_running_loop() is not self.loop
        ):
            return None
        first = rec.first  # the very Job object that completed: no check
        if first is None or first() is not job:
            keys.compare(job, rec)
        self.lanes[job.priority].cache_hits += 1
        if self.subscribers:
            self.emit(JobEventKind.CACHED, job.key, job.priority, None, outcome)
        return outcome

    def cached(self, key: str) -> Completed | None:
        """`Queue.cached`: the completed outcome of `key` (counted as a cache hit in the lane
        that ran it), or None. `key` is not validated beyond its type: an invalid str is
        simply not known.

        Raises:
            TypeError: `key` is not a str.
        """
        rec = self.keys.get(key)
        if rec is None:
            if type(key) is not str:
                validate_key(key)
            return None
        outcome = rec.outcome
        if type(outcome) is not Completed:
            return None
        keys = self.keys
        if keys.ttl is not None and keys.drop_if_expired(rec):
            return None
        lane = rec.lane
        lane.cache_hits += 1
        if self.subscribers:
            self.emit(JobEventKind.CACHED, key, lane.priority, None, outcome)
        return outcome

    def state(self, key: str) -> State | None:
        """`Queue.state` of a valid `key`."""
        keys = self.keys
        rec = keys.get(key)
        if rec is None:
            return None
        outcome = rec.outcome
        if outcome is not None:
            if keys.ttl is not None and keys.drop_if_expired(rec):
                return None
            return outcome
        return _PENDING if rec.state <= QUEUED else _PROCESSING

    def claim(self, job: Job) -> Record:
        """Make a record for `job`, the key's record from now on, in the lane of its priority."""
        return self.keys.claim(self, job, self.lanes[job.priority])

    # ------------------------------------------------------------ outcomes read from the store

    def _stored_finish(self, stored: StoredJob) -> float:
        """When a stored outcome counts as finished in memory: so that it expires with the
        stored `expires_at` under this queue's ``key_ttl``."""
        ttl = self.keys.ttl
        if ttl is None:
            return stored.completed_at
        if stored.expires_at is None:
            return self.clock.time()
        return stored.expires_at - ttl

    def restore(self, job: Job, stored: StoredJob) -> Record:
        """Remember `stored` as the completed key of `job` (the push that read it)."""
        return self.keys.restore(
            self, job, self.lanes[job.priority], Completed(stored.output),
            self._stored_finish(stored),
        )

    def answer_stored(self, rec: Record, stored: StoredJob) -> None:
        """Settle the claimed `rec` with the stored output: a cache hit, nothing ran."""
        if rec.outcome is not None:
            return
        rec.lane.cache_hits += 1
        self.keys.remember(rec, self._stored_finish(stored))
        self.resolve(rec, Completed(stored.output), JobEventKind.CACHED)

    # ------------------------------------------------------------ outcomes

    def settle(self, rec: Record, outcome: Outcome) -> bool:
        """Give `rec` its terminal outcome, once; later calls lose the race and return False."""
        if rec.outcome is not None:
            return False
        lane = rec.lane
        if type(outcome) is Completed:
            lane.completed += 1
            kind = _COMPLETED
        else:
            lane.failed += 1
            kind = _FAILED
        keys = self.keys
        if keys.limited:
            keys.remember(rec)
        if kind is _FAILED and rec.in_body:
            keys.add_unstopped(rec)  # until its body stops: the key's next run waits
        rec.resolve(outcome)  # as `resolve`, inline: once per job
        if self.subscribers:
            self.emit(kind, rec.key, lane.priority, rec.attempt or None, outcome)
        return True

    def resolve(self, rec: Record, outcome: Outcome, kind: JobEventKind) -> None:
        """Set `rec`'s outcome, wake its waiters and publish the terminal event `kind`."""
        rec.resolve(outcome)
        if self.subscribers:
            self.emit(kind, rec.key, rec.lane.priority, rec.attempt or None, outcome)

    # ------------------------------------------------------------ events

    def subscribe(self, callback: Callable[[JobEvent], object]) -> Callable[[], None]:
        """Call `callback(event)` for every `JobEvent` from now on; returns the unsubscriber."""
        self.subscribers = (*self.subscribers, callback)

        def unsubscribe() -> None:
            subs = list(self.subscribers)
            for i, cb in enumerate(subs):
                if cb is callback:
                    del subs[i]
                    self.subscribers = tuple(subs)
                    return

        return unsubscribe

    def emit(
        self,
        kind: JobEventKind,
        key: str,
        priority: Priority,
        attempt: int | None,
        outcome: Outcome | None,
    ) -> None:
        """Publish one `JobEvent` to every subscriber (callers check `subscribers` first)."""
        event = JobEvent(kind, key, priority, self.clock.time(), attempt, outcome)
        for callback in self.subscribers:
            try:
                callback(event)
            except Exception as exc:
                loop = self.loop
                if loop is None:
                    raise
                message = f"agentq: a job event subscriber raised on {kind}"
                loop.call_exception_handler({"message": message, "exception": exc})
