"""The in-process job queue: idempotency keys, priority lanes, backpressure, isolation.

See `Queue`: small public methods over the mechanisms below it (the `Ledger` of keys and
lanes, the `Dispatcher` of workers, the nesting rules, the store rules of `persistence`, the
`Shutdown`; the budget verbs in its base `RateVerbs`). How a push travels through the queue
is told in ``docs/queue-internals.md``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from agentq.clock import Clock
from agentq.errors import QueueClosed, QueueFull
from agentq.keys import validate_key
from agentq.outcomes import Completed, State
from agentq.queue import nesting, persistence
from agentq.queue.arbitration import Arbiter
from agentq.queue.dispatch import Dispatcher
from agentq.queue.handles import Accepted, answer, answer_known, output_of, queued
from agentq.queue.jobs import Job, JobEvent, check_seconds, short_repr
from agentq.queue.lane import CLAIMED, QUEUED
from agentq.queue.lanes import LANE_ORDER, LaneConfig, Priority, QueueStats, lane_configs
from agentq.queue.ledger import HIT_CACHED, HIT_JOINED, HIT_RUN, Ledger
from agentq.queue.outcome_store import JobOutcomeStore
from agentq.queue.rate_verbs import RateVerbs
from agentq.queue.records import CURRENT
from agentq.queue.shutdown import CloseReport, Shutdown

__all__ = ["CloseReport", "Queue"]


class Queue(RateVerbs):
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

    With a `store` (a `JobOutcomeStore`), completed outputs (JSON, else `PayloadError`) outlive
    the process with their call's fingerprint: a key completed before a restart answers
    `Cached`, the key with another call raises `KeyConflictError`; failed jobs are not saved;
    the queue never closes the store (``docs/idempotency.md``).

    Backpressure: a lane admits ``permits + capacity`` unfinished jobs; `push` waits for room.

    The queue starts on the running event loop at first use (workers are created as jobs
    arrive) and belongs to that loop: using it from another raises `WrongLoopError`. Use it as
    ``async with Queue() as queue:`` to close it on exit (draining, or cancelling everything
    if the block raised), or just push from a notebook cell and `close` it later. Its lane
    workers exist only while they run jobs: a dropped queue leaves no task behind.

    Args:
        lanes: `LaneConfig` per `Priority` (or per its text value, ``"high"``…); lanes not
            named get ``LaneConfig()`` (capacity 100, 5 permits).
        key_ttl: Seconds a finished key (Completed or Failed) is remembered after it finished,
            by `clock`; None for no limit. With a store, also how long a saved output is
            answered (its ``expires_at``); ``0`` saves nothing.
        max_keys: Most finished keys remembered in memory; beyond it the least recently
            finished is forgotten. Keys in flight are never evicted and not counted. None for
            no limit: memory then grows with every distinct key (about 0.5 KB per key plus its
            output; see ``docs/idempotency.md``). It bounds memory only: an evicted key stays
            in the store, and its next push reads it back.
        clock: Time source for timeouts, backoff and key expiry; `SystemClock` by default.
        store: Where completed outputs are kept across restarts, or None (memory only). A
            `RateLedger` store also shares the lanes' budgets (`share_budgets`).
        total_permits: Permits the lanes share (each still within its `LaneConfig.permits`),
            highest priority first; None: independent lanes (`agentq.queue.arbitration`).
        aging: Seconds after which a waiting job goes before any newer one (never starved).

    Raises:
        TypeError: `lanes` is not a mapping of `Priority` to `LaneConfig`, `clock` is not a
            `Clock`, or `store` is not a `JobOutcomeStore`.
        ValueError: Unknown priority (the message names the allowed values), `key_ttl` /
            `max_keys` / `aging` negative or not finite, `total_permits` not an int >= 1.

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
        store: JobOutcomeStore | None = None,
        total_permits: int | None = None,
        aging: float = 10.0,
    ) -> None:
        ledger = self._ledger = Ledger(lane_configs(lanes), key_ttl, max_keys, clock, store)
        self._keys = ledger.keys
        self._lanes = ledger.lanes
        self._dispatch = Dispatcher(ledger, Arbiter(ledger, total_permits, aging))
        self._shutdown = Shutdown(self._dispatch)

    @property
    def clock(self) -> Clock:
        """The clock that measures timeouts, backoff and key expiry."""
        return self._ledger.clock

    @property
    def store(self) -> JobOutcomeStore | None:
        """The store that keeps completed outputs across restarts, or None."""
        return self._ledger.store

    @property
    def closed(self) -> bool:
        """True once `close` has begun: no new job is admitted (`QueueClosed`)."""
        return self._dispatch.closing

    def _enter(self, job: Job, *, nested: bool) -> None:
        if type(job) is not Job and not isinstance(job, Job):
            raise TypeError(f"expected a Job, got {short_repr(job)}")
        if asyncio.get_running_loop() is not self._ledger.loop:
            self._ledger.bind()
        if self._dispatch.closing and not nested:
            raise QueueClosed(f"the queue is closed: {job.title} not admitted")

    # ----------------------------------------------------------------- public API

    async def push(self, job: Job) -> Accepted:
        """Submit `job`; wait for room in its lane if the job must run and the lane is full.

        Returns:
            `Queued(handle)` if the job was admitted, `InFlight(handle)` if its key is
            pending or running (joined, no capacity needed), `Cached(output)` if its key
            completed (nothing runs, no capacity needed).

        Raises:
            TypeError: `job` is not a `Job`.
            KeyConflictError: The key is known with a different call (see `Job.fingerprint`),
                in memory or in the store.
            QueueClosed: The queue is closing or closed (also while waiting for room).
            StoreError: Reading the key's stored outcome failed; nothing was admitted.
            DeadlockError: Called from inside a job, the wait for room could never end:
                every permit of the full lane is held by a job waiting the same way.
            WrongLoopError: The queue belongs to another event loop.

        Cancelling a push that waits for room releases its claimed key (its earlier Failed
        state comes back); pushes that joined it meanwhile get `JobLost`.
        """
        dispatch = self._dispatch
        if (  # `_enter`'s checks, inline for the common push (`_enter` raises the errors)
            type(job) is not Job
            or dispatch.closing
            or asyncio.get_running_loop() is not self._ledger.loop
        ):
            self._enter(job, nested=False)
        if self._ledger.store is None:  # an unknown key is the common push: no call
            known = None if self._keys.get(job.key) is None else answer_known(dispatch, job)
        else:
            known = answer(dispatch, job, *await persistence.answer(self._ledger, job))
        if known is not None:
            return known
        rec = nesting.claim_and_admit(dispatch, job)
        if rec.state == CLAIMED:  # the lane is full: wait for room
            await nesting.wait_for_room(dispatch, rec)
        return queued(dispatch, rec, job)

    def push_nowait(self, job: Job) -> Accepted:
        """Submit `job` without waiting; must be called on the queue's loop.

        Returns:
            `Queued(handle)`, `InFlight(handle)` or `Cached(output)`, as `push`.

        Raises:
            QueueFull: The job must run and its lane holds ``permits + capacity`` unfinished
                jobs (or pushes are already waiting for room); nothing was admitted.
            TypeError, KeyConflictError, QueueClosed, WrongLoopError: As `push`.
            RuntimeError: No event loop is running.

        With a store, a key that must run is admitted (`Queued`) and reads the store in its
        worker first: a stored output of the same call is its outcome (nothing runs), one of
        another call fails it with `KeyConflictError`.
        """
        self._enter(job, nested=False)
        known = answer_known(self._dispatch, job)
        if known is not None:
            return known
        lane = self._lanes[job.priority]
        if lane.space or not lane.has_room():
            raise QueueFull(f"lane {lane.priority} is full ({lane.queued} queued, {lane.running}"
                            f" running; capacity {lane.capacity}, permits {lane.permits}): "
                            f"{job.title} not admitted")
        rec = self._ledger.claim(job)
        if job.persist and self._ledger.store is not None:
            rec.unread = True
        self._dispatch.admit(rec)
        return queued(self._dispatch, rec, job)

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
            TypeError, KeyConflictError, QueueClosed, StoreError, WrongLoopError: As `push`.

        Cancelling this call before the job was dispatched releases the key (as `push`);
        once dispatched, the job runs to completion and the output is kept for its key.
        """
        ledger = self._ledger
        if type(job) is Job:  # the cache-hit fast path: no loop, lane or context needed
            cached = ledger.hit_completed(job, self._dispatch.closing)
            if cached is not None:
                return cached.output
        parent = CURRENT.get()
        nested = parent is not None and parent.owner is ledger and parent.in_body
        self._enter(job, nested=nested)
        if nested:
            assert parent is not None
            return output_of(job.key, await nesting.push_and_wait(self._dispatch, job, parent))
        if ledger.store is None:
            rec = self._keys.get(job.key)
            code = HIT_RUN if rec is None else ledger.hit(job, rec)
        else:
            code, rec = await persistence.answer(ledger, job)
        if code == HIT_CACHED:
            return rec.outcome.output  # type: ignore[union-attr]
        if code == HIT_JOINED:
            return output_of(job.key, await rec.wait())  # type: ignore[union-attr]
        if self._dispatch.closing:  # closed while the store was read
            raise QueueClosed(f"the queue is closed: job {job.key!r} not admitted")
        rec = await nesting.enqueue(self._dispatch, job)
        outcome = rec.outcome
        if outcome is None:
            try:
                outcome = await rec.wait()
            except asyncio.CancelledError:
                if rec.state == QUEUED and rec.outcome is None:
                    self._dispatch.abandon(rec, "its push_and_wait was cancelled")
                raise
        return output_of(job.key, outcome)

    def state(self, key: str) -> State | None:
        """The state of `key`: `Pending`, `Processing`, `Completed(output)`, `Failed`, or None.

        None when the key is unknown, expired, evicted or forgotten. Memory only: a key known
        only to the store reads None until a push reads it back.

        Raises:
            TypeError, InvalidKeyError: `key` is not a valid key.
        """
        return self._ledger.state(validate_key(key))

    def cached(self, key: str) -> Completed | None:
        """The output of `key` if it completed, as `Completed(output)`, counted as a cache hit;
        else None (unknown, pending, running, failed, expired, evicted or forgotten).

        A memo's fast path, with no `Job` built: ``hit = queue.cached(key)``, and only on a
        miss ``await queue.push_and_wait(Job(key, fn))``. It answers by key alone: unlike a
        push, it compares no call. Memory only, like `state`; on the queue's loop thread.

        Raises:
            TypeError: `key` is not a str.
        """
        return self._ledger.cached(key)

    def stats(self) -> QueueStats:
        """A frozen snapshot of every lane (HIGH, MEDIUM, LOW); cheap, any time."""
        return QueueStats(tuple(self._lanes[p].snapshot(self.clock.time()) for p in LANE_ORDER))

    async def forget(self, key: str) -> bool:
        """Forget a finished key (Completed or Failed), so that its next push runs again.

        With a store, its stored output is removed too (first: if the store fails, nothing is
        forgotten), and a read of the key in progress is waited for. A key in flight (pending
        or running) is not affected, in memory or in the store.

        Returns:
            True if a finished key was forgotten in memory or an output removed from the
            store; False if the key is unknown (in both) or in flight.

        Raises:
            TypeError, InvalidKeyError: `key` is not a valid key.
            StoreError: The store failed; nothing was forgotten.
            WrongLoopError: The queue belongs to another event loop.
        """
        key = validate_key(key)
        ledger = self._ledger
        ledger.bind()
        if ledger.store is None:
            return self._keys.forget(key)
        return await persistence.forget(ledger, key)

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
        return self._ledger.subscribe(callback)

    async def close(
        self,
        drain: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - measured with the queue's clock
    ) -> CloseReport:
        """Stop admitting jobs, finish or cancel the admitted ones; return a `CloseReport` of
        what this call did and lost.

        From the first call on, `push`, `push_nowait` and `push_and_wait` raise `QueueClosed`
        (except nested `push_and_wait` calls from jobs still running, which are still served
        as usual), and pushes waiting for room raise `QueueClosed`. With `drain`, admitted
        jobs run to the end; whatever is still unfinished at the deadline (all of it without
        `drain`) is abandoned: waiting jobs are dropped (`JobLost`), running ones cancelled.
        Close then waits for cancelled bodies to stop, until the deadline; a thread cannot be
        stopped, see `CloseReport.unstopped`.

        Every call does this on what is left and reports what *it* did: a later call (or one
        overlapping a close in progress) is marked ``already_closed``, drops and cancels only
        what it finds (such as nested children admitted since), waits again, until its own
        deadline, for bodies still running, and lists only those still running when it
        returns. So ``await queue.close()`` again after a report with ``unstopped`` waits
        for those bodies and says whether they stopped; ``close(drain=False)`` during a
        draining close cancels at once.

        Args:
            drain: Let admitted jobs finish first.
            timeout: Seconds, by the queue's clock, for this call; None for no limit.

        Raises:
            ValueError: `timeout` is negative or not finite.
            DeadlockError: Called (and awaited) from inside a job of this queue, which close
                would wait for; nothing was changed. Schedule it instead, e.g.
                ``asyncio.get_running_loop().create_task(queue.close())``: that task waits
                for the job like any other.
            WrongLoopError: The queue belongs to another event loop.
        """
        check_seconds("timeout", timeout)
        return await self._shutdown.close(drain, timeout)

    async def __aenter__(self) -> Queue:
        self._ledger.bind()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        await self.close(drain=exc_type is None)

    def __repr__(self) -> str:
        lanes = ", ".join(f"{p}={lane.queued}q/{lane.running}r" for p, lane in self._lanes.items())
        return f"<Queue {'closed' if self.closed else 'open'} keys={len(self._keys)} {lanes}>"

