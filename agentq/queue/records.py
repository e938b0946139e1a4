"""Records: the queue's bookkeeping for one job, shared by its handles and joiners.

A `Record` is made when a push has to run something (`agentq.queue.keytable.KeyTable.claim`)
and lives as long as its key remembers it. It owns what belongs to one job: its state in its
lane (`agentq.queue.lane`), its outcome and the futures waiting for it, the phase of the
attempt that runs it, the interrupts sent to that attempt, and the waits it makes on other
jobs (``waiting_on`` edges, the lanes its root is ``blocked`` on), read by the nesting rules.

`CURRENT` names the record whose body the current context runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from typing import Any

from agentq.outcomes import Completed, Failed, Outcome
from agentq.queue.jobs import Job
from agentq.queue.lane import CLAIMED, LOST, STOPPED, Lane
from agentq.tracing import capture

# Phases of a running record: what its task is awaiting.
IDLE = 0
ASYNC_BODY = 1
THREAD_BODY = 2
BACKOFF = 3
PREVIOUS = 4  # waiting for the body of the key's previous run to stop
READING = 5  # reading the key's stored outcome before the first attempt (`unread`)
SAVING = 6  # the body returned: saving its output to the queue's store (not interruptible)

class Record:
    """The queue's bookkeeping for one job (one push that had to run something).

    Handles and joiners share it. `outcome` is set exactly once, by `resolve` (through
    `agentq.queue.ledger.Ledger.settle` or an abandon). `owner` is the ledger of the queue
    that made it, compared by identity to tell this queue's jobs from another's.
    """

    # Every job sets these; the rarer fields below are class-level defaults, set on the
    # instance (in its ``__dict__``, made on the first such write) only by the jobs that
    # need them: a record is smaller, and the garbage collector, which visits every slot
    # of every live record, has fewer to visit (issue 25).
    # Read on every job's path, so slots too (an attribute of the class read through an
    # instance is not specialised by the interpreter: a generic lookup each time):
    # `cancels`, `prev`, `stop_waiters`, `trace`, `unread`.
    __slots__ = (
        "__dict__",
        "attempt",
        "cancels",
        "first",
        "fp",
        "fp_args",
        "job",
        "key",
        "lane",
        "name",
        "outcome",
        "owner",
        "phase",
        "prev",
        "state",
        "stop_waiters",
        "task",
        "trace",
        "unread",
        "waiters",
    )

    fp_args: tuple[Any, ...] | None  # a slot, set with a `Deferred` fingerprint only
    pending: Failed | None = None
    retried: int = 0
    finished_at: float = 0.0
    waiting_on: list[Record] | None = None
    blocked: list[Lane[Record]] | None = None
    lend: asyncio.Lock | None = None
    stored_fp: str | None = None
    """The call's stored fingerprint, taken at the claim with a store (`KeyTable.claim`)."""
    admitted_at: float = 0.0
    """Clock time it entered a gated lane's waiting area (the arbiter's aging), else 0.0."""
    root: Record | None = None
    """The record holding the permit this one runs on, when it runs inline on another's
    (`agentq.queue.nesting`); None: its own (a record naming itself would be a reference
    cycle, freed only by the garbage collector: one a job that ran on a lane worker)."""

    def __init__(
        self, owner: object, job: Job, lane: Lane[Record], prev: Record | None, fp: Any
    ) -> None:
        self.owner = owner
        # The job until the record is settled; then None, so that a finished key keeps no
        # callable (nor what it holds: a client, an agent's deps) alive. What is needed
        # after that is kept: the key, the name (`title`), the fingerprint (`fp`), and a
        # weak reference to a completed job (`first`), so that pushing that very `Job`
        # object again is still the same call by identity while the caller keeps it.
        self.job: Job | None = job
        self.first: weakref.ref[Job] | None = None
        self.key = job.key
        self.name = job.name
        self.lane = lane
        self.prev: Record | None = prev
        self.state = CLAIMED
        self.outcome: Outcome | None = None
        self.waiters: list[asyncio.Future[Outcome]] | None = None
        self.attempt = 0
        self.task: asyncio.Task[Any] | None = None
        self.phase = IDLE
        # The fingerprint of the call, taken when the key was claimed; or its `Deferred`
        # part, with the function's defaults in `fp_args` (`KeyTable.fingerprint` builds it).
        self.fp = fp
        # The OpenTelemetry context of the push (the job's span starts under it), or None.
        self.trace: Any = capture()
        # Claimed without reading the queue's store (push_nowait): read it before running.
        self.unread = False
        self.cancels = 0
        self.stop_waiters: list[asyncio.Future[None]] | None = None

    # ------------------------------------------------------------ outcome

    def resolve(self, outcome: Outcome) -> None:
        """Set the outcome and wake everyone waiting for it (`prev` is no longer needed).

        Releases the job (see `job`): a body still running keeps its own reference.
        """
        self.outcome = outcome
        if self.prev is not None:
            self.prev = None
        job = self.job
        if job is not None:
            self.job = None
            if type(outcome) is Completed:
                self.first = weakref.ref(job)
        waiters = self.waiters
        if waiters is not None:
            self.waiters = None
            wake(waiters, outcome)

    async def wait(self) -> Outcome:
        """Wait for the outcome; cancelling the wait leaves the job alone."""
        fut = self.add_waiter(asyncio.get_running_loop())
        try:
            return await fut
        except asyncio.CancelledError:
            self.drop_waiter(fut)
            raise

    def add_waiter(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Outcome]:
        """A future of `loop` (the running one) resolved with the outcome; a waiter that
        stops waiting gives it back (`drop_waiter`)."""
        fut: asyncio.Future[Outcome] = loop.create_future()
        waiters = self.waiters
        if waiters is None:
            self.waiters = waiters = []
        waiters.append(fut)
        return fut

    def drop_waiter(self, fut: asyncio.Future[Outcome]) -> None:
        """Forget a future of `add_waiter` (its wait was cancelled)."""
        waiters = self.waiters
        if waiters is not None and fut in waiters:
            waiters.remove(fut)

    @property
    def title(self) -> str:
        """How messages name the job (`agentq.queue.jobs.Job.title`)."""
        name = self.name
        return f"job {self.key!r}" if name is None else name

    def same_job(self, job: Job) -> bool:
        """Whether `job` is the very `Job` object that claimed the key (identity)."""
        if job is self.job:
            return True
        first = self.first
        return first is not None and first() is job

    # ------------------------------------------------------------ the body

    @property
    def in_body(self) -> bool:
        """Whether the job's body is executing (a nested call from it is a nested call)."""
        return self.phase == ASYNC_BODY or self.phase == THREAD_BODY

    @property
    def stopped(self) -> bool:
        """Whether nothing of this job runs any more (it never ran, or its body returned)."""
        return self.state == STOPPED or self.state == LOST

    def mark_stopped(self) -> None:
        """The body has really returned (or will never run): wake `until_stopped` waiters."""
        if self.state != LOST:
            self.state = STOPPED
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

    def interrupt(self) -> None:
        """Cancel the task running this record if it awaits the async body, a backoff, or the
        previous run of its key.

        Never cancels the current task (a job cancelling itself just records it) nor a thread.
        Each cancel is counted in `cancels`, to be undone by `uncancel`.
        """
        task = self.task
        if (
            task is not None
            and self.phase in (ASYNC_BODY, BACKOFF, PREVIOUS)
            and task is not asyncio.current_task()
        ):
            self.cancels += 1
            task.cancel()

    def uncancel(self, task: asyncio.Task[Any]) -> None:
        """Undo this record's own interrupts of `task`, so that only outside cancels remain."""
        while self.cancels:
            self.cancels -= 1
            task.uncancel()

    def take_pending(self) -> Failed | None:
        """The failure an interrupter decided for this attempt (None: the job is settled)."""
        pending = self.pending
        if pending is not None:
            self.pending = None
        return None if self.outcome is not None else pending

    # ------------------------------------------------------------ waits on other jobs

    def wait_on(self, other: Record) -> None:
        """Add a ``waiting_on`` edge: this job waits for `other`."""
        edges = self.waiting_on
        if edges is None:
            edges = self.waiting_on = []
        edges.append(other)

    def stop_waiting_on(self, other: Record) -> None:
        """Remove one ``waiting_on`` edge added by `wait_on`."""
        assert self.waiting_on is not None
        self.waiting_on.remove(other)

    def waits_for(self, target: Record) -> bool:
        """Whether this job waits, directly or through other jobs, for `target`."""
        stack: list[Record] = [self]
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

    def block(self, lane: Lane[Record]) -> None:
        """Note that this job (a root holding a permit) waits for room or a permit in `lane`."""
        blocked = self.blocked
        if blocked is None:
            blocked = self.blocked = []
        blocked.append(lane)

    def unblock(self, lane: Lane[Record]) -> None:
        """Remove one note added by `block`."""
        if self.blocked is not None:
            self.blocked.remove(lane)

    def lend_lock(self) -> asyncio.Lock:
        """The lock by which this job's concurrent inline children take turns on its permit."""
        lock = self.lend
        if lock is None:
            lock = self.lend = asyncio.Lock()
        return lock

    def __repr__(self) -> str:
        return f"<Record {self.key!r} state={self.state} outcome={self.outcome!r}>"


CURRENT: contextvars.ContextVar[Record | None] = contextvars.ContextVar(
    "agentq_current_job", default=None
)
"""The record whose body the current context runs (copied into tasks and threads it starts)."""


def wake(waiters: list[asyncio.Future[Any]], value: Any) -> None:
    """Resolve every waiting future with `value` (skipping those cancelled meanwhile)."""
    for fut in waiters:
        if not fut.done():
            fut.set_result(value)
