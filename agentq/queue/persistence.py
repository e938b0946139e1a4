"""Persistence: a queue's completed keys in its store (`Queue(store=...)`), across restarts.

These rules are functions over the queue's `Ledger`, which holds the `JobOutcomeStore`; the
key table holds the state they share (the gates of the keys being read). Without a store,
and for a job pushed with ``Job(persist=False)``, none of this runs: memory only.

- **Read before a run.** A push whose key is known in memory is answered from memory, as
  without a store (no store read). A push whose key must run (unknown in memory, Failed, or
  expired) first reads the key's stored outcome, once (`answer`): a live stored outcome of
  the same call is remembered in memory and answered as a cache hit, nothing runs; one of
  another call raises `KeyConflictError`; none lets the push claim the key and run it.
  While one push reads a key, the other pushes of that key wait for the read and then look
  the key up again, so they join the run or share the answer. `push_nowait` cannot wait for
  a read: its record reads the store in its worker before its first attempt
  (`read_before_run`).
- **Save on completion.** A body that returned has its output saved, with the call's
  fingerprint (`agentq.queue.fingerprint_stored.stored_fingerprint`) as taken when the push
  claimed the key (`Record.stored_fp`: the call memory compares), before the job is settled
  `Completed` (`save_and_settle`): once ``push_and_wait`` returns, the output survives a
  restart. The save is not interrupted: a ``cancel`` meanwhile finds the job finished.
  An output that is not JSON fails the job with `PayloadError` (no retry; nothing is
  stored). A store that fails (`StoreError`) leaves the job `Completed` in memory (it ran:
  running it again would pay twice) and reports the error to the loop's exception handler;
  a store closed under the queue (`StoreClosedError`) is said in one line on the ``agentq``
  logger instead, WARNING the first time, DEBUG after (finding F6).
  Failed jobs are not saved.
- **Forget** removes a finished key from memory and from the store (`forget`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentq.errors import KeyConflictError, PayloadError, StoreClosedError
from agentq.events import utc
from agentq.outcomes import Completed
from agentq.queue.fingerprint_stored import same_stored, stored_fingerprint
from agentq.queue.jobs import Job, short_repr
from agentq.queue.ledger import HIT_RUN, Ledger, cancelled_outcome, error_outcome
from agentq.queue.outcome_store import JobOutcomeStore, StoredJob
from agentq.queue.records import IDLE, READING, SAVING, Record

__all__ = ["answer", "forget", "read_before_run", "save_and_settle"]

_LOGGER = logging.getLogger("agentq")


def _store(ledger: Ledger) -> JobOutcomeStore:
    store = ledger.store
    assert store is not None
    return store


# ------------------------------------------------------------------ reading


async def answer(ledger: Ledger, job: Job) -> tuple[int, Record | None]:
    """Answer a push from memory, reading the store first when its key must run.

    Returns:
        ``(HIT_CACHED, record)``, ``(HIT_JOINED, record)``, or ``(HIT_RUN, None)``: the key
        must run, and the caller claims it before it awaits anything.

    Raises:
        KeyConflictError: The key is known (in memory or stored) with another call.
        StoreError: The store failed; nothing was claimed.
    """
    keys = ledger.keys
    while True:
        rec = keys.get(job.key)
        if rec is not None:
            code = ledger.hit(job, rec)
            if code != HIT_RUN:
                return code, rec
        if ledger.store is None or not job.persist:
            return HIT_RUN, None
        found = await _consult(ledger, job)
        if found is False:
            return HIT_RUN, None
        if found is not True:  # answer from it even if memory did not keep it (max_keys=0)
            code = ledger.hit(job, found)
            return (code, found) if code != HIT_RUN else (HIT_RUN, None)


async def _consult(ledger: Ledger, job: Job) -> Record | bool:
    """Read the stored outcome of `job`'s key.

    Returns:
        The finished record made from a stored outcome of the same call; True when memory
        may have changed meanwhile (the caller looks the key up again); False when nothing
        is stored and the key must run.
    """
    keys = ledger.keys
    key = job.key
    gate = keys.gate(key)
    if gate is not None:  # another push reads this key: wait, then look again
        await gate.wait()
        return True
    before = keys.get(key)
    gate = keys.close_gate(key)
    try:
        stored = await _store(ledger).load_job(key, ledger.clock.time())
        if keys.get(key) is not before:
            return True  # claimed meanwhile (push_nowait does not wait for reads)
        if stored is None:
            return False
        check_stored(job, stored)
        return ledger.restore(job, stored)
    finally:
        keys.open_gate(key, gate)


def check_stored(job: Job, stored: StoredJob, taken: str | None = None) -> None:
    """Refuse `job` if its key was stored by another call.

    Args:
        job: The job pushed.
        stored: Its key's stored outcome.
        taken: `job`'s stored fingerprint if already taken (at its claim), else None.

    Raises:
        KeyConflictError: The stored fingerprint differs; the message names the pushed call.
    """
    if same_stored(stored.fingerprint, job.fn, job.fingerprint, taken):  # a v1 row as v1 was
        return
    now = job.fingerprint if job.fingerprint is not None else job.fn
    raise KeyConflictError(
        f"idempotency key {job.key!r} completed at {utc(stored.completed_at).isoformat()} "
        f"(stored outcome) with another call than {short_repr(now, 80)}; use another key, "
        "forget() this one, or give both jobs the same fingerprint="
    )


async def read_before_run(ledger: Ledger, record: Record) -> bool:
    """Read the store for a record claimed without reading it (`Record.unread`), in its task.

    Returns:
        True when the record is settled: answered from the store (a cache hit, nothing
        runs), failed (`KeyConflictError`, or the `StoreError` of the read: whether the key
        ran before is unknown, so it does not run), or cancelled meanwhile. False when it
        must run.

    Raises:
        asyncio.CancelledError: Cancelled from outside; the record is settled as cancelled.
    """
    record.unread = False
    record.phase = READING
    try:
        stored = await _store(ledger).load_job(record.key, ledger.clock.time())
        job = record.job
        if stored is not None and job is not None and record.outcome is None:
            check_stored(job, stored, record.stored_fp)
            ledger.answer_stored(record, stored)
    except asyncio.CancelledError as exc:
        ledger.settle(record, cancelled_outcome(f"{record.title} was cancelled", exc))
        raise
    except Exception as exc:
        ledger.settle(record, error_outcome(exc))
    finally:
        record.phase = IDLE
    return record.outcome is not None


# ------------------------------------------------------------------ saving


def _taken(record: Record, job: Job) -> str:
    """The stored fingerprint of `record`'s call as taken when it claimed its key, not now:
    a global its body rebinds while it runs does not change which call it was (F8)."""
    taken = record.stored_fp
    return taken if taken is not None else stored_fingerprint(job.fn, job.fingerprint)


def _tell_closed(ledger: Ledger, key: str, exc: StoreClosedError) -> None:
    """Say that `key`'s output was not saved because the store was closed under the queue:
    one line on the ``agentq`` logger, no traceback (a store closed in a notebook cell stops
    every job in flight alike), at WARNING the first time for this queue, at DEBUG after."""
    first = not ledger.told_closed
    ledger.told_closed = True
    _LOGGER.log(
        logging.WARNING if first else logging.DEBUG,
        "the output of job %r was not saved: the queue's store was closed under it (%s); it "
        "is kept in memory only.%s", key, exc,
        " Other jobs it stops saving are logged at DEBUG." if first else "",
    )


async def save_and_settle(ledger: Ledger, record: Record, output: Any) -> None:
    """Save the output of `record`'s body that returned, then settle it `Completed`.

    Not interrupted by ``cancel``, a timeout or ``close`` (phase `SAVING`): the job has
    finished. Without a store, for a ``persist=False`` job and with ``key_ttl=0`` (it would
    never be answered) nothing is saved: the record is just settled.

    Raises:
        asyncio.CancelledError: Cancelled from outside; the record is settled as cancelled
            (the output may or may not be stored).
    """
    job = record.job
    assert job is not None  # not settled yet
    clock = ledger.clock
    ttl = ledger.keys.ttl
    if ledger.store is not None and job.persist and (ttl is None or ttl > 0):
        record.phase = SAVING
        try:
            now = clock.time()
            await _store(ledger).save_job(
                job.key,
                fingerprint=_taken(record, job),
                output=output,
                completed_at=now,
                expires_at=None if ttl is None else now + ttl,
            )
        except asyncio.CancelledError as exc:
            ledger.settle(record, cancelled_outcome(f"{record.title} was cancelled", exc))
            raise
        except PayloadError as exc:
            failure = PayloadError(f"job {job.key!r} returned an output that cannot be "
                                   f"stored: {exc}", exc.field)
            failure.__cause__ = exc
            ledger.settle(record, error_outcome(failure))
            return
        except StoreClosedError as exc:
            _tell_closed(ledger, job.key, exc)
        except Exception as exc:
            ledger.running_loop().call_exception_handler({
                "message": f"agentq: the output of job {job.key!r} could not be saved to the "
                "queue's store; it is kept in memory only",
                "exception": exc,
            })
        finally:
            record.phase = IDLE
    ledger.settle(record, Completed(output))


# ------------------------------------------------------------------ forgetting


@asynccontextmanager
async def _holding_gate(ledger: Ledger, key: str) -> AsyncIterator[None]:
    """Wait until no read of `key` is in progress, then hold its gate (reads wait for us)."""
    keys = ledger.keys
    while (gate := keys.gate(key)) is not None:
        await gate.wait()
    gate = keys.close_gate(key)
    try:
        yield
    finally:
        keys.open_gate(key, gate)


async def forget(ledger: Ledger, key: str) -> bool:
    """`Queue.forget` with a store: forget a finished key in memory and in the store.

    A key in flight is left alone (False), in memory and in the store. The stored outcome is
    removed first: if the store fails, memory is unchanged.

    Raises:
        StoreError: The store failed; nothing was forgotten.
    """
    keys = ledger.keys
    rec = keys.get(key)
    if rec is not None and rec.outcome is None:
        return False
    async with _holding_gate(ledger, key):
        rec = keys.get(key)
        if rec is not None and rec.outcome is None:
            return False
        stored = await _store(ledger).forget_job(key)
        return keys.forget(key) or stored
