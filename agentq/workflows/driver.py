"""`Driver`: runs one workflow's steps, in order, to a `RunResult`; owns the engine's settings.

For each step, the loop:

1. claims it once `Admission` has a slot (at most the lane's permits of steps claimed at
   once, ``admission``): ``claim_step``, a compare-and-swap in the store, given the step's
   ``max_recoveries``. This worker gets a lease and a fencing token, or learns that the step
   completed or waits already, that the workflow closed (also: failed, its attempts lost to
   crashes too often), that its next attempt is scheduled later (`NotBefore`: kept by the
   store, honoured by every engine; the run sleeps until then), or that another worker holds
   it: a holder whose process is gone (``workers.gone_reason``) has its lease taken back at
   once (``release_dead``); for a live one the run logs once, at DEBUG, and polls every
   ``poll_interval`` seconds;
2. pushes the attempt through the queue as a job in the engine's lane, so lane permits bound
   how many step bodies run at once, while a `Lease` renews the lease every ``lease_ttl / 3``
   seconds. A renewal that finds the lease gone (the workflow cancelled by another engine or
   the command line, or the step taken over after the lease expired) interrupts the body at
   once (`AttemptRunner.lease_lost` in ``attempting``, logged), and the attempt records
   nothing: the run claims again and finds the workflow closed, or the step held or done by
   its new owner;
3. records the outcome with the fencing token: ``complete_step`` (``advance_step``, which
   claims the next step in the same transaction, when the run would claim it at once:
   ``advancing``), ``wait_step`` or ``fail_step`` (with ``retry_at`` when the retry policy
   allows another attempt and `agentq.retry.classify` calls the failure an ordinary one; the
   next claim then answers `NotBefore` until that time). A worker whose lease was taken
   over meanwhile is refused (`LeaseLostError`) and claims again.

A run that continues a stored workflow starts at its first step not completed (one read,
``advancing.completed_outputs``).

Every wait of a run (a slot, a stored retry time, a poll, an interrupted body) goes through
`Driver.pause` or `agentq.workflows.waits.until` with the run's waker, which a `cancel`
(`Driver.interrupt`) ends at once. A lease is handed back (``release_dead``, counting toward
neither ``max_attempts`` nor ``max_recoveries``) only once the attempt's body has stopped,
and always then. A step that ends waiting on a child run is joined through `on_child` and
claimed again once the child ended. A graceful stop of `serve` halts the driver
(``halted``): a run neither claims another step nor waits on the clock, it parks (``park``),
while the attempts already claimed go on (``attempting``).

Private to `agentq.workflows.engine`, which starts one drive per workflow and shares it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import agentq.tracing as tracing
import agentq.workflows.spans as spans
from agentq.clock import Clock, SystemClock
from agentq.errors import QueueClosed
from agentq.keys import validate_key
from agentq.outcomes import Completed
from agentq.queue import Priority, Queue, RateLedger
from agentq.store import (
    AlreadyCompleted,
    AlreadyWaiting,
    Claimed,
    ClaimResult,
    DurableStore,
    HeldByOther,
    NotBefore,
    WorkflowClosed,
    WorkflowRow,
)
from agentq.workflows.admission import Admission
from agentq.workflows.advancing import Follow, completed_outputs
from agentq.workflows.attempting import AttemptRunner
from agentq.workflows.attempts import Again, Retry, hand_back, step_title
from agentq.workflows.attempts import claim as claim_step
from agentq.workflows.children import Spawner
from agentq.workflows.model import RunResult, RunStatus, StepDef, Workflow
from agentq.workflows.recording import Recorder
from agentq.workflows.results import closed_result, stored_result
from agentq.workflows.waiting import joined_child, watch_deadline
from agentq.workflows.waits import Wakers, finish, until
from agentq.workflows.workers import (
    LOGGER,
    default_worker_id,
    held_message,
    take_back_held,
)

__all__ = ["Driver"]


class Driver:
    """Runs workflows' steps for one engine, with its settings (checked here).

    The arguments are `WorkflowEngine`'s; see its docstring.

    Raises:
        ValueError: `lease_ttl`, `poll_interval` or `priority` is invalid.
        TypeError: `queue` is not a `Queue` or `store` not a `DurableStore`.
        InvalidKeyError: `worker_id` is empty, not UTF-8 or too long.
    """

    def __init__(
        self,
        queue: Queue,
        store: DurableStore,
        *,
        worker_id: str | None,
        lease_ttl: float,
        priority: Priority,
        clock: Clock | None,
        poll_interval: float | None,
    ) -> None:
        if isinstance(lease_ttl, bool) or not isinstance(lease_ttl, int | float) or not (
            0 < lease_ttl < math.inf
        ):
            raise ValueError(f"lease_ttl must be a positive number of seconds, got {lease_ttl!r}")
        if poll_interval is not None and not (0 < poll_interval < math.inf):
            raise ValueError(f"poll_interval must be positive seconds, got {poll_interval!r}")
        if not isinstance(queue, Queue):
            raise TypeError(f"queue must be an agentq.Queue, got {queue!r}")
        if isinstance(store, type) or not isinstance(store, DurableStore):  # not a class
            raise TypeError(
                f"store must be an instance implementing agentq.DurableStore, got {store!r}"
            )
        try:
            self.priority = Priority(priority)
        except ValueError:
            raise ValueError(
                f"priority must be one of {[p.value for p in Priority]}, got {priority!r}"
            ) from None
        self.queue = queue
        self.store = store
        if isinstance(store, RateLedger):  # lanes' budgets hold for every engine on the store
            queue.share_budgets(store)
        self.worker_id = (
            default_worker_id() if worker_id is None else validate_key(worker_id, "worker_id")
        )
        self.lease_ttl = float(lease_ttl)
        self.clock: Clock = clock or SystemClock()
        self.poll_interval = poll_interval or min(self.lease_ttl / 4, 1.0)
        self._offered: dict[str, Claimed] = {}  # claims made for a run to use (serve's)
        self.pausing = 0
        """Runs waiting on the clock right now (a retry time, a step another worker holds)."""
        self._wakers = Wakers()
        self._recorder = Recorder(store, self.clock, queue, self.lease_ttl)
        self._runner = AttemptRunner(
            queue, store, self.clock, self.lease_ttl, self.priority,
            recorder=self._recorder, wakers=self._wakers, interrupt=self.interrupt,
        )
        self._attempts = self._runner.running  # the attempt running now, by workflow
        self.halted = False
        """Set by serve's graceful stop: no run claims a step or waits on the clock any
        more; each parks (`park`) until the engine closes. Attempts running go on."""
        permits = queue.stats()[self.priority].permits  # claims held at once, at most
        self.admission = Admission(permits, lambda: self.halted, self.park)
        self.parked = asyncio.Event()
        """Set whenever a halted run parks (serve's stop waits on it)."""
        self.on_workflow_deadline: Callable[[str, float], None] | None = None
        """Told (workflow id, its `WorkflowRow.deadline`) when a run starts on one that has it."""
        self.on_child: Callable[[str], Awaitable[bool]] | None = None
        """Told the id of the child run a step waits on (``ctx.child``); True if it ended
        (joined here): the run then claims the step again instead of ending waiting."""

    @property
    def spawner(self) -> Spawner | None:
        """Runs the child runs that step attempts start (the engine)."""
        return self._runner.spawner

    @spawner.setter
    def spawner(self, spawner: Spawner | None) -> None:
        self._runner.spawner = spawner

    def attempting(self) -> list[str]:
        """Ids of the workflows with a step attempt running now (from its claim to its
        recorded outcome), sorted."""
        return sorted(self._attempts.keys() | self._runner.active)

    async def park(self) -> None:
        """Wait until cancelled (the engine closes): a halted run neither claims nor waits."""
        self.parked.set()
        await asyncio.get_running_loop().create_future()

    @property
    def answered_from_log(self) -> int:
        """Durable calls and waits answered from the log (not run) by this engine's attempts."""
        return self._runner.answered_from_log

    @property
    def on_deadline(self) -> Callable[[str, float], None] | None:
        """Told (workflow id, Unix seconds) when a step starts a wait that has a deadline."""
        return self._recorder.on_deadline

    @on_deadline.setter
    def on_deadline(self, tell: Callable[[str, float], None] | None) -> None:
        self._recorder.on_deadline = tell

    def interrupt(self, workflow_id: str) -> None:
        """The workflow was cancelled: cancel its attempt running now, and wake every wait of
        its runs (backoff, poll, an interrupted body) so that they return at once."""
        handle = self._attempts.get(workflow_id)
        if handle is not None:
            handle.cancel()
        self._wakers.wake(workflow_id)

    async def drain(self) -> None:
        """Wait for the bodies cancels left running and their durable calls (`Wakers.drain`)."""
        await self._wakers.drain()

    def tables(self) -> dict[str, int]:
        """How many entries each of the driver's per-workflow tables holds (for tests)."""
        return {
            "attempts": len(self._attempts),
            "offered": len(self._offered),
            "admitted": len(self.admission.held),
            **self._wakers.sizes(),
        }

    def offer(self, claim: Claimed) -> None:
        """Give the next run of the claimed workflow a claim made for it (by `serve`, or by
        a completion of its step before: ``advancing``).

        The run uses it instead of claiming that step itself; a run that ends without using
        it hands the lease back.
        """
        self._offered[claim.execution.workflow_id] = claim

    async def drive(self, wf: Workflow, row: WorkflowRow | None = None) -> RunResult:
        """Run `wf`'s steps in order until it completes, waits, fails or is cancelled.

        A workflow that already ended returns its stored result and appends nothing.

        Args:
            wf: The workflow; stored first (`DurableStore.start_workflow`, idempotent)
                unless `row` is given.
            row: `wf`'s stored row, read just before by the caller and `wf` built from it
                (same id, steps, input and definition: storing `wf` would append nothing),
                or None. Its state may be behind the store's: the claims of the steps read
                the state again (a step completed meanwhile answers with its output, a
                workflow closed meanwhile with its result).

        Raises:
            QueueClosed: The queue closed before or while a step ran; nothing was recorded
                for that step and its lease was handed back once its body had stopped.
        """
        with spans.run_span(wf, self.worker_id) as span:
            result = await self._drive(wf, span, row)
            spans.note_run(span, result)
            return result

    async def _drive(
        self, wf: Workflow, span: tracing.Span, row: WorkflowRow | None
    ) -> RunResult:
        waker = self._wakers.open(wf.id)
        try:
            created = False
            if row is None:  # store it (once: a stored one is compared, nothing appended)
                trace = tracing.carrier()  # passed only when tracing is on: None-safe
                now = self.clock.time()
                extra: dict[str, Any] = {} if trace is None else {"trace": trace}
                if wf.timeout is not None:  # kept only by the run that stores the workflow
                    extra["deadline"] = now + wf.timeout
                row, created = await self.store.start_workflow(
                    wf.id, wf.step_names, wf.input, now, definition=wf.definition, **extra
                )
            links = [] if created else await spans.origin_links(span, self.store, wf.id)
            if row.state.closed:
                return await stored_result(self.store, row)
            if row.deadline is not None and self.on_workflow_deadline is not None:
                self.on_workflow_deadline(wf.id, row.deadline)  # a claim after it fails it
            outputs = [] if created else await completed_outputs(self.store, row)
            for index in range(len(outputs), len(wf.steps)):
                step = wf.steps[index]
                result = await self._run_step(wf, index, step, outputs, waker, links)
                if isinstance(result, RunResult):
                    return result
                outputs.append(result.output)
            return RunResult(wf.id, RunStatus.COMPLETED, outputs=tuple(outputs))
        finally:
            self._wakers.close(wf.id, waker)
            self.admission.leave(wf.id)
            unused = self._offered.pop(wf.id, None)
            if unused is not None:  # the run ended before the step: let another take it
                await finish(hand_back(self.store, self.clock, unused.execution))

    async def _run_step(
        self,
        wf: Workflow,
        index: int,
        step: StepDef,
        outputs: Sequence[Any],
        waker: asyncio.Future[None],
        links: Sequence[Any],
    ) -> Completed | RunResult:
        warned: str | None = None  # the holder this wait was logged for
        joined: set[str] = set()  # the ended children this step was found waiting on
        while True:
            if self.queue.closed:  # claiming would record a StepStarted nobody runs
                raise QueueClosed(
                    f"the queue is closed: {step_title(wf.id, step.name)} was not started"
                )
            await self._wakers.after_lingering(wf.id, waker)  # never overlap an old body
            if self.halted:  # a graceful stop: no more work (an offered claim is handed back)
                await self.park()
            claim = await self._claim(wf.id, index, step, waker)
            if isinstance(claim, AlreadyCompleted):
                return Completed(claim.output)
            if isinstance(claim, AlreadyWaiting):
                if await self.store.time_out_wait(wf.id, index, self.clock.time()):
                    continue  # its deadline passed: the step runs on, the wait raises
                if await joined_child(self.store, self.on_child, wf.id, index, joined):
                    continue  # the child it waited on ended: its end resumed the step
                await watch_deadline(self.store, self.on_deadline, wf.id, index)
                return RunResult(
                    wf.id, RunStatus.WAITING, step.name, claim.reason, tuple(outputs)
                )
            if isinstance(claim, WorkflowClosed):
                return await closed_result(self.store, wf.id)
            if isinstance(claim, NotBefore):  # a retry scheduled by any engine, any process
                # claim again at least every lease_ttl / 3 (as a lease renews): a cancel from
                # elsewhere during a long backoff is seen within that bound
                wait = min(claim.retry_at - self.clock.time(), self.lease_ttl / 3)
                await self.pause(waker, wait)
                continue
            if isinstance(claim, HeldByOther):
                if await take_back_held(self.store, self.clock, wf.id, index, claim.worker_id):
                    continue
                if warned != claim.worker_id:
                    warned = claim.worker_id
                    # DEBUG: another engine's live lease is normal operation (two servers
                    # racing for one step); a dead holder's lease expires and is taken over.
                    LOGGER.debug(
                        held_message(
                            step.name, wf.id, claim.worker_id, claim.expires_at,
                            self.clock.time(),
                        )
                    )
                await self.pause(waker, self.poll_interval)
                continue
            assert isinstance(claim, Claimed)
            follow = Follow(wf.steps[index + 1:], lambda: self._may_advance(wf.id), self.offer)
            with spans.attempt_span(claim.execution, claim.resumed, links) as span:
                try:
                    step_result = await self._runner.attempt(
                        wf, step, claim, tuple(outputs), waker, follow
                    )
                finally:
                    self.admission.leave(wf.id)  # its slot: the next run may claim
                spans.note_attempt(span, step_result)
            if isinstance(step_result, Again) and step_result.delay > 0:
                await self.pause(waker, step_result.delay)
            if isinstance(step_result, Retry | Again):
                continue  # claim again: a retry's time is kept by the store (NotBefore)
            if (
                isinstance(step_result, RunResult)
                and step_result.status is RunStatus.WAITING
                and follow.child_wait  # else no child to join: its row need not be read
                and await joined_child(self.store, self.on_child, wf.id, index, joined)
            ):
                continue
            return step_result

    def _may_advance(self, workflow_id: str) -> bool:
        """Whether a completion may claim the run's next step (`Follow`): the run would claim
        it at once, and no other run waits for the claim slot it keeps."""
        return not (self.halted or self.queue.closed or workflow_id in self._offered
                    or self.admission.waiting())

    async def _claim(
        self, workflow_id: str, index: int, step: StepDef, waker: asyncio.Future[None]
    ) -> ClaimResult:
        """The claim offered for this step (by `serve` or a completion), or a new one once
        `admission` has a slot."""
        offered = self._offered.get(workflow_id)
        if offered is not None and offered.execution.step_index <= index:
            del self._offered[workflow_id]
            if offered.execution.step_index == index:
                self.admission.take(workflow_id)
                return offered
            await finish(hand_back(self.store, self.clock, offered.execution))  # passed by
        return await self.admission.claim(workflow_id, waker, lambda: claim_step(
            self.store, self.clock, workflow_id, index, self.worker_id, self.lease_ttl,
            max_recoveries=step.max_recoveries,
        ))

    async def pause(self, waker: asyncio.Future[None], seconds: float) -> None:
        """Wait `seconds` on the clock before claiming a step again, or less if the workflow
        is cancelled meanwhile (`waker`, the run's, is resolved by `interrupt`).

        Every timed wait of a run goes through here: until a stored retry time, between
        polls of a step another worker holds.
        """
        if self.halted:
            await self.park()
        if seconds <= 0:
            await self.clock.sleep(0)  # just a turn of the loop
            return
        self.pausing += 1
        try:
            await until(waker, self.clock.sleep(seconds))
        finally:
            self.pausing -= 1
