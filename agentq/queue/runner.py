"""Running one job in the current task: attempts, timeouts, threads, retries, interrupts.

The body of an async job runs directly in the task that runs the record (a lane worker, or
the waiting job's task for a nested call): no task per job. A plain callable runs in a
thread of the loop's default executor, unless its code shows that calling it only builds a
coroutine (``lambda: fetch(url)`` with an ``async def`` fetch): then it is called on the loop
and the coroutine awaited there (the rule is in `agentq.queue.builders`).

Interrupts (a timeout, `JobHandle.cancel`, `Queue.close`) decide the attempt at once and then
cancel the task if it is awaiting an async body or a backoff; the number of such cancels is
kept in ``record.cancels`` and undone with ``Task.uncancel`` when the body has stopped, so a
cancellation that comes from outside (the loop shutting down, a parent job's timeout) is told
apart and always propagates. A thread is never "cancelled": the task keeps waiting for it, so
the next attempt and the release of the permit wait until it has really returned.

A failure that asks to wait (`agentq.queue.rates.retry_after`: a ``retry_after`` attribute,
or an HTTP 429 with ``Retry-After``) pauses the job's whole lane until then; the job's own
retry, like every retry of that lane, waits until the pause is over.

Which failures a retry policy may retry is decided by `agentq.retry.is_retryable`, the rule
shared with workflow steps (``retryable = False``, `NonRetryable`, `WaitForInput`, and
exception groups judged by their leaves).

Whatever a body raises fails that job and nothing else: every exception, including
``SystemExit``, ``GeneratorExit`` and other `BaseException` subclasses, becomes a failed
attempt that carries the exception object. Two exceptions are special: a ``CancelledError``
is told apart as above, and a ``KeyboardInterrupt`` raised on the loop (Ctrl-C) fails the
job at once and then propagates, so that it still stops the program; raised inside a thread
job it was not a Ctrl-C (those reach the main thread) and is only recorded.

With a store (`Queue(store=...)`), a record claimed without reading it first reads it before
its first attempt, and a body's output is saved before the job is settled `Completed`
(`agentq.queue.persistence`).

One body per key at a time: a run whose outcome was decided while its body still runs is
kept by the key table (`agentq.queue.keytable.KeyTable.previous_run`); the key's next run
waits (holding its permit) until that body has stopped before it starts its own.

Everything here works on one `Record` and reports to the queue's `Ledger` (settling the
record, publishing started and retry events, the clock for timeouts and backoff).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine
from inspect import CO_COROUTINE
from types import FunctionType
from typing import Any

import agentq.tracing as tracing
from agentq.errors import DeadlockError
from agentq.outcomes import ErrorInfo, Failed, FailureReason
from agentq.queue.attempt import (
    completed,
    failure_of,
    pause_for,
    settle_fault,
)
from agentq.queue.jobs import Job, JobEventKind
from agentq.queue.lane import LOST, RUNNING, STOPPED
from agentq.queue.ledger import Ledger, cancelled_outcome, error_outcome
from agentq.queue.persistence import read_before_run, save_and_settle
from agentq.queue.records import (
    ASYNC_BODY,
    BACKOFF,
    CURRENT,
    IDLE,
    PREVIOUS,
    THREAD_BODY,
    Record,
)
from agentq.queue.threads import Raised, discard, in_thread
from agentq.retry import is_retryable


def is_async(fn: Callable[[], Any]) -> bool:
    """Whether calling `fn` returns a coroutine to await (else it runs in a thread)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    )




def on_timeout(ledger: Ledger, record: Record, attempt: int) -> None:
    """Record that `attempt` of `record` timed out, then interrupt its body."""
    job = record.job
    if (
        job is None  # settled
        or record.outcome is not None
        or record.attempt != attempt
        or not record.in_body
        or record.pending is not None
    ):
        return
    timeout = job.timeout
    exc = TimeoutError(
        f"{record.title} attempt {attempt} exceeded its timeout of {timeout} s"
    )
    failure = Failed(FailureReason.TIMEOUT, ErrorInfo.from_exception(exc), exc)
    policy = job.retry
    record.pending = failure
    if policy is not None and policy.should_retry(attempt):
        record.retried = attempt
        if ledger.subscribers:
            ledger.emit(JobEventKind.RETRY, record.key, job.priority, attempt, failure)
    else:
        ledger.settle(record, failure)
    record.interrupt()


