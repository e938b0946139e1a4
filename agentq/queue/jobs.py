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
import functools
import inspect
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from enum import StrEnum
from inspect import CO_ASYNC_GENERATOR
from types import FunctionType, MethodType
from typing import TYPE_CHECKING, Any

from agentq.keys import validate_key
from agentq.outcomes import Completed, Failed, Outcome
from agentq.queue.lanes import Priority
from agentq.retry import RetryPolicy

if TYPE_CHECKING:
    from agentq.queue.core import _QueueCore as Queue
    from agentq.queue.lanes import _Lane

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
            one, or an object with an ``async def __call__``) runs on the event loop; a plain
            callable runs in a worker thread of the loop's default executor. A plain
            callable that returns an awaitable (such as ``lambda: fetch(url)``) has it
            awaited on the loop. An async generator function is refused: it has no result
            to await.
        priority: The lane to run in: a `Priority`, or its text value ``"low"``,
            ``"medium"`` or ``"high"`` (converted to the member).
        timeout: Seconds one attempt may run (measured with the queue's clock), or None for
            no limit. A timeout cancels an async body and counts as a failed attempt (reason
            ``timeout``). A thread cannot be interrupted: the timeout is recorded at once, but
            the next attempt and the lane permit wait until the thread has returned.
        retry: Attempts and backoff; None means one attempt. An exception with a
            ``retryable`` attribute that is ``False`` is never retried, nor are
            `agentq.workflows.model.NonRetryable` and `agentq.workflows.model.WaitForInput`.
        fingerprint: What makes two pushes of one key "the same call", compared with ``==``.
            None (the default) derives it from `fn` when needed: the function's module,
            qualified name and code, and the values the call uses: a `functools.partial`'s
            arguments, a bound method's ``self``, a closure's captured values and the
            defaults. JSON-like values (None, bool, int, float, str, and lists, tuples and
            dicts of them) compare by value (dict key order does not matter), functions by
            their own fingerprint, other objects by ``repr`` when their class gives a
            meaningful one, else by identity (the same object); ``nonlocal`` state the
            function rebinds is left out (see ``docs/idempotency.md``). Give it explicitly
            when that does not tell your calls apart, e.g.
            ``fingerprint=("send_mail", "alice")``.

    Raises:
        TypeError: `key` is not a str, `fn` is not callable or is an async generator
            function, or `retry` is not a `RetryPolicy`; the message names the value.
        InvalidKeyError: `key` is empty, has a lone surrogate or is too long.
        ValueError: `priority` is neither a `Priority` nor one of its values, or `timeout`
            is not a positive, finite number of seconds; the message names the value.

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
        fn = self.fn
        inner = fn.func if type(fn) is functools.partial else fn
        if type(inner) is FunctionType:  # the common case, checked inline (a hot path)
            async_generator = bool(inner.__code__.co_flags & CO_ASYNC_GENERATOR)
        elif not callable(fn):
            raise TypeError(f"job {self.key!r}: fn must be callable, got {fn!r}")
        else:
            async_generator = _is_async_generator(fn)
        if async_generator:
            raise TypeError(
                f"job {self.key!r}: fn is an async generator function ({self.fn!r}), which "
                "returns no result to await; wrap it, e.g. in an async def that collects "
                "its items into a list"
            )
        if type(self.priority) is not Priority:
            what = f"job {self.key!r}: unknown priority"
            object.__setattr__(self, "priority", as_priority(self.priority, what))
        timeout = self.timeout
        if timeout is not None and not _positive_seconds(timeout):
            raise ValueError(
                f"job {self.key!r}: timeout must be a positive, finite number of seconds or "
                f"None, got {timeout!r}"
            )
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise TypeError(
                f"job {self.key!r}: retry must be a RetryPolicy or None, got {self.retry!r}"
            )


def as_priority(value: object, what: str) -> Priority:
    """`value` as a `Priority`: a member, or its text value (``"low"``…).

    Raises:
        ValueError: Anything else: "<what> <value>: use a Priority or one of 'low', …".
    """
    if type(value) is Priority:
        return value
    if isinstance(value, str):
        try:
            return Priority(value)
        except ValueError:
            pass
    allowed = ", ".join(repr(p.value) for p in Priority)
    raise ValueError(f"{what} {value!r}: use a Priority or one of {allowed}")


def _positive_seconds(value: object) -> bool:
    """Whether `value` is a positive, finite int or float (ints too large for a float: no)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and value > 0
    except OverflowError:  # an int beyond the float range
        return False


def _is_async_generator(fn: object) -> bool:
    """Whether calling `fn` returns an async generator (through partials, methods, __call__)."""
    while type(fn) is functools.partial:
        fn = fn.func
    if type(fn) is MethodType:
        fn = fn.__func__
    if type(fn) is FunctionType:  # the common case, without inspect's unwrapping
        return bool(fn.__code__.co_flags & CO_ASYNC_GENERATOR)
    return inspect.isasyncgenfunction(fn) or inspect.isasyncgenfunction(
        getattr(fn, "__call__", None)  # noqa: B004 - callable objects
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
        its lane permit until it has really returned; its result is discarded, and a new
        run of the key starts its body only after that (one body per key at a time).
        Exactly one terminal state wins a race with completion: if the job finished first,
        nothing changes.

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
        await self._record.until_stopped()

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
PREVIOUS = 4  # waiting for the body of the key's previous run to stop

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
        unstopped = self.queue._unstopped
        if unstopped and unstopped.get(self.key) is self:
            del unstopped[self.key]
        waiters = self.stop_waiters
        if waiters is not None:
            self.stop_waiters = None
            wake(waiters, None)

    async def until_stopped(self) -> None:
        """Wait until `stopped`; cancelling the wait leaves the job alone."""
        if self.stopped:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.stop_waiters is None:
            self.stop_waiters = []
        self.stop_waiters.append(fut)
        await fut

    def waits_for(self, target: _Record) -> bool:
        """Whether this job waits, directly or through other jobs, for `target`."""
        stack: list[_Record] = [self]
        seen: set[int] = set()
        while stack:
            rec = stack.pop()
            if rec is target:
                return True
            if id(rec) in seen:
                continue
            seen.add(id(rec))
            if rec.waiting_on:
                stack.extend(rec.waiting_on)
        return False

    @property
    def in_body(self) -> bool:
        """Whether the job's body is executing (a nested call from it is a nested call)."""
        return self.phase == ASYNC_BODY or self.phase == THREAD_BODY

    def __repr__(self) -> str:
        return f"<_Record {self.key!r} state={self.state} outcome={self.outcome!r}>"


def wake(waiters: list[asyncio.Future[Any]], value: Any) -> None:
    """Resolve every waiting future with `value` (skipping those cancelled meanwhile)."""
    for fut in waiters:
        if not fut.done():
            fut.set_result(value)


def is_completed(outcome: Outcome | None) -> bool:
    """Whether `outcome` is a `Completed` (fast type check)."""
    return type(outcome) is Completed
