"""Dispatch: the lane workers, and every move of a record into or out of its lane.

`Dispatcher` owns the queue's worker tasks and the flags that steer them (whether admission
has closed, who watches for released permits). It admits claimed records to their lane
(starting a worker when the lane has a free permit), runs each record on a worker through
`agentq.queue.runner`, and takes records out of their lane before they ran:
abandoned (their push was cancelled, or the queue closed), cancelled, or taken to run inline.
Whenever room is made in a lane, `freed` admits the pushes waiting for it.

A worker holds one permit while it runs a record. A finishing job hands its permit straight
to the next waiting record; with none waiting, the permit is released and the worker ends
(issue 9 item 14): a worker never parks, so a queue dropped without `close` (a notebook cell
run again) leaves no task pending for ever that asyncio would later destroy noisily. The
next admitted record starts a new worker: one task per burst of work, never per job while
records wait.
"""

from __future__ import annotations

import asyncio
from inspect import CO_COROUTINE
from types import FunctionType

from agentq.errors import JobLost, WrongLoopError
from agentq.outcomes import ErrorInfo, Failed, FailureReason
from agentq.queue.arbitration import Arbiter
from agentq.queue.attempt import COMPLETED_NONE, completed, raised
from agentq.queue.jobs import JobEventKind
from agentq.queue.lane import CLAIMED, LOST, QUEUED, RUNNING, STOPPED, Lane
from agentq.queue.ledger import Ledger, cancelled_outcome
from agentq.queue.records import ASYNC_BODY, CURRENT, IDLE, SAVING, Record
from agentq.queue.runner import run_attempts, run_record
from agentq.queue.threads import discard

