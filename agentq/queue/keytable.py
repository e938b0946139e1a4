"""The key table: which record answers each idempotency key, and for how long.

`KeyTable` owns every piece of state that is looked up by key:

- the record of every known key (one `Record` per job that had to run; a new run of a Failed
  key keeps the Failed record as ``prev``, so that an abandoned push can put it back);
- what makes two pushes of a key "the same call" (`check_same_call`, with the fingerprints of
  `agentq.queue.fingerprint`): the fingerprint of the push that claims a key is taken when it
  claims it, and a later push of the key, unless it carries that very `Job` object, is
  compared by its own fingerprint, taken then;
- the finished keys in finishing order, forgotten after ``key_ttl`` seconds or beyond
  ``max_keys`` (keys in flight are never evicted);
- the runs whose outcome was decided while their body still runs (a timed-out thread, a body
  that ignores cancellation): the key's next run waits for that body to stop, so one key
  never runs two bodies at once, even after `forget`;
- with a store (`Queue(store=...)`), the keys whose stored outcome is being read or removed
  right now (`gate`): one store read per key at a time, the other pushes of the key wait for
  it and then look the key up again (`agentq.queue.persistence`).
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Callable
from types import FunctionType
from typing import Any

from agentq.clock import Clock
from agentq.errors import KeyConflictError
from agentq.outcomes import Completed
from agentq.queue.fingerprint import derive_fingerprint
from agentq.queue.fingerprint_deferred import Deferred, DeferredPartial, defer, defer_partial
from agentq.queue.fingerprint_diff import difference
from agentq.queue.fingerprint_fast import Shared, call_fingerprint, describe, fast_fingerprint
from agentq.queue.fingerprint_match import matches_fast
from agentq.queue.fingerprint_stored import stored_fingerprint
from agentq.queue.jobs import Job, short_repr
from agentq.queue.lane import STOPPED, Lane
from agentq.queue.records import Record


class KeyTable:
    """The record of every known key, the finished keys' eviction, and unstopped runs.

    Indexing (``table[key]``), ``key in table`` and ``len(table)`` see the known keys.

    Args:
        ttl: Seconds a finished key is remembered after it finished, by `clock`; None for no
            limit.
        max_keys: Most finished keys remembered; None for no limit.
        clock: Measures `ttl`.
    """

    __slots__ = (
        "_clock",
        "_finished",
        "_gates",
        "_records",
        "_shared",
        "get",
        "limited",
        "max_keys",
        "stores",
        "ttl",
        "unstopped",
    )

    def __init__(
        self, ttl: float | None, max_keys: int | None, clock: Clock, stores: bool = False
    ) -> None:
        self.ttl = ttl
        # Whether completed keys are saved to a store (``Queue(store=...)``, ``key_ttl`` not
        # 0): a claim then also takes the call's stored fingerprint (`Record.stored_fp`).
        self.stores = stores
        self.max_keys = max_keys
        # Whether finished keys are kept in finishing order (for `ttl` or `max_keys`); without
        # either, a finished key stays until it is forgotten and needs no order.
        self.limited = ttl is not None or max_keys is not None
        self._clock = clock
        self._records: dict[str, Record] = {}
        self._finished: OrderedDict[str, Record] = OrderedDict()
        # Records whose outcome was decided while their body still runs, by key (read by the
        # runner: empty, no key has a previous run to wait for).
        self.unstopped: dict[str, Record] = {}
        # Keys whose stored outcome is being read or removed, by key (`gate`).
        self._gates: dict[str, asyncio.Event] = {}
        # Equal parts of the fingerprints of many keys, kept once.
        self._shared = Shared()
        # The record of a key, or None: the dict lookup itself, as every push starts with it.
        self.get: Callable[[str], Record | None] = self._records.get

    def __getitem__(self, key: str) -> Record:
        return self._records[key]

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    # ------------------------------------------------------------ claiming a key

    def claim(self, owner: object, job: Job, lane: Lane[Record]) -> Record:
        """Make a record for `job` and make it the key's record (keeping a Failed one as prev).

        The fingerprint of the call is taken now (`job.fingerprint`, else derived from
        `job.fn`), so that it describes the call as it is when the key is claimed, whatever
        the values it reads become later. With a store (`stores`), so is the text saved with
        its output (`Record.stored_fp`), for a ``persist=True`` job: the stored form
        describes the same call as the in-memory one (finding F8).
        """
        # One function (no helper call): this runs once per job that must run.
        key = job.key
        fp = job.fingerprint
        records = self._records
        deferred = False
        if fp is None:
            fn = job.fn
            kind = type(fn)
            if kind is FunctionType or kind is functools.partial:
                # Kept unbuilt until a comparison needs it (`fingerprint_deferred`).
                call: Any = fn
                if kind is FunctionType:
                    fp, args = defer(call, self._shared), call.__defaults__
                else:
                    fp, args = defer_partial(call, self._shared), call.args
                deferred = fp is not None
            if fp is None:
                fp = fast_fingerprint(fn, self._shared)
                if fp is None:
                    fp = derive_fingerprint(fn)
        rec = Record(owner, job, lane, records.get(key), fp)
        if deferred:
            rec.fp_args = args
        records[key] = rec
        if self.stores and job.persist:
            rec.stored_fp = stored_fingerprint(job.fn, job.fingerprint)
        return rec

    @staticmethod
    def fingerprint(rec: Record) -> Any:
        """The fingerprint `rec` took when it claimed its key (built now, once, if it was
        kept as a `Deferred` part)."""
        fp = rec.fp
        kind = type(fp)
        if kind is Deferred or kind is DeferredPartial:
            fp = rec.fp = fp.expand(rec.fp_args)
            rec.fp_args = None
        return fp

    def release(self, rec: Record) -> None:
        """Release the key of a record abandoned before it ran: it goes back to its earlier
        Failed record, if that one is still remembered, or is forgotten."""
        key = rec.key
        if self._records.get(key) is rec:
            prev = rec.prev
            # Without ttl or max_keys, a finished key is remembered until it is forgotten, and
            # a key whose run is in flight cannot be: its earlier Failed record still counts.
            if prev is not None and (not self.limited or self._finished.get(key) is prev):
                self._records[key] = prev
            else:
                del self._records[key]

    def check_same_call(self, job: Job, rec: Record) -> None:
        """Refuse `job` if its key is known (as `rec`) with a different call.

        `job`'s fingerprint is taken now and compared with the one `rec` took when it claimed
        the key. The very `Job` object that claimed the key is the same call by identity:
        nothing is derived (the cache-hit fast path).

        Raises:
            KeyConflictError: The fingerprints differ; the message names both calls.
        """
        if not rec.same_job(job):
            self.compare(job, rec)

    def compare(self, job: Job, rec: Record) -> None:
        """`check_same_call` without the identity check (the caller made it).

        Raises:
            KeyConflictError: As `check_same_call`.
        """
        kept = rec.fp
        if type(kept) is Deferred or type(kept) is DeferredPartial:
            kept = self.fingerprint(rec)
        mine = job.fingerprint
        if mine is None:
            if matches_fast(job.fn, kept):  # the same call, known without taking it
                return
            mine = call_fingerprint(job.fn, self._shared, kept)
        if mine != kept:
            first = rec.job if rec.first is None else rec.first()
            if first is None:  # released (settled): what the fingerprint says of the call
                was: object = describe(kept)
                now: object = job.fn if job.fingerprint is None else job.fingerprint
            elif first.fingerprint is not None or job.fingerprint is not None:
                was, now = first.fingerprint, job.fingerprint
            else:
                was, now = first.fn, job.fn
            differs = difference(kept, mine)
            if was is now or short_repr(was, 80) == short_repr(now, 80):  # one object (F10)
                what = f"{short_repr(now, 80)} both times, with other values it reads"
            else:
                what = f"first {short_repr(was, 80)}, now {short_repr(now, 80)}"
            if differs is not None:
                what += f"; differs in {differs}"
            raise KeyConflictError(
                f"idempotency key {job.key!r} is already used for another call ({what});"
                " use another key, forget() this one, or give both jobs the same fingerprint="
            )

    # ------------------------------------------------------------ finished keys

    def remember(self, rec: Record, finished_at: float | None = None) -> None:
        """Record a finished key, if `rec` is still its record; then apply `ttl` and `max_keys`.

        `finished_at` (Unix seconds) dates an outcome read from the store; by default the key
        finished now. Without `ttl` and `max_keys` there is nothing to order or evict: the
        record stays the key's until it is forgotten.
        """
        if not self.limited:
            return
        key = rec.key
        records = self._records
        if records.get(key) is not rec:
            return
        finished = self._finished
        if self.ttl is not None:
            now = self._clock.time()
            rec.finished_at = now if finished_at is None else finished_at
            self._purge(now)
        finished.pop(key, None)
        finished[key] = rec
        limit = self.max_keys
        if limit is not None:
            while len(finished) > limit:
                old_key, old = finished.popitem(last=False)
                if records.get(old_key) is old:
                    del records[old_key]

    def _purge(self, now: float) -> None:
        ttl = self.ttl
        assert ttl is not None
        finished = self._finished
        records = self._records
        while finished:
            old_key = next(iter(finished))
            old = finished[old_key]
            if now - old.finished_at < ttl:
                break
            del finished[old_key]
            if records.get(old_key) is old:
                del records[old_key]

    def drop_if_expired(self, rec: Record) -> bool:
        """Forget the finished `rec` if its `ttl` is over; True if it was forgotten."""
        ttl = self.ttl
        if ttl is None or self._clock.time() - rec.finished_at < ttl:
            return False
        key = rec.key
        if self._records.get(key) is rec:
            del self._records[key]
        if self._finished.get(key) is rec:
            del self._finished[key]
        return True

    def restore(self, owner: object, job: Job, lane: Lane[Record], outcome: Completed,
                finished_at: float) -> Record:
        """Make a finished record for a key whose outcome was read from the store.

        `job` is the push that read it (later pushes of the key are compared with it);
        `finished_at` is when the key counts as finished for `ttl`.
        """
        fp = job.fingerprint
        if fp is None:
            fp = call_fingerprint(job.fn, self._shared)
        rec = Record(owner, job, lane, None, fp)
        rec.state = STOPPED
        rec.resolve(outcome)
        self._records[job.key] = rec
        self.remember(rec, finished_at)
        return rec

    def forget(self, key: str) -> bool:
        """Forget a finished key; False if it is unknown or in flight."""
        rec = self._records.get(key)
        if rec is None or rec.outcome is None:
            return False
        del self._records[key]
        self._finished.pop(key, None)
        return True

    # ------------------------------------------------------------ store reads in progress

    def gate(self, key: str) -> asyncio.Event | None:
        """The event set once the store read (or removal) of `key` in progress ends, if any."""
        return self._gates.get(key) if self._gates else None

    def close_gate(self, key: str) -> asyncio.Event:
        """Note that the store read (or removal) of `key` begins (no other is in progress)."""
        assert key not in self._gates
        gate = self._gates[key] = asyncio.Event()
        return gate

    def open_gate(self, key: str, gate: asyncio.Event) -> None:
        """The store read (or removal) of `key` has ended: wake the pushes waiting for it."""
        if self._gates.get(key) is gate:
            del self._gates[key]
        gate.set()

    # ------------------------------------------------------------ bodies still running

    def add_unstopped(self, rec: Record) -> None:
        """`rec` failed while its body still runs: the key's next run waits for it to stop."""
        self.unstopped[rec.key] = rec

    def previous_run(self, rec: Record) -> Record | None:
        """The earlier run of `rec`'s key whose body has not stopped yet, if any."""
        unstopped = self.unstopped
        if unstopped:
            previous = unstopped.get(rec.key)
            if previous is not rec:
                return previous
        return None

    def body_stopped(self, rec: Record) -> None:
        """`rec`'s body has really returned: forget it as unstopped, wake its stop waiters."""
        unstopped = self.unstopped
        if unstopped and unstopped.get(rec.key) is rec:
            del unstopped[rec.key]
        rec.mark_stopped()
