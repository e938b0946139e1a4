"""Recording a step attempt's outcome: complete, wait, fail (or retry), as `classify` judges.

Private to `agentq.workflows.driver`: `Recorder.record` turns an attempt's queue outcome into
the store's verb (``complete_step``, ``wait_step``, ``fail_step`` with ``retry_at``) under the
attempt's fencing token, and tells the driver what follows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from agentq.clock import Clock
from agentq.codec import decode, encode, storable_text
from agentq.errors import AgentqError, NonRetryable, PayloadError, QueueClosed
from agentq.outcomes import Completed, ErrorInfo, FailureReason
from agentq.queue import Queue
from agentq.retry import Verdict, classify
from agentq.store import CHILD_WAIT_PREFIX, Claimed, DurableStore, Execution, WorkflowState
from agentq.workflows.advancing import Follow, advance
from agentq.workflows.attempts import Retry, Waiting, hand_back, step_title
from agentq.workflows.context import StepContext
from agentq.workflows.model import RunResult, RunStatus, StepDef, Workflow
from agentq.workflows.results import stored_result

__all__ = ["Recorder"]


class Recorder:
    """Records attempts' outcomes for one driver (its store, clock, queue and lease ttl).

    Attributes:
        on_deadline: Told (workflow id, Unix seconds) when a step starts a wait that has a
            deadline; None tells nobody.
    """

    def __init__(self, store: DurableStore, clock: Clock, queue: Queue, lease_ttl: float) -> None:
        self.store = store
        self.clock = clock
        self.queue = queue
        self.lease_ttl = lease_ttl
        self.on_deadline: Callable[[str, float], None] | None = None

    async def record(
        self,
        wf: Workflow,
        step: StepDef,
        execution: Execution,
        outcome: Any,
        ctx: StepContext,
        follow: Follow | None = None,
    ) -> Completed | RunResult | Retry:
        """Record an attempt's `outcome` with its fencing token; say what follows.

        What the store refuses as a payload (an output, a wait's details) is a failure of
        the step, recorded: a `PayloadError` never escapes with the lease still held.

        With `follow` (a step that has a next one, and its run allows it: `Follow.allowed`),
        a completion also claims the next step in the same transaction (``advance_step``),
        and the claim got is offered to the run (`Follow.offer`). A wait says in `follow`
        whether it waits on a child run.

        Returns:
            `Completed` (the next step runs), `Retry` (claim again; the store keeps the
            retry time) or the `RunResult` the run ends with (waiting, failed, cancelled).

        Raises:
            QueueClosed: The queue closed under the attempt (nothing recorded, the lease
                handed back).
            LeaseLostError / WorkflowClosedError: What the store says to a stale token.
        """
        now = self.clock.time()
        if isinstance(outcome, Completed) and isinstance(outcome.output, Waiting):
            return await self.wait(wf, step, execution, outcome.output, ctx, follow)
        if isinstance(outcome, Completed):
            try:
                # Later steps see the output exactly as a reload from the store would give it
                # (tuples as lists, float subclasses as float), live or after a restart;
                # None (a step that returns nothing) is its own reload.
                output = outcome.output
                if output is not None:
                    output = decode(encode(output, "output"))
                if follow is None or follow.max_recoveries is None or not follow.allowed():
                    await self.store.complete_step(execution, output, now)
                else:
                    _, claim = await advance(
                        self.store, self.clock, execution, output, now, self.lease_ttl,
                        follow.max_recoveries,
                    )
                    if isinstance(claim, Claimed):  # else the run's own claim finds it again
                        follow.offer(claim)
            except PayloadError as bad:
                reason = f"payload: {bad}"
                await self.store.fail_step(
                    execution, reason, ErrorInfo.from_exception(bad), now, None
                )
                return _ended(wf, RunStatus.FAILED, step, reason, ctx)
            return Completed(output)
        exc = outcome.exception
        error = outcome.error
        if outcome.reason is FailureReason.CANCELLED:
            with contextlib.suppress(AgentqError):  # a closed store: we cannot tell
                row = await self.store.get_workflow(wf.id)
                if row is not None and row.state is WorkflowState.CANCELLED:
                    return await stored_result(self.store, row)
        if outcome.reason is FailureReason.CANCELLED and self.queue.closed:
            # Not our cancel: the queue closed. Record nothing, as a crash would, and hand
            # the lease back (the body has stopped) so that `recover` or `run` can continue
            # the step at once.
            handed = await hand_back(self.store, self.clock, execution)
            raise QueueClosed(
                f"{step_title(wf.id, step.name)} was interrupted by the queue closing; "
                "nothing was recorded and "
                + (
                    "its lease was handed back, so recover() or run() continues it"
                    if handed
                    else "its lease could not be handed back (the store failed or is "
                    f"closed): it expires after lease_ttl ({self.lease_ttl} s)"
                )
            )
        verdict = classify(exc)
        if verdict.verdict is Verdict.WAIT and verdict.waits:
            waiting = Waiting(verdict.waits[0], verdict.wait_reason)
            return await self.wait(wf, step, execution, waiting, ctx, follow)
        if verdict.verdict is Verdict.FINAL:
            leaf = verdict.leaf
            reason = leaf.reason if isinstance(leaf, NonRetryable) else (
                str(error) if leaf is exc or leaf is None else str(ErrorInfo.from_exception(leaf))
            )
            await self.store.fail_step(execution, reason, error, now, None)
            return _ended(wf, RunStatus.FAILED, step, reason, ctx)
        reason = str(outcome.reason) if outcome.reason is not FailureReason.ERROR else str(error)
        return await self._fail(wf, step, execution, reason, error, ctx)

    async def _fail(
        self,
        wf: Workflow,
        step: StepDef,
        execution: Execution,
        reason: str,
        error: ErrorInfo | None,
        ctx: StepContext,
    ) -> RunResult | Retry:
        """Record an ordinary failure: a retry if the step's policy allows one, else failed."""
        now = self.clock.time()
        if step.retry.should_retry(execution.attempt):
            delay = step.retry.delay(execution.attempt)
            await self.store.fail_step(execution, reason, error, now, now + delay)
            return Retry(delay)
        await self.store.fail_step(execution, reason, error, now, None)
        return _ended(wf, RunStatus.FAILED, step, reason, ctx)

    async def wait(
        self,
        wf: Workflow,
        step: StepDef,
        execution: Execution,
        wait: Waiting,
        ctx: StepContext,
        follow: Follow | None = None,
    ) -> RunResult | Retry:
        """Record that the step waits for input (`wait`); tell `on_deadline` its deadline,
        and `follow` whether it waits on a child run (``ctx.child``).

        A wait the store answers at once (a wait on a child run that had ended, a receive
        whose message was sent before, an input a ``resume`` gave before the wait) returns
        `Retry` with no delay: the step is pending again, claimed again at once, and its
        wait returns the answer.

        A wait the store refuses as a payload (`PayloadError`: ``ctx.wait_for_input``
        checks its details first, so this is a safety net) is an ordinary failure of the
        attempt, per the step's retry policy: the lease never stays held by a live engine.
        """
        try:
            row = await self.store.wait_step(
                execution,
                wait.reason,
                self.clock.time(),
                key=wait.key,
                details=wait.details,
                deadline=wait.deadline,
                topic=wait.topic,
            )
        except PayloadError as bad:
            return await self._fail(
                wf, step, execution, f"payload: {bad}", ErrorInfo.from_exception(bad), ctx
            )
        if follow is not None:
            follow.child_wait = wait.key is not None and wait.key.startswith(CHILD_WAIT_PREFIX)
        if row.state is not WorkflowState.WAITING:  # answered at once (an ended child run,
            return Retry(0.0)  # a kept message): the step is pending again, claim it again
        if wait.deadline is not None and self.on_deadline is not None:
            self.on_deadline(wf.id, wait.deadline)
        return _ended(wf, RunStatus.WAITING, step, wait.reason, ctx)


def _ended(
    wf: Workflow, status: RunStatus, step: StepDef, reason: str, ctx: StepContext
) -> RunResult:
    """A live `RunResult`, its reason exactly as the store keeps it (`storable_text`)."""
    return RunResult(wf.id, status, step.name, storable_text(reason), ctx.outputs)
