"""`StepContext`: what a step body receives, and its durable calls and waits.

`ctx.call`, `ctx.wait_for_input` and `ctx.receive` are carried out by the attempt's call log
(`agentq.workflows.calls.CallLog`), which the driver attaches to the context of each attempt;
this module knows it only through the small `CallRecorder` protocol, so that the model stays
below the machinery that runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentq.errors import StepContextError

if TYPE_CHECKING:
    from agentq.queue import Job

__all__ = ["CallRecorder", "StepContext"]


class CallRecorder(Protocol):
    """What a `StepContext` needs from its attempt's call log."""

    async def call(
        self,
        job: Job,
        label: Mapping[str, Any] | None,
        usage: Mapping[str, Any] | Callable[[Any], Mapping[str, Any] | None] | None,
    ) -> Any: ...

    async def wait(
        self,
        key: str,
        reason: object,
        details: Mapping[str, Any] | None,
        timeout: float | None,  # noqa: ASYNC109 (a durable deadline, stored)
    ) -> Any: ...

    async def receive(
        self,
        topic: str,
        timeout: float | None,  # noqa: ASYNC109 (a durable deadline, stored)
    ) -> Any: ...


@dataclass(frozen=True, slots=True)
class StepContext:
    """What a step body receives.

    Attributes:
        workflow_id: The workflow's stable id.
        step_index: 0-based position of this step.
        step_name: This step's name.
        attempt: 1-based attempt number (counted again from 1 after a resume or a retry of
            the workflow). An attempt lost to a crash is re-admitted under the same number:
            only attempts that ended in a failure count toward ``RetryPolicy.max_attempts``.
        input: The workflow's input.
        outputs: Outputs of the steps before this one, in order.
        previous: The last output (or the workflow input for step 0).
        resume_input: The input delivered by `resume`, or None if the step was not resumed.
        resumed: Whether the step was resumed: then `resume_input` is what `resume`
            delivered, None included. Tells "resumed with None" from "not resumed yet".
        recoveries: Earlier runs of this step lost to crashes (their process died, or their
            lease ran out, before they recorded an outcome); 0 on a first run. A run that
            a graceful shutdown interrupted is not a crash and is not counted (the log
            records it: ``WorkerRecovered`` with ``crash: false``). A body with outside
            effects can check them before acting again (its durable calls already answer
            from the log).
    """

    workflow_id: str
    step_index: int
    step_name: str
    attempt: int
    input: Any
    outputs: tuple[Any, ...]
    previous: Any
    resume_input: Any = None
    resumed: bool = False
    recoveries: int = 0
    _calls: CallRecorder | None = field(default=None, repr=False, compare=False, kw_only=True)
    # The attempt's call log, set by the engine; None in a context built by hand.

    def _log(self, verb: str) -> CallRecorder:
        if self._calls is None:
            raise StepContextError(
                f"ctx.{verb} needs a step attempt run by a WorkflowEngine; this StepContext "
                f"of workflow {self.workflow_id!r} has none (built by hand?)"
            )
        return self._calls

    async def call(
        self,
        job: Job,
        *,
        label: Mapping[str, Any] | None = None,
        usage: Mapping[str, Any] | Callable[[Any], Mapping[str, Any] | None] | None = None,
    ) -> Any:
        """Run `job` as a durable call: once per key in this workflow, answered from the log after.

        The job runs through the engine's queue (its lane, permits, backpressure; concurrent
        calls with one key in this step share one run) and its outcome is recorded in the
        workflow's event log under ``job.key``, scoped to this workflow. A key that completed
        earlier in this workflow returns the recorded output without running, in this
        process or another: after `recover`, a retry or a resume of the step, a kernel
        restart. A call that started and never finished (the process died) runs again; the
        log marks it as a re-run. Needs an ``async def`` step body.

        The stored fingerprint (`agentq.queue.fingerprint.stored_fingerprint`: the
        function's module and name, the names and constants its code uses and the values the
        call uses, not its bytecode) tells calls
        apart across processes: the same key for another call raises `KeyConflictError`.
        If the step is cancelled (a workflow cancel, a step timeout) while the call runs, the
        call runs on and its outcome is still recorded; a call still waiting for its lane is
        cancelled and recorded as failed (reason ``cancelled``).

        Args:
            job: The call; ``job.key`` is its idempotency key within this workflow.
            label: A small JSON object stored with every event of the call, e.g.
                ``{"kind": "tool", "tool": "send_email"}``.
            usage: Figures to record on completion (tokens, cost): a dict with str keys
                (checked, JSON, before the call runs), or a function of the output
                returning one (or None). A function that raises or returns something else
                never loses the call: it is recorded as completed without usage, and the
                problem is logged at WARNING on the ``agentq`` logger.

        Returns:
            The job's output, as stored (JSON: tuples come back as lists).

        Raises:
            JobFailed: The job failed (also: its output is not JSON, recorded as a failure
                naming the field and type); the original exception is ``__cause__``. The
                failure is recorded; a later attempt of the step may run the call again.
            KeyConflictError: The key is recorded in this workflow for another call or for
                a `wait_for_input`.
            LeaseLostError: This worker lost the step's lease; nothing was recorded or run.
            WorkflowClosedError: The workflow was cancelled (or otherwise closed) by another
                engine or ``agentq cancel`` before this worker's next lease renewal noticed;
                nothing was recorded or run, every later call raises it too, and what the
                body returns is refused. An `AgentqError` (an `Exception`): catch the
                errors a tool may raise (`JobFailed`) rather than ``Exception``, or let it
                through, so the body stops at once.
            StoreError: The store failed reading the recorded calls (once per attempt, at
                its first call or wait) or recording this one.
            StepContextError: The attempt this ctx belongs to has ended, or the call is
                awaited on another event loop than the engine's (a plain ``def`` step
                driving it with ``asyncio.run``): durable calls need an ``async def`` step.
                Nothing is recorded.
            TypeError: `job` is not a `Job`, or `label`/`usage` is not a dict with str keys.
            PayloadError: `label` or a `usage` dict is not JSON or too large (before
                anything runs).

        Example:
            >>> async def step(ctx):
            ...     hits = await ctx.call(Job("search", lambda: search("agentq")))
            ...     return await ctx.call(Job("mail", partial(send, hits), Priority.HIGH),
            ...                           label={"kind": "tool", "tool": "send"})
        """
        return await self._log("call").call(job, label, usage)

    async def wait_for_input(
        self,
        key: str,
        reason: object,
        *,
        details: Mapping[str, Any] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline, stored)
    ) -> Any:
        """Wait durably for outside input (an approval, a webhook) under `key`; return it.

        The first time, the step stops and becomes ``Waiting(reason, key, deadline,
        details)``; the log records the wait. `WorkflowEngine.resume` records the input;
        the step then runs again, its completed calls answer from the log, and this same
        call returns the input. A step may wait several times, each under its own key.

        Args:
            key: The wait's key within this workflow (a non-empty str).
            reason: What is asked, shown to whoever answers (text; at most
                `MAX_REASON_CHARS` kept).
            details: A JSON object shown with the wait, e.g. a tool's name and arguments;
                checked (nested values, at most 1 MiB encoded) before anything is recorded.
            timeout: Seconds until the wait times out (> 0, at most 10 years:
                `agentq.workflows.calls.MAX_WAIT_TIMEOUT`, so that every stored deadline is
                a time frames and widgets can show), or None (never). Once the deadline
                has passed, the next `run` or `recover` of the workflow (or the live engine's
                own timer) continues the step, and this call raises `InputTimeout`; the log
                records ``WaitTimedOut``. This holds across restarts.

        Returns:
            The input given to `resume` (any JSON value).

        The step is parked by a signal that derives from `BaseException` (as
        `asyncio.CancelledError` does), so an ``except Exception`` lets it through; a body
        that swallows it anyway (``except BaseException``, ``gather(...,
        return_exceptions=True)``) still ends its attempt waiting on the first wait it
        asked for (see docs/durable-calls.md).

        Raises:
            InputTimeout: The wait's deadline passed without input.
            KeyConflictError: `key` names a call, or was asked another question.
            StepContextError: The attempt this ctx belongs to has ended, or the wait is
                awaited on another event loop than the engine's (a plain ``def`` step).
            TypeError / ValueError / InvalidKeyError: A bad key, details or timeout (more
                than 10 years: ValueError naming the value).
            PayloadError: `details` holds a value that is not JSON, or is too large (the
                message names the field); nothing is recorded.
        """
        return await self._log("wait_for_input").wait(key, reason, details, timeout)

    async def receive(
        self,
        topic: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline, stored)
    ) -> Any:
        """Return the next message sent to this workflow on `topic` (`WorkflowEngine.send`).

        Messages are kept durably from their send until a receive takes them, first in first
        out per topic, each taken once. If one is kept, it is returned (its taking is
        recorded in the log as the answer of this receive). Else the step waits like
        `wait_for_input` (``Waiting``, reason ``"waiting for a message on <topic>"``, no
        lease held) until a send on `topic` delivers one, in the same transaction as the
        send, and the step runs again. The n-th receive of a topic in a step is answered
        from the log in every later attempt (a crash, a resume, a retry of the workflow): a
        replay returns the same message and takes no other. Needs an ``async def`` step.

        Args:
            topic: The topic (a non-empty str, `agentq.keys` rules).
            timeout: Seconds until the receive times out (> 0, at most 10 years), or None
                (never). Once its deadline has passed with no message, the step continues
                and this call raises `InputTimeout`; a message sent later is kept for the
                next receive.

        Returns:
            The message's payload (any JSON value).

        Raises:
            InputTimeout: The receive's deadline passed with no message.
            StepContextError: The attempt this ctx belongs to has ended, or the receive is
                awaited on another event loop than the engine's (a plain ``def`` step).
            TypeError / ValueError / InvalidKeyError: A bad topic or timeout.

        Example:
            >>> async def collect(ctx):
            ...     order = await ctx.receive("order", timeout=3600)
            ...     return order["id"]
        """
        return await self._log("receive").receive(topic, timeout)
