"""What ends an attempt: the rules shared by `agentq.queue.runner` and the lane worker.

`agentq.queue.runner.run_attempts` runs a record's attempts, retries and backoffs in a
coroutine of its own. The commonest job needs none of that: one attempt of an async body
(or of a lambda that only builds a coroutine, `agentq.queue.builders`), with no timeout, no
retry policy, no store to read or save, no subscriber and no earlier run of its key still
running. A lane worker (`agentq.queue.dispatch.Dispatcher._work`) awaits such a body
itself, with no coroutine made for the record (issue 25), settles what it returned as
`run_attempts` does, and hands what it raised to `raised`. Both paths decide what an
exception means with `failure_of`, so the rules of interrupts (the queue's own cancels are
undone with ``Task.uncancel``, a cancel from outside propagates, Ctrl-C fails the job and
propagates, a GeneratorExit of the task being closed propagates untouched) are written
once.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from agentq.outcomes import Completed, Failed
from agentq.queue.lane import LOST, STOPPED
from agentq.queue.ledger import Ledger, cancelled_outcome, error_outcome
from agentq.queue.rates import retry_after
from agentq.queue.records import CURRENT, IDLE, Record

__all__ = [
    "COMPLETED_NONE",
    "closed_from_outside",
    "completed",
    "failure_of",
    "finish",
    "pause_for",
    "raised",
    "settle_fault",
]

COMPLETED_NONE = Completed(None)
"""The outcome of every job that returned None (outcomes are immutable: one is enough)."""

_new = object.__new__
_set_output: Any = Completed.__dict__["output"].__set__


def completed(output: Any) -> Completed:
    """`Completed(output)` without the frozen dataclass's ``__init__`` (once per job)."""
    if output is None:
        return COMPLETED_NONE
    done: Completed = _new(Completed)
    _set_output(done, output)
    return done


def closed_from_outside(task: asyncio.Task[Any]) -> bool:
    """Whether a GeneratorExit was thrown in by ``coroutine.close()`` (the garbage collector
    finalizing an abandoned task), not raised by a body running in `task`'s own step."""
    return asyncio.current_task(task.get_loop()) is not task


def settle_fault(
    ledger: Ledger, record: Record, task: asyncio.Task[Any], fault: BaseException
) -> None:
    """Settle `record` with `fault`, raised outside its body (the queue's own code), unless it
    already has an outcome or `fault` is the GeneratorExit of `task` closed from outside:
    whatever goes wrong, a record still ends in one terminal state."""
    if record.outcome is None and not (
        type(fault) is GeneratorExit and closed_from_outside(task)
    ):
        ledger.settle(record, error_outcome(fault))


def failure_of(
    ledger: Ledger, record: Record, task: asyncio.Task[Any], base: int, exc: BaseException
) -> Failed | None:
    """What an attempt of `record` whose body raised `exc` in `task` ends with.

    `base` is ``task.cancelling()`` when the attempt began. The queue's own interrupts of
    the attempt are undone first (``Task.uncancel``).

    Returns:
        The attempt's failure (to retry or settle), or None when the record was settled
        meanwhile (a cancel, a timeout decided by its watchdog).

    Raises:
        BaseException: `exc` again when it must propagate: a cancel from outside (the record
            is settled cancelled first), a ``KeyboardInterrupt`` raised on the loop (the
            record is settled failed first), a GeneratorExit of the task being closed.
    """
    if isinstance(exc, asyncio.CancelledError):
        record.uncancel(task)
        if task.cancelling() > base:  # cancelled from outside: propagate
            ledger.settle(record, cancelled_outcome(f"{record.title} was cancelled", exc))
            raise exc
        if record.pending is None and record.outcome is None:
            # The body raised CancelledError although nobody cancelled this task.
            return cancelled_outcome(f"{record.title} raised CancelledError", exc)
        return record.take_pending()
    if type(exc) is GeneratorExit and closed_from_outside(task):
        raise exc
    record.uncancel(task)
    if isinstance(exc, KeyboardInterrupt):  # Ctrl-C: record it, let it stop us
        ledger.settle(record, error_outcome(exc))
        raise exc
    if record.pending is None and record.outcome is None:
        return error_outcome(exc)
    return record.take_pending()


def pause_for(ledger: Ledger, record: Record, failure: Failed) -> None:
    """A failure that asks to wait (a rate limit) pauses the record's whole lane."""
    pause = retry_after(failure.exception, str(record.lane.priority))
    if pause is not None:
        record.lane.pause(ledger.clock.time() + pause)


def finish(ledger: Ledger, record: Record) -> None:
    """The record's attempts are over and its body has returned: it is stopped."""
    record.task = None
    record.phase = IDLE
    if ledger.keys.unstopped or record.stop_waiters is not None or record.state == LOST:
        ledger.keys.body_stopped(record)
    else:
        record.state = STOPPED


def raised(
    ledger: Ledger,
    record: Record,
    task: asyncio.Task[Any],
    token: contextvars.Token[Record | None],
    base: int,
    exc: BaseException,
) -> None:
    """The body a lane worker awaited directly raised `exc`: settle the record with its
    failure (no retry policy: it is final) and stop it.

    Raises:
        BaseException: `exc` again when it must propagate (`failure_of`).
    """
    record.phase = IDLE
    CURRENT.reset(token)
    try:
        failure = failure_of(ledger, record, task, base, exc)
        if failure is not None and record.outcome is None:
            pause_for(ledger, record, failure)
            ledger.settle(record, failure)
    except BaseException as fault:
        settle_fault(ledger, record, task, fault)
        raise
    finally:
        finish(ledger, record)