_FAIRNESS = 64  # a worker yields to the loop after this many jobs in a row


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a finished worker's exception as retrieved.

    A worker ends with an exception only on purpose: a ``KeyboardInterrupt`` or
    ``SystemExit`` raised by a job on the loop, re-raised so that it stops the program (it
    reaches `asyncio.run` through the loop, not through this task). Left unretrieved, asyncio
    would also log "Task exception was never retrieved" for it when the task is collected.
    """
    if not task.cancelled():
        task.exception()


class Dispatcher:
    """The workers of a queue's lanes and the moves of records in and out of them.

    Args:
        ledger: The queue's books (keys, lanes, loop, subscribers).
        arbiter: Who gives the permits of gated lanes (`agentq.queue.arbitration`).
    """

    __slots__ = ("_watch", "arbiter", "closing", "ledger")

    def __init__(self, ledger: Ledger, arbiter: Arbiter) -> None:
        self.ledger = ledger
        self.arbiter = arbiter
        self.closing = False  # admission has closed
        self._watch: asyncio.Future[None] | None = None  # woken when a permit is released

    # ------------------------------------------------------------ into the lane

    def admit(self, rec: Record) -> None:
        """Put a claimed record into its lane; a free permit goes with it at once."""
        lane = rec.lane
        if lane.gated:
            self.arbiter.admitted(rec)
            lane.admit(rec)
            self.arbiter.pump(self._spawn)
        else:
            first = lane.admit(rec)
            if first is not None:
                self._spawn(lane, first)
        ledger = self.ledger
        if ledger.subscribers:
            ledger.emit(JobEventKind.QUEUED, rec.key, lane.priority, None, None)

    def freed(self, lane: Lane[Record]) -> None:
        """Room was made in `lane`: admit pushes waiting for it, wake a draining close."""
        if lane.space:
            while (waiter := lane.next_admissible()) is not None:
                rec, fut = waiter
                self.admit(rec)
                fut.set_result(None)
        if lane.gated:  # a permit may have been released: the arbiter gives it on
            self.arbiter.pump(self._spawn)
        watch = self._watch
        if watch is not None:
            self._watch = None
            if not watch.done():
                watch.set_result(None)

    def _spawn(self, lane: Lane[Record], first: Record) -> None:
        loop = self.ledger.running_loop()
        task = loop.create_task(self._work(lane, first), name=lane.worker_name)
        task.add_done_callback(_retrieve)
        lane.workers.add(task)

    async def _work(self, lane: Lane[Record], rec: Record) -> None:
        """A lane worker: holds one permit while it runs records, passing it from each to the
        next waiting one; it ends when none waits."""
        ledger = self.ledger
        loop = ledger.running_loop()
        task = asyncio.current_task()
        assert task is not None
        streak = 0
        try:
            while True:
                if streak >= _FAIRNESS:  # jobs that never suspend must not starve the loop
                    streak = 0
                    try:
                        await asyncio.sleep(0)
                    except asyncio.CancelledError:
                        lane.requeue(rec)
                        raise
                try:
                    job = rec.job
                    fn = None if job is None else job.fn  # None: settled before it ran
                    if job is None:
                        pass
                    elif rec.trace is not None:  # traced: in a span
                        await run_record(ledger, rec, task)
                    elif (  # one attempt of an async body, awaited here (`agentq.queue.attempt`)
                        type(fn) is FunctionType
                        and job.timeout is None
                        and job.retry is None
                        and not ledger.subscribers
                        and not ledger.keys.unstopped
                        and not rec.unread
                        and (ledger.store is None or not job.persist)
                        and (
                            fn.__code__.co_flags & CO_COROUTINE
                            or ledger.builders.builds_coroutine(fn)
                        )
                    ):
                        rec.state = RUNNING
                        rec.task = task
                        rec.attempt += 1
                        rec.phase = ASYNC_BODY
                        token = CURRENT.set(rec)
                        base = task.cancelling()
                        try:
                            output = await fn()
                        except BaseException as exc:
                            raised(ledger, rec, task, token, base, exc)  # or propagates
                        else:  # as `run_attempts` when the body returns
                            rec.phase = IDLE
                            CURRENT.reset(token)
                            if rec.cancels:
                                rec.uncancel(task)
                            if rec.outcome is None:  # (no timeout: nothing is pending)
                                ledger.settle(  # `completed`, whose common case is inline
                                    rec, COMPLETED_NONE if output is None else completed(output)
                                )
                            else:  # cancelled meanwhile: the output is discarded
                                discard(output)
                            rec.task = None  # as `attempt.finish`, inline: once per job
                            if ledger.keys.unstopped or rec.stop_waiters is not None:
                                ledger.keys.body_stopped(rec)
                            else:
                                rec.state = STOPPED
                    else:
                        await run_attempts(ledger, rec, job, task)
                except asyncio.CancelledError:  # from outside (the loop shutting down): stop
                    lane.release_permit(rec)
                    rec.mark_stopped()
                    self.freed(lane)
                    raise
                except BaseException as exc:
                    # run_record lets out only KeyboardInterrupt (by design), a GeneratorExit
                    # of this coroutine being closed, and faults outside any job body (a
                    # broken clock...); the job is settled. The lane goes on.
                    if type(exc) is GeneratorExit:
                        raise
                    rec.mark_stopped()
                    if isinstance(exc, KeyboardInterrupt | SystemExit):
                        after = lane.hand_on(rec)
                        if after is not None:  # the permit passes to a new worker, FIFO
                            self._spawn(lane, after)
                        self.freed(lane)
                        raise
                    loop.call_exception_handler(
                        {
                            "message": f"agentq: {rec.title} ended by an error outside "
                            "its body",
                            "exception": exc,
                            "task": task,
                        }
                    )
                finally:
                    if lane.gated:  # settle its token charge (before the permit moves on)
                        self.arbiter.finished(rec)
                if rec.state != STOPPED:  # else its attempts' end has marked it
                    rec.mark_stopped()
                streak += 1
                after = lane.hand_on(rec)
                if lane.space or lane.gated or self._watch is not None:
                    self.freed(lane)
                if after is None:
                    return  # the permit was released: a worker never parks
                rec = after
        finally:
            lane.workers.discard(task)

    # ------------------------------------------------------------ out of the lane

    def abandon(self, rec: Record, why: str) -> None:
        """Give up a record that never ran: release its key and tell its waiters `JobLost`."""
        if rec.outcome is not None:
            return
        lane = rec.lane
        was_queued = rec.state == QUEUED
        if was_queued:
            lane.leave(rec, LOST)
        else:
            rec.state = LOST
        self.ledger.keys.release(rec)
        rec.mark_stopped()
        exc = JobLost(f"{rec.title} was abandoned before it ran: {why}")
        self.ledger.resolve(
            rec,
            Failed(FailureReason.CANCELLED, ErrorInfo.from_exception(exc), exc),
            JobEventKind.LOST,
        )
        if was_queued:
            self.freed(lane)

    def cancel(self, rec: Record) -> bool:
        """`JobHandle.cancel`: settle as cancelled, then take it out of its lane or interrupt it.

        A record whose body returned and whose output is being saved has finished (False).
        """
        if rec.outcome is not None or rec.phase == SAVING:
            return False
        running = asyncio.events._get_running_loop()
        loop = self.ledger.loop
        if running is not None and loop is not None and running is not loop:
            raise WrongLoopError("this job's queue belongs to another event loop")
        state = rec.state
        ran = state == RUNNING
        message = f"{rec.title} was cancelled " + ("while running" if ran else "before it ran")
        self.ledger.settle(rec, cancelled_outcome(message))
        if state == QUEUED:
            lane = rec.lane
            lane.leave(rec, STOPPED)
            rec.mark_stopped()
            self.freed(lane)
        elif state == CLAIMED:
            rec.mark_stopped()
            rec.lane.release_space(rec)
        elif ran:
            rec.interrupt()
        return True

    def take(self, rec: Record) -> None:
        """Take a record that has not started out of its lane, to run it inline."""
        lane = rec.lane
        if lane.take(rec):
            self.freed(lane)

    # ------------------------------------------------------------ closing

    def close_admission(self) -> None:
        """Admit no more pushes (`QueueClosed`)."""
        self.closing = True

    def watch(self) -> asyncio.Future[None]:
        """A future resolved the next time a permit is released (or room is made); shared by
        every close waiting at the same time."""
        watch = self._watch
        if watch is None or watch.done():
            watch = self._watch = self.ledger.running_loop().create_future()
        return watch
