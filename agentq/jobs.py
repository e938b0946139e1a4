"""Jobs: what is pushed (`Job`), what a push answers (`Accepted`), and `JobHandle`.

A `Job` is an immutable description of one call: an idempotency key, a zero-argument callable
and how to run it. `Queue.push` answers with one of three `Accepted` values, usable with
``match``::

    match await queue.push(job):
        case Queued(handle):   # admitted to its lane; it will run
            outcome = await handle
        case InFlight(handle): # the key is pending or running: this push joined it
            outcome = await handle
        case Cached(output):   # the key already completed: its output, nothing ran
            ...

Every change of a job is also published as a `JobEvent` to the queue's subscribers.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from agentq.keys import validate_key
from agentq.lanes import Priority
from agentq.outcomes import Completed, Failed, Outcome
from agentq.retry import RetryPolicy

if TYPE_CHECKING:
    from agentq._core import _QueueCore as Queue
    from agentq.lanes import _Lane

__all__ = [
    "Accepted",
    "Cached",
    "InFlight",
    "Job",
    "JobEvent",
    "JobEventKind",
    "JobHandle",
    "Queued",
]


@dataclass(frozen=True, slots=True)
class Job:
    """One call to run at most once per idempotency key.

    Args:
        key: The idempotency key: a non-empty str of at most `agentq.keys.MAX_KEY_BYTES`
            bytes of UTF-8, compared byte-exactly (no Unicode normalisation). Keys are global
            across the queue's lanes.
        fn: A zero-argument callable: an ``async def`` function (or a `functools.partial` of
            one) runs on the event loop; a plain callable runs in a worker thread of the
            loop's default executor. A plain callable that returns an awaitable (such as
            ``lambda: fetch(url)``) has it awaited on the loop.
        priority: The lane to run in.
        timeout: Seconds one attempt may run (measured with the queue's clock), or None for
            no limit. A timeout cancels an async body and counts as a failed attempt (reason
            ``timeout``). A thread cannot be interrupted: the timeout is recorded at once, but
            the next attempt and the lane permit wait until the thread has returned.
        retry: Attempts and backoff; None means one attempt.
        fingerprint: What makes two pushes of one key "the same call", compared with ``==``.
            None (the default) derives it from `fn` when needed: the function's module,
            qualified name and code, the arguments of a `functools.partial` (by ``repr``),
            the class of a bound method's ``self``, and the plain values (None, numbers,
            str, bytes, enums, tuples of those) a closure captured; other captured objects
            count by type only and ``nonlocal`` state not at all (see
            ``docs/idempotency.md``). Give it explicitly when that does not tell your calls
            apart, e.g. ``fingerprint=("send_mail", "alice")``.

    Raises:
        TypeError: `key` is not a str, `fn` is not callable, or `retry` is not a
            `RetryPolicy`; the message names the value.
        InvalidKeyError: `key` is empty, has a lone surrogate or is too long.
        ValueError: `priority` is not a `Priority`, or `timeout` is not a positive, finite
            number of seconds.

    Example:
        >>> Job("invoice-42", functools.partial(send_invoice, 42), Priority.HIGH, timeout=30)
    """

    key: str
    fn: Callable[[], Any]
    priority: Priority = Priority.MEDIUM
    timeout: float | None = field(default=None, kw_only=True)
    retry: RetryPolicy | None = field(default=None, kw_only=True)
    fingerprint: Any = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        validate_key(self.key)
        if not callable(self.fn):
            raise TypeError(f"job {self.key!r}: fn must be callable, got {self.fn!r}")
        if type(self.priority) is not Priority:
            try:
                object.__setattr__(self, "priority", Priority(self.priority))
            except ValueError:
                raise ValueError(
                    f"job {self.key!r}: priority must be a Priority (low, medium, high), "
                    f"got {self.priority!r}"
                ) from None
        timeout = self.timeout
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ValueError(
                f"job {self.key!r}: timeout must be a positive, finite number of seconds or "
                f"None, got {timeout!r}"
            )
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise TypeError(
                f"job {self.key!r}: retry must be a RetryPolicy or None, got {self.retry!r}"
            )


class JobEventKind(StrEnum):
    """What happened to a job (values are text, for logs and frames)."""

    QUEUED = "queued"
    """Admitted to its lane."""
    STARTED = "started"
    """An attempt started (``attempt`` is its number, 1-based)."""
    RETRY = "retry"
    """An attempt failed and another one follows after the backoff (``outcome`` says why)."""
    COMPLETED = "completed"
    """Terminal: the job returned (``outcome`` is `Completed`)."""
    FAILED = "failed"
    """Terminal: the job failed for good, timed out or was cancelled (``outcome`` is `Failed`)."""
    LOST = "lost"
    """Terminal: abandoned before it ran (its push was cancelled, or `Queue.close` dropped it);
    the key was released (or went back to its earlier Failed state)."""
    CACHED = "cached"
    """A push was answered from the completed key (``outcome`` is the `Completed`)."""
    JOINED = "joined"
    """A push joined the job already pending or running under this key."""


TERMINAL_KINDS = frozenset({JobEventKind.COMPLETED, JobEventKind.FAILED, JobEventKind.LOST})
"""Every job admitted or claimed by a push ends with exactly one event of these kinds."""


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One change of a job, as given to `Queue.subscribe` callbacks.

    Attributes:
        kind: What happened.
        key: The job's idempotency key.
        priority: The lane of the push or job it concerns.
        at: When, in seconds since the Unix epoch, by the queue's clock.
        attempt: The attempt number (1-based) for started, retry, completed and failed;
            None otherwise.
        outcome: The `Completed` or `Failed` for completed, failed, lost, retry and cached;
            None otherwise.
    """

    kind: JobEventKind
    key: str
    priority: Priority
    at: float
    attempt: int | None = None
    outcome: Outcome | None = None


