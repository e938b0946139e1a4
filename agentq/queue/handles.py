"""What a push answers (`Accepted`, `answer`), and the `JobHandle` that follows a job.

`Queue.push` answers with one of three `Accepted` values, usable with ``match``::

    match await queue.push(job):
        case Queued(handle):   # admitted to its lane; it will run
            outcome = await handle
        case InFlight(handle): # the key is pending or running: this push joined it
            outcome = await handle
        case Cached(output):   # the key already completed: its output, nothing ran
            ...

A handle follows one record; cancelling goes through the queue's `Dispatcher`, and awaiting
from inside a job of the same queue follows the nesting rules (`agentq.queue.nesting`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from agentq.errors import JobFailed, JobLost, QueueClosed
from agentq.outcomes import Completed, Failed, Outcome
from agentq.queue import nesting
from agentq.queue.dispatch import Dispatcher
from agentq.queue.jobs import Job
from agentq.queue.ledger import HIT_CACHED, HIT_JOINED
from agentq.queue.records import CURRENT, Record

__all__ = [
    "Accepted",
    "Cached",
    "InFlight",
    "JobHandle",
    "Queued",
    "answer",
    "answer_known",
    "output_of",
    "queued",
]


class JobHandle:
    """Follows one job. Awaiting it yields the job's `Outcome`; it never raises the job's error.

    ``await handle`` resolves at once when the job has already finished. Awaiting from inside
    a job of the same queue a job that has not started yet runs that job inline, on the
    awaiting job's permit (see `Queue.push_and_wait`). Dropping a handle, or cancelling a task
    that awaits it, does not stop the job; `cancel` does.

    Handles are created by the queue; all methods must be called on the queue's event loop.
    """

    __slots__ = ("_dispatch", "_job", "_record")

    def __init__(self, dispatch: Dispatcher, record: Record, job: Job) -> None:
        self._dispatch = dispatch
        self._record = record
        self._job = job  # the record lets go of its job once settled; the handle keeps it

    @property
    def key(self) -> str:
        """The job's idempotency key."""
        return self._record.key

    @property
    def job(self) -> Job:
        """The job this handle follows (for a join: the job that runs, not the joining one)."""
        return self._job

    @property
    def outcome(self) -> Outcome | None:
        """`Completed` or `Failed` once the job has finished, None before."""
        return self._record.outcome

    @property
    def started(self) -> bool:
        """Whether the job's body has started: a first attempt began (it may have ended)."""
        return self._record.attempt > 0

    def done(self) -> bool:
        """Whether the job has finished (completed, failed, cancelled or lost)."""
        return self._record.outcome is not None

    def cancel(self) -> bool:
        """Cancel the job: a waiting job never runs; a running job's body is cancelled.

        The job ends `Failed` with reason ``cancelled`` at once (its waiters wake now), and
        its key may be pushed again. A thread, or a body that ignores cancellation, keeps
        its lane permit until it has really returned; its result is discarded, and a new
        run of the key starts its body only after that (one body per key at a time).
        Exactly one terminal state wins a race with completion: if the job finished first,
        nothing changes.

        Returns:
            True if this call cancelled the job, False if it had already finished (with a
            store, that includes a body that returned and whose output is being saved).
        """
        return self._dispatch.cancel(self._record)

    async def stopped(self) -> None:
        """Wait until nothing of this job runs any more.

        A job's outcome can be decided before its body has returned: a timeout or a cancel
        cannot stop a thread, nor a body that ignores cancellation. This waits for the body
        itself (returns at once for a job that finished normally or never ran). Cancelling
        the wait leaves the job alone.
        """
        await self._record.until_stopped()

    def __await__(self) -> Generator[Any, None, Outcome]:
        record = self._record
        outcome = record.outcome
        if outcome is not None:
            return outcome
        ledger = self._dispatch.ledger
        loop = asyncio.get_running_loop()
        parent = CURRENT.get()
        if loop is ledger.loop and (parent is None or parent.owner is not ledger):
            # Neither another loop nor a job of this queue awaits it: `Record.wait`, with
            # no coroutine (`nesting.await_record` tells those cases apart).
            fut = record.add_waiter(loop)
            try:
                return (yield from fut)
            except asyncio.CancelledError:
                record.drop_waiter(fut)
                raise
        return (yield from nesting.await_record(self._dispatch, record).__await__())

    def __repr__(self) -> str:
        outcome = self._record.outcome
        status = "pending" if outcome is None else type(outcome).__name__.lower()
        return f"<JobHandle key={self._record.key!r} {status}>"


