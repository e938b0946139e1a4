"""`AttemptRunner`: runs one claimed step attempt to what follows it, for one engine.

Private to `agentq.workflows.driver`, whose step loop claims a step and hands the claim
here: the attempt's body becomes a job in the engine's lane (lane permits bound how many
bodies run at once) while a `Lease` renews the lease every ``lease_ttl / 3`` seconds; a
renewal that finds the lease gone interrupts the body at once (`AttemptRunner.lease_lost`,
logged) and nothing is recorded; otherwise the outcome is recorded with the fencing token
(`agentq.workflows.recording.Recorder`). The runner keeps the attempt running now per
workflow (`running`, which a cancel interrupts) and the count of durable calls answered
from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

from agentq.clock import Clock
from agentq.errors import (
    AgentqError,
    LeaseLostError,
    QueueClosed,
    StoreClosedError,
    WorkflowClosedError,
)
from agentq.outcomes import Completed
from agentq.queue import Job, JobHandle, Priority, Queue
from agentq.store import Claimed, DurableStore
from agentq.workflows.advancing import Follow
from agentq.workflows.attempts import Again, Lease, Retry, hand_back, job_key, step_call, step_title
from agentq.workflows.calls import CallLog
from agentq.workflows.children import Spawner
from agentq.workflows.context import StepContext
from agentq.workflows.model import RunResult, StepDef, Workflow
from agentq.workflows.recording import Recorder
from agentq.workflows.renewals import Renewals
from agentq.workflows.results import closed_result
from agentq.workflows.waits import Wakers, finish, until
from agentq.workflows.workers import LOGGER, lost_message

__all__ = ["AttemptRunner"]


class AttemptRunner:
    """Runs attempts for one driver (its queue, store, clock, lease length and priority).

    Args:
        recorder: Records each attempt's outcome.
        wakers: The driver's per-run wakers (a body that outlives its run lingers there).
        interrupt: The driver's `interrupt`, called when a lost lease shows that the
            workflow was closed elsewhere.

    Attributes:
        running: The attempt running now, by workflow id.
        answered_from_log: Durable calls and waits answered from the log (not run).
    """

    def __init__(
        self,
        queue: Queue,
        store: DurableStore,
        clock: Clock,
        lease_ttl: float,
        priority: Priority,
        *,
        recorder: Recorder,
        wakers: Wakers,
        interrupt: Callable[[str], None],
    ) -> None:
        self.queue = queue
        self.store = store
        self.clock = clock
        self.lease_ttl = lease_ttl
        self.renewals = Renewals(clock, lease_ttl)
        """The renewal times of every lease this engine holds (one task for all of them)."""
        self.priority = priority
        self.recorder = recorder
        self.wakers = wakers
        self.interrupt = interrupt
        self.running: dict[str, JobHandle] = {}
        self.active: set[str] = set()
        """Workflows with an attempt between its claim and its recorded outcome: a graceful
        stop waits for them (their body may run before the push returns, and an outcome
        being recorded must not be interrupted)."""
        self.answered_from_log = 0
        self.spawner: Spawner | None = None
        """Runs the child runs that attempts start (set by the engine)."""

    async def attempt(
        self,
        wf: Workflow,
        step: StepDef,
        claim: Claimed,
        outputs: tuple[Any, ...],
        waker: asyncio.Future[None],
        follow: Follow | None = None,
    ) -> Completed | RunResult | Retry | Again:
        """Run the claimed attempt of `step` and record its outcome (`_attempt`); the
        workflow is in `active` meanwhile. `outputs` are the earlier steps' outputs;
        `follow` is what the recorder may do for the next step (`Recorder.record`)."""
        self.active.add(wf.id)
        try:
            return await self._attempt(wf, step, claim, outputs, waker, follow)
        finally:
            self.active.discard(wf.id)

    async def _attempt(
        self,
        wf: Workflow,
        step: StepDef,
        claim: Claimed,
        outputs: tuple[Any, ...],
        waker: asyncio.Future[None],
        follow: Follow | None,
    ) -> Completed | RunResult | Retry | Again:
        """Run the claimed attempt of `step` and record its outcome.

        Returns:
            `Completed` (the next step runs), `Retry` / `Again` (claim again) or the
            `RunResult` the run ends with.

        Raises:
            QueueClosed / asyncio.CancelledError: The queue or the engine closed; nothing
                was recorded and the lease was handed back once the body had stopped.
        """
        execution = claim.execution
        key = job_key(wf.id, execution.step_index, execution.lease_token)
        lease = Lease(
            self.store, self.clock, self.lease_ttl, execution, self.renewals,
            on_lost=functools.partial(self.lease_lost, wf.id, step.name),
        )
        log = CallLog(
            store=self.store,
            queue=self.queue,
            clock=self.clock,
            workflow_id=wf.id,
            execution=lambda: lease.execution,
            load=functools.partial(self.store.calls, wf.id),
            spawner=self.spawner,
        )
        # The key is unique to this attempt, so the call needs no derived fingerprint (the
        # queue would otherwise take one of the step's closure, ctx's repr included); its
        # outcome is recorded in the workflow's event log, not in a queue's store.
        ctx = StepContext(
            workflow_id=wf.id,
            step_index=execution.step_index,
            step_name=step.name,
            attempt=execution.attempt,
            input=wf.input,
            outputs=outputs,
            previous=outputs[-1] if outputs else wf.input,
            resume_input=claim.resume_input,
            resumed=claim.resumed,
            recoveries=claim.recoveries,
            _calls=log,
        )
        job = Job(
            key,
            step_call(step, ctx, log),
            self.priority,
            timeout=step.timeout,
            fingerprint=key,
            persist=False,
            name=step_title(wf.id, step.name),
        )
        lease.start()
        handle: JobHandle | None = None
        lingering = False  # the body outlives the run: `_stopped` renews and hands back
        try:
            handle = await self._push(job)
            self.running[wf.id] = handle
            if lease.lost:  # lost while the job was being pushed
                handle.cancel()
            try:
                outcome = await handle
            finally:
                if self.running.get(wf.id) is handle:
                    del self.running[wf.id]
            # The next attempt must never overlap this one, even when a timeout could not
            # stop its body (a thread): wait until the body has really returned and its
            # durable calls have been recorded, unless the workflow is cancelled meanwhile
            # (then later runs wait for it, see Driver._run_step).
            if await until(waker, handle.stopped()):
                await log.settle()
                await _forget(self.queue, key)
            else:
                lease.mute()
                self.wakers.linger(wf.id, _stopped(self.queue, handle, log, lease))
                lingering = True
        except (asyncio.CancelledError, QueueClosed):
            # This engine is closing (or the whole program), or the queue closed: record
            # nothing, as a crash would, and hand the lease back once the body has stopped
            # and the durable calls it already ran have been recorded.
            await finish(_release(self.queue, lease, handle, log))
            raise
        finally:
            log.close()
            self.answered_from_log += log.answered
            if not lingering:
                await lease.stop()
        execution = lease.execution
        if lease.lost:  # another worker's now, or closed: record nothing, claim again
            if wf.id not in self.wakers.lingering():  # the body has stopped: lift the fence
                await finish(lease.hand_back())
            return Again(0.0)
        try:
            return await self.recorder.record(wf, step, execution, outcome, ctx, follow)
        except (LeaseLostError, WorkflowClosedError) as refused:
            # The body has stopped. A lease a cancel revoked still fences the step (through
            # a retry too): hand it back, so that the log says so (`LeaseReleased`) before
            # this or another worker claims the step again; a lease taken over records
            # nothing here.
            await finish(hand_back(self.store, self.clock, execution))
            if isinstance(refused, LeaseLostError):
                return Again(0.0)
            return await closed_result(self.store, wf.id)
        except BaseException:  # cancelled, or the store failed: the outcome may not be
            # recorded; hand the lease back so that no live engine keeps it (a retried run,
            # recover or another engine continues the step at once)
            await finish(hand_back(self.store, self.clock, execution))
            raise

    async def lease_lost(
        self, workflow_id: str, step_name: str, why: AgentqError, cancelled: bool
    ) -> None:
        """A renewal found the attempt's lease gone, or revoked by a cancel (`cancelled`):
        interrupt its body, say so.

        If the workflow is closed (cancelled from another engine or the command line), the
        run's waits are woken too (`interrupt`), as for a cancel in this engine; otherwise
        (another worker took the expired lease over, or the cancelled workflow was retried
        meanwhile) only the attempt's job is cancelled, and the run waits for its body to
        stop and claims the step again (it finds it held, or done, by the new owner).
        """
        if isinstance(why, StoreClosedError):  # nothing can be recorded: stop the body; the
            LOGGER.debug("%s: %s", step_title(workflow_id, step_name), why)  # run says so
            if (handle := self.running.get(workflow_id)) is not None:
                handle.cancel()
            return
        row = None
        with contextlib.suppress(AgentqError):  # the store failed: treat it as taken over
            row = await self.store.get_workflow(workflow_id)
        closed = row is not None and row.state.closed
        LOGGER.log(
            logging.INFO if closed or cancelled else logging.WARNING,
            lost_message(step_title(workflow_id, step_name), why, closed, cancelled),
        )
        if closed:
            self.interrupt(workflow_id)
        elif (handle := self.running.get(workflow_id)) is not None:
            handle.cancel()

    async def _push(self, job: Job) -> JobHandle:
        accepted = await self.queue.push(job)
        handle = getattr(accepted, "handle", None)
        assert isinstance(handle, JobHandle), f"step attempt keys are unique: {accepted!r}"
        return handle


async def _forget(queue: Queue, key: str) -> None:
    """Forget the finished job of an attempt: its key is the attempt's own (never pushed
    again) and its outcome is in the workflow's log, so the queue's record of it (its step
    body's closure, its context, its output) would only grow the queue with every attempt
    (a queue's store has nothing of it: the job is not persisted)."""
    with contextlib.suppress(AgentqError):
        await queue.forget(key)


async def _stopped(queue: Queue, handle: JobHandle, log: CallLog, lease: Lease) -> None:
    """Wait until a cancelled attempt's body has returned and its durable calls have been
    recorded (a call that reached the world keeps its outcome after a cancel), then hand
    its lease back: a lease a cancel revoked fences the step from other workers until then,
    renewed meanwhile (or until it expires, if this process dies)."""
    try:
        await handle.stopped()
        with contextlib.suppress(Exception):  # a store failure: the call stays in doubt
            await log.settle()
    finally:
        with contextlib.suppress(AgentqError):  # a failed renewal: hand back all the same
            await lease.stop()
    await _forget(queue, handle.key)
    await lease.hand_back()


async def _release(
    queue: Queue, lease: Lease, handle: JobHandle | None, log: CallLog
) -> None:
    """Interrupt an attempt, wait until its body has stopped and its durable calls have been
    recorded, then hand its lease back (never while the body still runs)."""
    if handle is not None:
        handle.cancel()
        await handle.stopped()
    with contextlib.suppress(Exception):
        await log.settle()
    if handle is not None:
        await _forget(queue, handle.key)
    await lease.release(None)