@dataclass(frozen=True, slots=True)
class Queued:
    """The job was admitted to its lane and will run; `handle` follows it."""

    handle: JobHandle


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


class JobHandle:
    """Follows one job. Awaiting it yields the job's `Outcome`; it never raises the job's error.

    ``await handle`` resolves at once when the job has already finished. Awaiting from inside
    a job of the same queue a job that has not started yet runs that job inline, on the
    awaiting job's permit (see `Queue.push_and_wait`). Dropping a handle, or cancelling a task
    that awaits it, does not stop the job; `cancel` does.

    Handles are created by the queue; all methods must be called on the queue's event loop.
    """

    __slots__ = ("_record",)

    def __init__(self, record: _Record) -> None:
        self._record = record

    @property
    def key(self) -> str:
        """The job's idempotency key."""
        return self._record.key

    @property
    def job(self) -> Job:
        """The job this handle follows (for a join: the job that runs, not the joining one)."""
        return self._record.job

    @property
    def outcome(self) -> Outcome | None:
        """`Completed` or `Failed` once the job has finished, None before."""
        return self._record.outcome

    def done(self) -> bool:
        """Whether the job has finished (completed, failed, cancelled or lost)."""
        return self._record.outcome is not None

    def cancel(self) -> bool:
        """Cancel the job: a waiting job never runs; a running job's body is cancelled.

        The job ends `Failed` with reason ``cancelled`` at once (its waiters wake now), and
        its key may be pushed again. A thread, or a body that ignores cancellation, keeps
        its lane permit until it has really returned; its result is discarded. Exactly one
        terminal state wins a race with completion: if the job finished first, nothing
        changes.

        Returns:
            True if this call cancelled the job, False if it had already finished.
        """
        return self._record.queue._cancel(self._record)

    async def stopped(self) -> None:
        """Wait until nothing of this job runs any more.

        A job's outcome can be decided before its body has returned: a timeout or a cancel
        cannot stop a thread, nor a body that ignores cancellation. This waits for the body
        itself (returns at once for a job that finished normally or never ran). Cancelling
        the wait leaves the job alone.
        """
        record = self._record
        if record.stopped:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if record.stop_waiters is None:
            record.stop_waiters = []
        record.stop_waiters.append(fut)
        await fut

    def __await__(self) -> Generator[Any, None, Outcome]:
        record = self._record
        outcome = record.outcome
        if outcome is not None:
            return outcome
        return (yield from record.queue._await_record(record).__await__())

    def __repr__(self) -> str:
        outcome = self._record.outcome
        status = "pending" if outcome is None else type(outcome).__name__.lower()
        return f"<JobHandle key={self._record.key!r} {status}>"


