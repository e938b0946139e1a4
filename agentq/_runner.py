"""Running one job in the current task: attempts, timeouts, threads, retries, interrupts.

The body of an async job runs directly in the task that runs the record (a lane worker, or
the waiting job's task for a nested call): no task per job. A plain callable runs in a
thread of the loop's default executor.

Interrupts (a timeout, `JobHandle.cancel`, `Queue.close`) decide the attempt at once and then
cancel the task if it is awaiting an async body or a backoff; the number of such cancels is
kept in ``record.cancels`` and undone with ``Task.uncancel`` when the body has stopped, so a
cancellation that comes from outside (the loop shutting down, a parent job's timeout) is told
apart and always propagates. A thread is never "cancelled": the task keeps waiting for it, so
the next attempt and the release of the permit wait until it has really returned.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Callable
from inspect import CO_COROUTINE
from types import FunctionType
from typing import TYPE_CHECKING, Any

from agentq.jobs import (
    ASYNC_BODY,
    BACKOFF,
    IDLE,
    RUNNING,
    THREAD_BODY,
    JobEventKind,
    _Record,
)
from agentq.outcomes import Completed, ErrorInfo, Failed, FailureReason

if TYPE_CHECKING:
    from agentq._core import _QueueCore as Queue

CURRENT: contextvars.ContextVar[_Record | None] = contextvars.ContextVar(
    "agentq_current_job", default=None
)
"""The record whose body the current context runs (copied into tasks and threads it starts)."""

_CANCELLED_TYPE = "asyncio.exceptions.CancelledError"


def is_async(fn: Callable[[], Any]) -> bool:
    """Whether calling `fn` returns a coroutine to await (else it runs in a thread)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    )


def cancelled_outcome(message: str, exc: BaseException | None = None) -> Failed:
    """A `Failed(cancelled)`; with `exc` (a CancelledError) its traceback is kept as text."""
    if exc is not None:
        info = ErrorInfo.from_exception(exc)
        return Failed(FailureReason.CANCELLED, ErrorInfo(info.type, message, info.traceback))
    return Failed(FailureReason.CANCELLED, ErrorInfo(_CANCELLED_TYPE, message))


def interrupt(record: _Record) -> None:
    """Cancel the task running `record` if it awaits the async body or a backoff.

    Never cancels the current task (a job cancelling itself just records it) nor a thread.
    """
    task = record.task
    if (
        task is not None
        and (record.phase == ASYNC_BODY or record.phase == BACKOFF)
        and task is not asyncio.current_task()
    ):
        record.cancels += 1
        task.cancel()


def on_timeout(queue: Queue, record: _Record, attempt: int) -> None:
    """Record that `attempt` of `record` timed out, then interrupt its body."""
    if (
        record.outcome is not None
        or record.attempt != attempt
        or not record.in_body
        or record.pending is not None
    ):
        return
    timeout = record.job.timeout
    exc = TimeoutError(f"job {record.key!r} attempt {attempt} exceeded its timeout of {timeout} s")
    failure = Failed(FailureReason.TIMEOUT, ErrorInfo.from_exception(exc), exc)
    policy = record.job.retry
    record.pending = failure
    if policy is not None and policy.should_retry(attempt):
        record.retried = attempt
        if queue._subscribers:
            queue._emit(JobEventKind.RETRY, record.key, record.job.priority, attempt, failure)
    else:
        queue._settle(record, failure)
    interrupt(record)


def _uncancel(record: _Record, task: asyncio.Task[Any]) -> None:
    while record.cancels:
        record.cancels -= 1
        task.uncancel()


def _take_pending(record: _Record) -> Failed | None:
    """The failure an interrupter decided for this attempt (None: the job is settled)."""
    pending = record.pending
    record.pending = None
    return None if record.outcome is not None else pending