async def run_record(ledger: Ledger, record: Record, task: asyncio.Task[Any]) -> None:
    """Run `record`'s attempts in `task` (the current one) until it is settled and stopped.

    With tracing on (`agentq.tracing`), inside a `JOB` span started under the context the job
    was pushed in; a job that ends `Failed` sets the span's status to ERROR.

    Raises:
        asyncio.CancelledError: The task was cancelled from outside; the record is settled
            as cancelled first (and a running thread is waited for).
    """
    job = record.job
    if job is None:  # settled before it ran: nothing to do
        return
    if record.trace is None:  # tracing off: no span, no cost
        await run_attempts(ledger, record, job, task)
        return
    attributes = {
        "agentq.job.key": record.key, "agentq.job.name": job.name,
        "agentq.job.priority": str(job.priority),
    }
    with tracing.span(tracing.JOB, attributes, parent=record.trace) as span:
        try:
            await run_attempts(ledger, record, job, task)
        finally:
            span.set("agentq.job.attempts", record.attempt)
            outcome = record.outcome
            if isinstance(outcome, Failed):
                span.set("agentq.job.failure", str(outcome.reason))
                span.fail(f"{outcome.reason}: {outcome.error}", outcome.exception)


async def run_attempts(
    ledger: Ledger, record: Record, job: Job, task: asyncio.Task[Any]
) -> None:
    """`run_record` of an untraced record (``record.trace`` None) and its unsettled `job`:
    what a lane worker awaits directly, without the span's wrapper.

    Raises:
        asyncio.CancelledError: As `run_record`.
    """
    fn = job.fn
    policy = job.retry
    record.state = RUNNING
    record.task = task
    if type(fn) is FunctionType:
        body_is_async = bool(fn.__code__.co_flags & CO_COROUTINE)
    elif type(fn) is functools.partial and type(fn.func) is FunctionType:
        body_is_async = bool(fn.func.__code__.co_flags & CO_COROUTINE)
    else:
        body_is_async = is_async(fn)
    # A lambda that only builds a coroutine (``lambda: fetch(url)``) is called on the loop.
    builds = (
        not body_is_async
        and type(fn) is FunctionType
        and ledger.builders.builds_coroutine(fn)
    )
    try:
        keys = ledger.keys
        if keys.unstopped:  # a run of some key outlived its outcome: is it this key's?
            previous = keys.previous_run(record)
            if previous is not None:
                await _after_previous(ledger, record, task, previous)
        if record.unread:  # claimed by push_nowait: the store may answer it
            await read_before_run(ledger, record)
        saving = False
        while record.outcome is None:
            attempt = record.attempt + 1
            record.attempt = attempt
            if ledger.subscribers:
                ledger.emit(JobEventKind.STARTED, record.key, job.priority, attempt, None)
            # One attempt: its failure, or None once the record is settled.
            failure: Failed | None
            watchdog = None
            if job.timeout is not None:
                watchdog = task.get_loop().create_task(_watch(ledger, record, attempt, job.timeout))
            token = CURRENT.set(record)
            base = task.cancelling()
            raised: BaseException | None = None
            try:
                if body_is_async or builds:
                    record.phase = ASYNC_BODY
                    output = await fn()
                else:
                    record.phase = THREAD_BODY
                    output = await in_thread(ledger, record, fn)
                    if type(output) is Raised:
                        raised = output.exc  # only recorded, even a KeyboardInterrupt
                    elif record.pending is None and record.outcome is None:
                        if inspect.isawaitable(output):
                            record.phase = ASYNC_BODY
                            output = await output
                        elif inspect.isasyncgen(output):
                            raised = _async_generator_returned(record, output)
            except BaseException as exc:  # anything the body raised fails this attempt
                failure = failure_of(ledger, record, task, base, exc)  # or propagates
            else:
                if record.cancels:
                    record.uncancel(task)
                if record.pending is None and record.outcome is None:
                    if raised is None:
                        if ledger.store is None or not job.persist:
                            ledger.settle(record, completed(output))
                        else:
                            saving = True  # after this attempt's watchdog has stopped
                        break
                    failure = error_outcome(raised)
                else:
                    if raised is None:
                        discard(output)  # interrupted: the output is discarded
                    failure = record.take_pending()
            finally:
                record.phase = IDLE
                CURRENT.reset(token)
                if watchdog is not None:
                    watchdog.cancel()
            if failure is None or record.outcome is not None:
                break
            pause_for(ledger, record, failure)  # a rate limit: the whole lane waits
            if (
                policy is None
                or not policy.should_retry(attempt)
                or not is_retryable(failure.exception)
            ):
                ledger.settle(record, failure)
                break
            if record.retried != attempt:
                record.retried = attempt
                if ledger.subscribers:
                    ledger.emit(JobEventKind.RETRY, record.key, job.priority, attempt, failure)
            await _backoff(ledger, record, task, policy.delay(attempt))
        if saving:
            await save_and_settle(ledger, record, output)
    except BaseException as exc:
        settle_fault(ledger, record, task, exc)
        raise
    finally:
        record.task = None
        record.phase = IDLE
        if ledger.keys.unstopped or record.stop_waiters is not None or record.state == LOST:
            ledger.keys.body_stopped(record)
        else:  # `body_stopped` with nothing to forget or wake, inline: once per job
            record.state = STOPPED