@dataclass(frozen=True, slots=True, init=False)
class Queued:
    """The job was admitted to its lane and will run; `handle` follows it."""

    handle: JobHandle

    def __init__(self, handle: JobHandle) -> None:
        # Through the slot's own setter: the generated __init__ of a frozen dataclass goes
        # through object.__setattr__ (one Queued per job pushed).
        _set_handle(self, handle)


_set_handle: Any = Queued.__dict__["handle"].__set__
_new: Any = object.__new__


def queued(dispatch: Dispatcher, record: Record, job: Job) -> Queued:
    """``Queued(JobHandle(dispatch, record, job))``, what a push that admitted `job` answers,
    built without the two classes' ``__init__`` calls (one per job pushed; issue 25)."""
    handle = _new(JobHandle)
    handle._dispatch = dispatch
    handle._record = record
    handle._job = job
    accepted = _new(Queued)
    _set_handle(accepted, handle)
    return accepted  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Cached:
    """The key had completed: this is its output, and nothing ran."""

    output: Any


@dataclass(frozen=True, slots=True)
class InFlight:
    """The key was pending or running: this push joined that job; `handle` follows it."""

    handle: JobHandle


Accepted = Queued | Cached | InFlight
"""What `Queue.push` and `Queue.push_nowait` return."""


def output_of(key: str, outcome: Outcome) -> Any:
    """What `Queue.push_and_wait` returns for `outcome`: the output, or the error it raises.

    Raises:
        JobFailed: The job failed; the original exception is the ``__cause__``.
        JobLost: The job was abandoned before it ran (a fresh error per caller).
    """
    if type(outcome) is Completed:
        return outcome.output
    assert isinstance(outcome, Failed)
    exc = outcome.exception
    if isinstance(exc, JobLost):
        raise JobLost(outcome.error.message)  # a fresh one per caller, same message
    raise JobFailed(key, outcome) from exc


def answer(dispatch: Dispatcher, job: Job, code: int, rec: Record | None) -> Accepted | None:
    """What a push of `job` answers for the hit `code` (`Ledger.hit`) of its key's record.

    Returns:
        `Cached(output)` for a completed key, `InFlight(handle)` for one pending or running,
        or None when the job must run.

    Raises:
        QueueClosed: The job must run and the queue closed meanwhile (while the store was
            read).
    """
    if code == HIT_CACHED:
        return Cached(rec.outcome.output)  # type: ignore[union-attr]
    if code == HIT_JOINED:
        assert rec is not None and rec.job is not None  # in flight: not released
        return InFlight(JobHandle(dispatch, rec, rec.job))
    if dispatch.closing:  # closed while the store was read
        raise QueueClosed(f"the queue is closed: job {job.key!r} not admitted")
    return None


def answer_known(dispatch: Dispatcher, job: Job) -> Accepted | None:
    """Answer a push whose key is known in memory: `Cached`, `InFlight`, or None when it
    must run (an unknown key too).

    Raises:
        KeyConflictError: The key is pending, running or completed with another call.
        QueueClosed: As `answer`.
    """
    ledger = dispatch.ledger
    rec = ledger.keys.get(job.key)
    return None if rec is None else answer(dispatch, job, ledger.hit(job, rec), rec)