# Record states.
CLAIMED = 0  # a push claimed the key and waits for room in the lane (or to run inline)
QUEUED = 1  # admitted: in the lane's waiting area
DISPATCHED = 2  # handed to an idle worker that has not picked it up yet
RUNNING = 3  # attempts in progress (worker or inline)
STOPPED = 4  # the body has really stopped; the permit is released
LOST = 5  # abandoned before it ran

# Phases of a running record: what its task is awaiting.
IDLE = 0
ASYNC_BODY = 1
THREAD_BODY = 2
BACKOFF = 3

NO_FINGERPRINT: Any = object()

# How a push of a known key is answered (Queue._hit).
HIT_RUN = 0
HIT_CACHED = 1
HIT_JOINED = 2


class _Record:
    """The queue's bookkeeping for one job (one push that had to run something).

    Handles and joiners share it. `outcome` is set exactly once (`Queue._settle`).
    """

    __slots__ = (
        "attempt",
        "blocked",
        "cancels",
        "finished_at",
        "fp",
        "job",
        "key",
        "lane",
        "lend",
        "outcome",
        "pending",
        "phase",
        "prev",
        "queue",
        "retried",
        "root",
        "state",
        "stop_waiters",
        "task",
        "waiters",
        "waiting_on",
    )

    def __init__(self, queue: Queue, job: Job, lane: _Lane, prev: _Record | None) -> None:
        self.queue = queue
        self.job = job
        self.key = job.key
        self.lane = lane
        self.prev = prev
        self.state = CLAIMED
        self.outcome: Outcome | None = None
        self.waiters: list[asyncio.Future[Outcome]] | None = None
        self.attempt = 0
        self.task: asyncio.Task[Any] | None = None
        self.phase = IDLE
        self.cancels = 0
        self.pending: Failed | None = None
        self.retried = 0
        self.finished_at = 0.0
        self.fp: Any = NO_FINGERPRINT
        self.root: _Record = self
        self.waiting_on: list[_Record] | None = None
        self.blocked: list[_Lane] | None = None
        self.lend: asyncio.Lock | None = None
        self.stop_waiters: list[asyncio.Future[None]] | None = None

    @property
    def stopped(self) -> bool:
        """Whether nothing of this job runs any more (it never ran, or its body returned)."""
        return self.state == STOPPED or self.state == LOST

    def mark_stopped(self) -> None:
        """The body has really returned (or will never run): wake `JobHandle.stopped` waiters."""
        if self.state != LOST:
            self.state = STOPPED
        waiters = self.stop_waiters
        if waiters is not None:
            self.stop_waiters = None
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    @property
    def in_body(self) -> bool:
        """Whether the job's body is executing (a nested call from it is a nested call)."""
        return self.phase == ASYNC_BODY or self.phase == THREAD_BODY

    def __repr__(self) -> str:
        return f"<_Record {self.key!r} state={self.state} outcome={self.outcome!r}>"


def is_completed(outcome: Outcome | None) -> bool:
    """Whether `outcome` is a `Completed` (fast type check)."""
    return type(outcome) is Completed
