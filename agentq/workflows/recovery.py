"""`recover`: finish the work a crashed worker left behind, without waiting for it.

After a crash (or SIGKILL) a step stays leased by a worker that no longer exists, and
workflows stay ``running`` with nobody driving them. `recover`:

0. fires the due tick of every stored schedule of a definition registered here
   (``engine.schedule``: the latest tick at or before now, once across every engine), so
   that its instance is resumed with the rest below;
1. re-admits every step whose lease has expired (``now > expires_at``), and every step leased
   by a worker whose process is known to be gone (a default worker id of this host whose pid
   no longer exists: see `agentq.workflows.workers`), recording `WorkerRecovered`; any other
   live lease is never touched, not even at the same clock tick;
2. starts, as this engine's background runs, every running workflow that this engine has
   registered (a plain `Workflow` registered here, or an instance of a `WorkflowDef`
   registered here, whichever process started it) and that no live lease holds (another
   worker is driving those), and counts the ones this engine runs already; it waits for
   none of them (`RecoveryReport.wait` does);
3. does the same for every *waiting* workflow registered here whose step waits on a keyed
   wait with a deadline (``ctx.wait_for_input(timeout=...)``): its run times the wait out
   (`WaitTimedOut`; the step continues, where the wait raises `InputTimeout`) if the deadline
   has passed, and otherwise arms this engine's live timer for it and ends waiting (a
   ``ctx.sleep`` is such a wait: it wakes then); and for every waiting workflow with a
   deadline of its own (``WorkflowDef(timeout=)``), whose run fails it (``WorkflowTimedOut``)
   if it has passed, or arms the timer that will. So a program that restarts and calls
   `recover` (without `serve`) keeps every deadline. The same for every waiting workflow
   whose step waits on a child run (``ctx.child``): its run joins the child's here (if it
   can run here) and goes on when it ends;
4. reports the workflows it could not resume because their step bodies are not registered
   here: step bodies are code, not data, so a restarted program registers its definitions
   (or plain workflows) again before calling `recover`. An instance whose registered
   definition has other step names than the stored ones is not run: its
   `WorkflowMismatchError` is in `RecoveryReport.errors`.

`recover` never blocks on work: not on a step body (which may wait for something the caller
does only after `recover` returns), not on a run this engine is already driving, not on a
stored retry time (the run waits for it in the background), not on another worker's lease.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from agentq.errors import WorkflowMismatchError
from agentq.store import CHILD_WAIT_PREFIX, Execution, StepState, WorkflowState
from agentq.workflows.engine import WorkflowEngine
from agentq.workflows.model import RunResult
from agentq.workflows.registry import instance_of
from agentq.workflows.workers import take_back

__all__ = ["RecoveryReport", "recover"]


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What `recover` did.

    Attributes:
        recovered: The leases that were taken back (one `WorkerRecovered` each): expired
            ones, and live ones whose worker's process is gone.
        resumed: Ids of the running workflows now running in this engine, in start order:
            `recover` started them as background runs (or found this engine running them
            already), then the waiting workflows with a wait deadline (their runs time the
            wait out, or arm this engine's timer and end waiting). They go on after
            `recover` returns; `wait` (or ``engine.run``) joins them.
        unregistered: Running workflows left alone because their steps are not registered
            with this engine (neither the plain workflow nor its definition).
        held_elsewhere: Running workflows left alone because another worker, which may be
            alive, holds a live lease on one of their steps.
        errors: Exceptions raised while starting a workflow's run, by workflow id (the other
            workflows were still started); e.g. `WorkflowMismatchError` for an instance
            whose registered definition has other steps. A run's own failure comes from `wait`.
        joins: How `wait` joins each resumed run (``engine.run`` of its workflow), by
            workflow id; not part of the repr or of equality.
    """

    recovered: tuple[Execution, ...] = ()
    resumed: tuple[str, ...] = ()
    unregistered: tuple[str, ...] = ()
    held_elsewhere: tuple[str, ...] = ()
    errors: dict[str, Exception] = field(default_factory=dict)
    joins: Mapping[str, Callable[[], Awaitable[RunResult]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    async def wait(self) -> dict[str, RunResult]:
        """Wait until every run in `resumed` has ended; return their results.

        Cancelling the caller stops the waiting, not the runs. A run that waits for input
        ends with status waiting: ``resume`` continues it.

        Returns:
            The `RunResult` of each workflow in `resumed`, by id, in that order.

        Raises:
            Exception: The first exception a run raised (in the order of `resumed`; e.g.
                `StoreError`), once every run has ended.
        """
        ids = list(self.joins)
        outcomes = await asyncio.gather(
            *(join() for join in self.joins.values()), return_exceptions=True
        )
        results: dict[str, RunResult] = {}
        for workflow_id, outcome in zip(ids, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
            results[workflow_id] = outcome
        return results


async def recover(engine: WorkflowEngine) -> RecoveryReport:
    """Re-admit lost leases and resume the interrupted workflows this engine knows.

    Returns at once: the resumed workflows run as the engine's background tasks (see the
    module docstring), so `recover` may be called from anywhere, a running step included,
    and at any time, from several processes at once: re-admission is a compare-and-swap, and
    each step is claimed by exactly one worker.

    Args:
        engine: The engine whose store is inspected and whose registered workflows resume.

    Returns:
        A `RecoveryReport`; ``await report.wait()`` for the resumed runs' results.

    Raises:
        TypeError: `engine` is not a `WorkflowEngine` (the message names the value).
        StoreError: The store failed.

    Example:
        >>> report = await recover(engine)
        >>> results = await report.wait()      # when the program wants the outcomes
    """
    if not isinstance(engine, WorkflowEngine):
        raise TypeError(f"recover() expects a WorkflowEngine, got {engine!r:.80}")
    await engine._fire_schedules()  # due ticks first: their instances are resumed below
    store = engine.store
    now = engine.clock.time()
    recovered: list[Execution] = []
    for execution in await store.expired_leases(now):
        if await store.release_expired(execution, now):
            recovered.append(execution)

    now = engine.clock.time()
    live: set[str] = set()
    timed: set[str] = set()  # waiting on a keyed wait with a deadline, or on a child run
    for row in await store.step_rows():
        if row.state is StepState.WAITING and (
            row.wait_deadline is not None
            or (row.wait_key or "").startswith(CHILD_WAIT_PREFIX)  # its run joins the child
        ):
            timed.add(row.workflow_id)
        if (
            row.state is StepState.LEASED
            and row.lease_expires_at is not None
            and now <= row.lease_expires_at
        ):
            released = await take_back(store, row, now)  # its worker's process is gone
            if released is not None:
                recovered.append(released)
            else:
                live.add(row.workflow_id)

    resumed: list[str] = []
    unregistered: list[str] = []
    held: list[str] = []
    errors: dict[str, Exception] = {}
    joins: dict[str, Callable[[], Awaitable[RunResult]]] = {}
    waiting = [  # a wait or the workflow itself has a deadline: its run acts on it
        w
        for w in await store.workflows(WorkflowState.WAITING)
        if w.workflow_id in timed or w.deadline is not None
    ]
    for workflow_row in [*await store.workflows(WorkflowState.RUNNING), *waiting]:
        wid = workflow_row.workflow_id
        wf = engine.registered(wid)
        definition = None if workflow_row.definition is None else engine.definition(
            workflow_row.definition
        )
        if wf is None and definition is not None:
            try:
                wf = instance_of(definition, workflow_row)
            except WorkflowMismatchError as exc:  # re-registered with other steps
                errors[wid] = exc
                continue
        if wf is None:
            unregistered.append(wid)
            continue
        if wid in live and not engine.running(wid):
            held.append(wid)
            continue
        try:
            engine.run_soon(wf)
        except Exception as exc:  # e.g. registered with other steps than stored
            errors[wid] = exc
            continue
        resumed.append(wid)
        joins[wid] = functools.partial(engine.run, wf)
    return RecoveryReport(
        tuple(recovered), tuple(resumed), tuple(unregistered), tuple(held), errors, joins
    )