async def run_record(queue: Queue, record: _Record, task: asyncio.Task[Any]) -> None:
    """Run `record`'s attempts in `task` (the current one) until it is settled and stopped.

    Raises:
        asyncio.CancelledError: The task was cancelled from outside; the record is settled
            as cancelled first (and a running thread is waited for).
    """
    job = record.job
    fn = job.fn
    policy = job.retry
    record.state = RUNNING
    record.task = task
    if type(fn) is FunctionType:
        body_is_async = bool(fn.__code__.co_flags & CO_COROUTINE)
    else:
        body_is_async = is_async(fn)
    try:
        while record.outcome is None:
            attempt = record.attempt + 1
            record.attempt = attempt
            if queue._subscribers:
                queue._emit(JobEventKind.STARTED, record.key, job.priority, attempt, None)
            # One attempt: its failure, or None once the record is settled.
            failure: Failed | None
            watchdog = None
            if job.timeout is not None:
                watchdog = task.get_loop().create_task(_watch(queue, record, attempt, job.timeout))
            token = CURRENT.set(record)
            base = task.cancelling()
            try:
                if body_is_async:
                    record.phase = ASYNC_BODY
                    output = await fn()
                else:
                    record.phase = THREAD_BODY
                    output = await _in_thread(queue, record, fn)
                    if inspect.isawaitable(output) and record.pending is None and (
                        record.outcome is None
                    ):
                        record.phase = ASYNC_BODY
                        output = await output
            except asyncio.CancelledError as exc:
                _uncancel(record, task)
                if task.cancelling() > base:  # cancelled from outside: propagate
                    message = f"job {record.key!r} was cancelled"
                    queue._settle(record, cancelled_outcome(message, exc))
                    raise
                if record.pending is None and record.outcome is None:
                    # The body raised CancelledError although nobody cancelled this task.
                    message = f"job {record.key!r} raised CancelledError"
                    failure = cancelled_outcome(message, exc)
                else:
                    failure = _take_pending(record)
            except Exception as exc:
                _uncancel(record, task)
                if record.pending is None and record.outcome is None:
                    failure = Failed(FailureReason.ERROR, ErrorInfo.from_exception(exc), exc)
                else:
                    failure = _take_pending(record)
            else:
                _uncancel(record, task)
                if record.pending is None and record.outcome is None:
                    queue._settle(record, Completed(output))
                    break
                _discard(output)  # interrupted: the output is discarded
                failure = _take_pending(record)
            finally:
                record.phase = IDLE
                CURRENT.reset(token)
                if watchdog is not None:
                    watchdog.cancel()
            if failure is None or record.outcome is not None:
                break
            if policy is None or not policy.should_retry(attempt):
                queue._settle(record, failure)
                break
            if record.retried != attempt:
                record.retried = attempt
                if queue._subscribers:
                    queue._emit(JobEventKind.RETRY, record.key, job.priority, attempt, failure)
            await _backoff(queue, record, task, policy.delay(attempt))
    except BaseException as exc:
        if record.outcome is None:  # KeyboardInterrupt, SystemExit: still one terminal state
            queue._settle(record, Failed(FailureReason.ERROR, ErrorInfo.from_exception(exc)))
        raise
    finally:
        record.task = None
        record.phase = IDLE
        record.mark_stopped()


async def _watch(queue: Queue, record: _Record, attempt: int, seconds: float) -> None:
    await queue._clock.sleep(seconds)
    on_timeout(queue, record, attempt)


async def _backoff(queue: Queue, record: _Record, task: asyncio.Task[Any], delay: float) -> None:
    record.phase = BACKOFF
    base = task.cancelling()
    try:
        await queue._clock.sleep(delay)
    except asyncio.CancelledError as exc:
        _uncancel(record, task)
        if task.cancelling() > base or record.outcome is None:
            queue._settle(record, cancelled_outcome(f"job {record.key!r} was cancelled", exc))
            raise
    finally:
        record.phase = IDLE


def _discard(value: Any) -> None:
    if inspect.iscoroutine(value):
        value.close()  # a coroutine nobody will await: close it so no warning is raised


async def _in_thread(queue: Queue, record: _Record, fn: Callable[[], Any]) -> Any:
    """Run `fn` in a worker thread; if cancelled from outside, wait for it, then re-raise."""
    loop = queue._loop_or_raise()
    done: asyncio.Future[Any] = loop.create_future()
    loop.run_in_executor(None, _thread_main, loop, done, contextvars.copy_context(), fn)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError as exc:
        # Interrupts never cancel a thread phase, so this comes from outside. The thread
        # cannot be stopped: record the cancel now, keep the permit until it has returned.
        queue._settle(record, cancelled_outcome(f"job {record.key!r} was cancelled", exc))
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                continue
            except Exception:
                break
        if not done.cancelled():
            done.exception()  # mark it retrieved
        raise


def _thread_main(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Any],
    ctx: contextvars.Context,
    fn: Callable[[], Any],
) -> None:
    try:
        result = ctx.run(fn)
    except BaseException as exc:
        _post(loop, done, None, exc)
    else:
        _post(loop, done, result, None)


def _post(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    try:
        loop.call_soon_threadsafe(_resolve, done, result, exc)
    except RuntimeError:  # the loop is closed: nobody waits for this thread any more
        _discard(result)


def _resolve(done: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if done.done():
        _discard(result)
    elif exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(result)
