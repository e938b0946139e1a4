"""`StepContext`: what a step body receives, and its durable calls and waits.

`ctx.call`, `ctx.wait_for_input` and `ctx.receive` are carried out by the attempt's call log
(`agentq.workflows.calls.CallLog`), which the driver attaches to the context of each attempt;
this module knows it only through the small `CallRecorder` protocol (``recorder``, with
`Definition`; both re-exported here), so that the model stays below the machinery that runs
it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from agentq.clock import unix_seconds
from agentq.errors import StepContextError
from agentq.queue import Job
from agentq.store import CallRow
from agentq.workflows.recorder import CallRecorder, Definition

__all__ = ["CallRecorder", "Definition", "StepContext"]


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

    def __agentq_fingerprint__(self) -> str:
        """What the context is as an input of a durable call: a constant (the queue's
        fingerprint protocol). A call whose function reads ``ctx`` (``lambda:
        f(ctx.workflow_id)``) is the same call in a retry (another attempt) and a fork
        (another workflow id), so it answers from the log instead of conflicting."""
        return "agentq.StepContext"

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
        tokens: int | None = None,
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
            tokens: The tokens the call is expected to use (an int >= 0; ``Job(tokens=)``
                otherwise), charged to its lane's token budget (`LaneConfig.tokens`) when it
                starts and settled by the tokens it used: its output's usage, else the
                recorded `usage` (``total_tokens``, or ``input_tokens + output_tokens``).
                A call answered from the log charges nothing.

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
            ValueError: `tokens` is not an int >= 0 (nothing is recorded).
            PayloadError: `label` or a `usage` dict is not JSON or too large (before
                anything runs).

        Example:
            >>> async def step(ctx):
            ...     hits = await ctx.call(Job("search", lambda: search("agentq")))
            ...     return await ctx.call(Job("mail", partial(send, hits), Priority.HIGH),
            ...                           label={"kind": "tool", "tool": "send"})
        """
        if tokens is not None and isinstance(job, Job):
            job = replace(job, tokens=tokens)  # checked by Job
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

    async def recorded(self) -> list[CallRow]:
        """This workflow's recorded calls and waits (`CallRow`, as `DurableStore.calls`
        lists them), from the attempt's one read of the log that `call` and `wait_for_input`
        share (no other read), updated with what the attempt recorded since.

        Raises:
            StoreError: The read failed. StepContextError: as `call`.
        """
        return await self._log("recorded").recorded()

    async def sleep(self, seconds: float) -> None:
        """Sleep durably for `seconds`: the step waits without a lease, across restarts.

        The wake time (now + `seconds`, on the engine's clock) is stored the first time:
        the step becomes ``Waiting`` with the reason ``"sleeping until <ISO-8601 UTC>"``,
        the attempt ends (`run` returns ``waiting``) and no lease or worker is held. At the
        wake time the step runs again, woken by the engine's own timer while it lives, or by
        the next `run`, `recover` or `serve` on the store after a restart (the log records
        ``WaitTimedOut`` for the sleep's key: it woke); its completed calls and earlier
        sleeps answer from the log, and this call returns. A step's sleeps are keyed by
        their order in it (``sleep:0``, ``sleep:1``, ...), so the body must ask for them in
        the same order on every run. A `resume` of the sleeping step wakes it early.
        Needs an ``async def`` step body.

        Args:
            seconds: How long to sleep (>= 0, at most 10 years); 0 returns at once and
                records nothing.

        Raises:
            TypeError: `seconds` is not a number.
            ValueError: `seconds` is negative, not finite or more than 10 years.
            KeyConflictError: The sleep's key (``sleep:<n>``) names a call or a
                `wait_for_input` of this workflow.
            StepContextError: As for `wait_for_input`.
        """
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError(f"ctx.sleep expects seconds as a number, got {seconds!r:.80}")
        if not (0 <= seconds < math.inf):
            raise ValueError(f"ctx.sleep expects seconds >= 0 and finite, got {seconds!r}")
        log = self._log("sleep")
        await log.sleep(log.now() + float(seconds))

    async def sleep_until(self, when: float | datetime) -> None:
        """Sleep durably until `when`: as `sleep`, to a point in time.

        Args:
            when: Unix seconds (a float) or an aware `datetime`; a time that has passed
                returns at once and records nothing.

        Raises:
            ValueError: `when` is a naive `datetime`, not finite, or more than 10 years
                away.
            TypeError: `when` is neither a number nor a `datetime`.
            KeyConflictError / StepContextError: As for `sleep`.
        """
        wake_at = unix_seconds(when, "ctx.sleep_until's when")
        await self._log("sleep_until").sleep(wake_at)

    async def child(self, definition: Definition | str, input: Any = None, *, key: str) -> Any:
        """Run a child workflow once, as part of this step, and return its output.

        Starts (once per `key` in this workflow) an instance of `definition` whose id is
        ``<this workflow's id>/<key>``, then waits for it without holding this step's
        lease: the step becomes ``Waiting`` on the wait key ``child:<key>``. The store
        answers that wait in the transaction that ends the child, whoever runs it; the
        step then runs again (its completed calls answer from the log) and this same call
        returns the child's output. The engine that runs this step runs the child in the
        background when it holds the definition (else a serving engine does), and goes on
        with this workflow when the child ends; after a crash, `recover` (or `serve`)
        continues both. A replay of the step (a resume, a retry, a recovery) joins the same
        child; it never starts a second one. Cancelling this workflow cancels the child (so
        does its deadline, ``WorkflowDef(timeout=)``, passing).

        Args:
            definition: A `WorkflowDef`, or the name of one registered with the engine.
            input: The child's input (JSON); a replay must give the same.
            key: The child's key within this workflow (a key without ``/``).

        Returns:
            The output of the child's last step (as stored: JSON).

        Raises:
            ChildFailed: The child failed or was cancelled (its id, state and reason).
            KeyConflictError: ``child:<key>`` names another wait of this workflow.
            WorkflowMismatchError: The child's id is stored with another definition, steps
                or input (or not as this workflow's child).
            UnknownWorkflowError: A definition name that the engine has not registered.
            StepContextError: As `wait_for_input` (outside its attempt, another loop).
            InvalidKeyError / TypeError / ValueError: A bad key (one holding ``/``) or
                definition.
            PayloadError: `input` is not JSON or too large.
            LeaseLostError / WorkflowClosedError: As `call`.

        The step is parked by the same signal as `wait_for_input` (a `BaseException`).

        Example:
            >>> async def step(ctx):
            ...     summary = await ctx.child(summarise, {"doc": ctx.input}, key="summary")
        """
        return await self._log("child").child(definition, input, key)

    async def start_child(
        self, definition: Definition | str, input: Any = None, *, key: str
    ) -> str:
        """Start (once) the child run `key`, as `child` does, without waiting for it.

        For a caller that awaits the child itself while this step runs (a durable call
        that runs a sub-agent, ``engine.run(child_id)``): the child is linked to this
        workflow as `child` links it (cancelling this workflow cancels it; its id is
        ``<this workflow's id>/<key>``), and the engine runs it in the background when it
        holds the definition. A replay finds the same child (started again only if it has
        not ended); a wait row answered with an outcome the child no longer has (it was
        retried since) is re-opened, so the child's next end answers it. Its end answers
        the wait ``child:<key>`` (`ChildEnded`), so a later
        ``await ctx.child(definition, input, key=key)`` returns its output at once if it
        has ended, else parks the step on it and returns its output in the step's next run.

        Returns:
            The child's workflow id.

        Raises:
            As `child` (but never `ChildFailed`: the child's end is not read here).
        """
        return await self._log("start_child").start_child(definition, input, key)

    async def children(
        self,
        definition: Definition | str,
        inputs: Mapping[str, Any],
        *,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """Fan out: one child run per key of `inputs`; return their outputs by key.

        Each child is what `child` makes (id ``<this workflow's id>/<key>``, started once).
        They are started in input order, at most `limit` open (started and not ended) at
        once (None: all at once); the step waits on the first one in input order that has
        not ended, and each end lets it start the next ones. A slot freed by a later
        child is filled when the step next wakes.

        Args:
            definition: A `WorkflowDef`, or the name of one registered with the engine.
            inputs: Child key to input (JSON); a replay must give the same.
            limit: At most this many children open at once (an int >= 1), or None.

        Returns:
            The outputs, by key, in the order of `inputs`.

        Raises:
            ChildFailed: The first child (in input order, among those whose outcome the
                step has read) that failed or was cancelled: no further child is started;
                the ones still running go on (cancel this workflow to stop them).
            ValueError: `limit` is not a positive int or None; a key holds ``/``.
            TypeError: `inputs` is not a mapping.
            Otherwise as `child`.
        """
        return await self._log("children").children(definition, inputs, limit)
    async def receive(
        self, topic: str, *, timeout: float | None = None  # noqa: ASYNC109 (stored deadline)
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