async def _after_previous(
    ledger: Ledger, record: Record, task: asyncio.Task[Any], previous: Record
) -> None:
    """Wait, holding the permit, until the body of the key's previous run has stopped.

    If that body waits (through other jobs) for this run, it could never stop first: this
    run fails with `DeadlockError` instead.
    """
    if previous.waits_for(record):
        exc = DeadlockError(
            f"{record.title} cannot start: the previous run of this key, still running "
            "after its timeout or cancel, waits for it, and one key never runs two bodies "
            "at once"
        )
        ledger.settle(record, error_outcome(exc))
        return
    record.wait_on(previous)
    try:
        await _wait_in_phase(ledger, record, task, PREVIOUS, previous.until_stopped())
    finally:
        record.stop_waiting_on(previous)


async def _watch(ledger: Ledger, record: Record, attempt: int, seconds: float) -> None:
    await ledger.clock.sleep(seconds)
    on_timeout(ledger, record, attempt)


async def _backoff(ledger: Ledger, record: Record, task: asyncio.Task[Any], delay: float) -> None:
    """Sleep the retry policy's `delay`, then on while the job's lane is paused."""
    clock = ledger.clock
    await _wait_in_phase(ledger, record, task, BACKOFF, clock.sleep(delay))
    lane = record.lane
    while record.outcome is None and (left := lane.paused_until - clock.time()) > 0:
        await _wait_in_phase(ledger, record, task, BACKOFF, clock.sleep(left))


async def _wait_in_phase(
    ledger: Ledger,
    record: Record,
    task: asyncio.Task[Any],
    phase: int,
    waiting: Coroutine[Any, Any, None],
) -> None:
    """Await `waiting` in `phase`; a cancel from outside (or of an unsettled job) settles the
    job as cancelled and propagates, while the queue's own interrupt is undone."""
    record.phase = phase
    base = task.cancelling()
    try:
        await waiting
    except asyncio.CancelledError as exc:
        record.uncancel(task)
        if task.cancelling() > base or record.outcome is None:
            message = f"{record.title} was cancelled"
            ledger.settle(record, cancelled_outcome(message, exc))
            raise
    finally:
        record.phase = IDLE


def _async_generator_returned(record: Record, output: object) -> TypeError:
    return TypeError(
        f"{record.title}: fn returned an async generator ({output!r}), not a result; "
        "the job's fn must return a value or an awaitable"
    )
