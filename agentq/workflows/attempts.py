"""One step attempt as the driver packages it: the job body, its lease, what it asks for next.

Used by `agentq.workflows.driver` (and `IN_STEP` by the engine): the job body that turns a
wait (`WaitForInput`, also inside an exception group: `agentq.retry.classify`) into a value,
since a wait is not a failed job, and marks the context with the workflow it runs
(`IN_STEP`); the job's key and the name messages give it; the markers the driver loop acts
on (`Retry`, `Again`); the lease (`Lease`: renewed while the attempt runs, handed back only
once its body has stopped) and the cancel-safe `claim` that hands back a lease its cancelled
caller never learnt about.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from agentq.clock import Clock
from agentq.errors import (
    AgentqError,
    LeaseLostError,
    StoreClosedError,
    WaitForInput,
    WorkflowClosedError,
)
from agentq.queue import JobHandle
from agentq.retry import Verdict, classify
from agentq.store import HANDED_BACK_REASON, Claimed, ClaimResult, DurableStore, Execution
from agentq.workflows.calls import CallLog, InputRequested
from agentq.workflows.context import StepContext
from agentq.workflows.model import StepDef
from agentq.workflows.renewals import Renewals
from agentq.workflows.waits import committed, finish, stop

T = TypeVar("T")

__all__ = [
    "IN_STEP",
    "Again",
    "Lease",
    "Retry",
    "Waiting",
    "cancel_safe_claim",
    "claim",
    "hand_back",
    "job_key",
    "step_call",
    "step_title",
]

IN_STEP: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentq_in_step", default=None
)
"""The workflow whose step body runs in this context (to refuse a step awaiting its own run)."""


def job_key(workflow_id: str, step_index: int, lease_token: int) -> str:
    """The queue key of one attempt: a new lease token (a new attempt) makes a new job."""
    digest = hashlib.blake2b(workflow_id.encode("utf-8"), digest_size=12).hexdigest()
    return f"agentq.step:{digest}:{step_index}:{lease_token}"


def step_title(workflow_id: str, step_name: str) -> str:
    """How user-facing messages name a step (never by its internal job key)."""
    return f"step {step_name!r} of workflow {workflow_id!r}"


class Waiting:
    """The output of an attempt that raised `WaitForInput`: a pause, not a failed job.

    A wait raised by `StepContext.wait_for_input` carries its key, details and deadline (and
    `StepContext.receive` its topic too); a step-level ``raise WaitForInput(reason)`` has
    none. For a group of waits (parallel calls in an `asyncio.TaskGroup`), `reason` is the
    group's joined reason (given) and the key, details and deadline are the first wait's.
    """

    __slots__ = ("deadline", "details", "key", "reason", "topic")

    def __init__(self, wait: WaitForInput | InputRequested, reason: str | None = None) -> None:
        self.reason = wait.reason if reason is None else reason
        self.key: str | None = getattr(wait, "key", None)
        self.details: dict[str, Any] | None = getattr(wait, "details", None)
        self.deadline: float | None = getattr(wait, "deadline", None)
        self.topic: str | None = getattr(wait, "topic", None)  # a ctx.receive


def step_call(step: StepDef, ctx: StepContext, log: CallLog | None = None) -> Callable[[], Any]:
    """The job body for one attempt: `step.fn(ctx)`, with a wait turned into a value.

    A wait is not a failure, so the queue's lane statistics do not count it as one. A wait
    raised inside an exception group (an `asyncio.TaskGroup` of parallel calls) is a wait
    too; its reason is `agentq.retry.Classification.wait_reason`. Async bodies stay async;
    plain ones stay plain, so the queue runs them in a worker thread. Both run with `IN_STEP`
    set to the workflow's id.

    A `ctx.wait_for_input` that asked for input (`log.requested`) ends the attempt waiting,
    whatever the body did with its signal: let it through, swallowed it and returned (``except
    BaseException``, ``gather(..., return_exceptions=True)``), or raised something else
    after it (as a group holding a wait does). Only a cancellation (a step timeout, a cancel
    of the workflow, a shutdown) goes through as it is.
    """
    fn = step.fn
    workflow_id = ctx.workflow_id
    if step.is_async:

        async def call_async() -> Any:
            token = IN_STEP.set(workflow_id)
            try:
                output = await fn(ctx)
            except WaitForInput as wait:
                return _requested(log) or Waiting(wait)
            except InputRequested as wait:
                return _requested(log) or Waiting(wait)
            except BaseExceptionGroup as group:
                return _requested(log) or _wait_in(group)
            except Exception:
                waiting = _requested(log)
                if waiting is None:
                    raise
                return waiting
            finally:
                IN_STEP.reset(token)
            return _requested(log) or output

        return call_async

    def call() -> Any:
        token = IN_STEP.set(workflow_id)
        try:
            return fn(ctx)
        except WaitForInput as wait:
            return Waiting(wait)
        except BaseExceptionGroup as group:
            return _wait_in(group)
        finally:
            IN_STEP.reset(token)

    return call


def _requested(log: CallLog | None) -> Waiting | None:
    """`Waiting` on the first wait the attempt asked for, or None if it asked for none.

    Keyed waits asked in parallel are answered one at a time: the step waits on the first,
    with its own reason (the one its key is recorded with); once that is answered, the next
    attempt asks the others again.
    """
    if log is None or not log.requested:
        return None
    return Waiting(log.requested[0])


def _wait_in(group: BaseExceptionGroup[Any]) -> Waiting:
    """`Waiting` if `group` holds a wait; else re-raise it (a failure for the driver)."""
    verdict = classify(group)
    if verdict.verdict is Verdict.WAIT and verdict.waits:
        return Waiting(verdict.waits[0], verdict.wait_reason)
    raise group


class Retry:
    """Marker: the attempt failed and another one is scheduled after `delay` seconds.

    The store keeps the time (``retry_at``): the next claim answers `NotBefore` until then.
    """

    __slots__ = ("delay",)

    def __init__(self, delay: float) -> None:
        self.delay = delay


class Again:
    """Marker: claim the step again (the lease was lost, or another worker holds it)."""

    __slots__ = ("delay",)

    def __init__(self, delay: float) -> None:
        self.delay = delay


class Lease:
    """One execution's lease: kept alive while its attempt waits and runs, then handed back.

    `start` begins renewing it every ``lease_ttl / 3`` seconds (when `renewals`, the engine's
    one timer for all its leases, says it is due: `renew_due`); `stop` ends the renewals;
    `release` is the shutdown path: interrupt the attempt's job, keep renewing until its body
    has really stopped, then hand the lease back (never while the body still runs).

    A renewal the store refuses (`LeaseLostError`: another worker took the step over, or the
    lease was released; `WorkflowClosedError`; `StoreClosedError`: the store was closed under
    the attempt, so nothing it does can be recorded) ends the renewals, sets `lost` and
    `lost_because`, and awaits `on_lost` (the driver interrupts the attempt's body there).
    A renewal that finds the lease revoked by a cancel (from any process: the execution the
    store returns says ``revoked``) does the same once, but the renewals go on: they keep
    the step fenced from other workers while the body still runs, until `stop` (called once
    the body has stopped, before the hand-back). So a loss or a cancel is noticed within
    ``lease_ttl / 3`` seconds, plus one store round trip.

    Args:
        store: Where the lease is renewed.
        clock: The time of each renewal, and the sleeps between them.
        lease_ttl: Seconds each renewal extends the lease by (> 0).
        execution: The lease as claimed.
        renewals: The engine's renewal times (its ``lease_ttl`` is `lease_ttl`).
        on_lost: Awaited once, in the renewal's task, when a renewal finds the lease gone
            or revoked, with what the store said and whether it was a cancel.
    """

    def __init__(
        self,
        store: DurableStore,
        clock: Clock,
        lease_ttl: float,
        execution: Execution,
        renewals: Renewals,
        on_lost: Callable[[AgentqError, bool], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl = lease_ttl
        self.execution = execution
        self.lost = False
        self.lost_because: AgentqError | None = None
        """What the store said to the renewal that found the lease gone."""
        self._on_lost = on_lost
        self._renewals = renewals
        self._renewing: asyncio.Task[None] | None = None  # a renewal under way, or its end

    def start(self) -> None:
        """Start renewing the lease (its renewals are due with the engine's others)."""
        self._renewals.add(self)

    def renew_due(self) -> None:
        """Renew the lease now, in a task of its own (called by `Renewals` when due)."""
        ex = self.execution
        self._renewing = asyncio.get_running_loop().create_task(
            self._renew(), name=f"agentq.lease:{ex.workflow_id}:{ex.step_index}"
        )

    def mute(self) -> None:
        """Call no `on_lost` any more (the run knows of the cancel already); renewals go on."""
        self._on_lost = None

    async def stop(self) -> None:
        """Stop renewing (idempotent).

        Raises:
            StoreError: A renewal failed in the store.
        """
        self._renewals.discard(self)
        renewing, self._renewing = self._renewing, None
        if renewing is not None:
            await stop(renewing)

    async def release(self, handle: JobHandle | None) -> None:
        """Interrupt the attempt's job, wait until its body has stopped, hand the lease back."""
        if handle is not None:
            handle.cancel()
            await handle.stopped()
        with contextlib.suppress(AgentqError):  # a failed renewal: hand back all the same
            await self.stop()
        await hand_back(self._store, self._clock, self.execution)

    async def hand_back(self) -> bool:
        """Hand the lease back (`hand_back`) once the body has stopped; see there."""
        return await hand_back(self._store, self._clock, self.execution)

    async def _renew(self) -> None:
        try:
            self.execution = await self._store.renew_lease(
                self.execution, self._ttl, self._clock.time()
            )
        except (LeaseLostError, WorkflowClosedError, StoreClosedError) as exc:
            await self._lose(exc, cancelled=False)
            return
        if self.execution.revoked and not self.lost:  # renew the fence until `stop`
            ex = self.execution
            await self._lose(
                LeaseLostError(
                    f"lease #{ex.lease_token} of worker {ex.worker_id!r} was revoked; "
                    "it fences the step until the body has stopped"
                ),
                cancelled=True,
            )
        if self._renewing is asyncio.current_task():  # not stopped meanwhile
            self._renewals.add(self)

    async def _lose(self, why: AgentqError, *, cancelled: bool) -> None:
        self.lost = True
        self.lost_because = why
        if self._on_lost is not None:
            await self._on_lost(why, cancelled)


async def hand_back(store: DurableStore, clock: Clock, execution: Execution) -> bool:
    """Hand a lease back once its attempt's body has stopped (or never started), so that
    another worker may take the step over at once.

    Recorded as `WorkerRecovered` with `agentq.store.HANDED_BACK_REASON` (``release_dead``
    of its own lease): the step is pending again, and the interrupted attempt counts neither
    toward ``max_attempts`` nor toward ``max_recoveries``: a graceful shutdown never fails a
    workflow by itself. Only a lost process (an expired lease, a dead worker) is a crash.

    Returns:
        Whether the store took it (not when the lease was lost or the store failed).
    """
    try:
        return await store.release_dead(execution, clock.time(), HANDED_BACK_REASON)
    except AgentqError:
        return False


async def claim(
    store: DurableStore,
    clock: Clock,
    workflow_id: str,
    step_index: int,
    worker_id: str,
    lease_ttl: float,
    *,
    max_recoveries: int,
) -> ClaimResult:
    """`store.claim_step`, cancel-safe: if the caller is cancelled meanwhile, a lease the claim
    got all the same (it may commit after the caller stopped listening) is handed back."""
    return await cancel_safe_claim(
        store,
        clock,
        store.claim_step(
            workflow_id,
            step_index,
            worker_id,
            lease_ttl,
            clock.time(),
            max_recoveries=max_recoveries,
        ),
        lambda result: result,
    )


async def cancel_safe_claim(
    store: DurableStore,
    clock: Clock,
    verb: Coroutine[Any, Any, T],
    claim_of: Callable[[T], ClaimResult | None],
) -> T:
    """Await `verb` (a store verb that may claim a step: ``claim_step``, ``advance_step``),
    cancel-safe: if the caller is cancelled meanwhile, the verb runs to its end all the same
    (it may commit after the caller stopped listening) and the lease its answer holds
    (``claim_of(answer)``, when `Claimed`) is handed back.

    Raises:
        Whatever `verb` raises; `asyncio.CancelledError` (the lease handed back first).
    """
    running = committed(verb)  # a cancel of the caller waits for the verb's answer
    try:
        return await running
    except asyncio.CancelledError:
        await finish(_hand_back_claim(store, clock, running, claim_of))
        raise


async def _hand_back_claim(
    store: DurableStore,
    clock: Clock,
    running: asyncio.Future[T],
    claim_of: Callable[[T], ClaimResult | None],
) -> None:
    try:
        result = claim_of(await running)
    except Exception:  # refused or failed: nothing was claimed
        return
    if isinstance(result, Claimed):
        await hand_back(store, clock, result.execution)
