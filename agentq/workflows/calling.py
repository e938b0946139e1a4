"""`CallRunner`: a durable call that the log does not answer, run and recorded.

A step's `CallLog` (``calls.py``) answers a call from the log when its key completed before;
any other call goes to the attempt's `CallRunner`, which records it as started
(``CallStarted``, committed before the job runs, so a crash leaves a trace of every call that
may have reached the outside world), runs it through the queue in a task of its own (its
lane's permits and backpressure; a job under its own queue key, `call_queue_key`, never
persisted by the queue: the log answers it), and records its outcome (``CallCompleted`` with
its usage, or ``CallFailed``) under the attempt's fencing token. A call cancelled while it
still waits for its lane is cancelled before it starts (`cancel_unstarted`) and recorded as
failed (reason ``cancelled``); one that started runs on and has its outcome recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import agentq.tracing as tracing
from agentq.clock import Clock
from agentq.codec import copy_json, decode, encode, is_decoded
from agentq.errors import AgentqError, JobFailed, JobLost, PayloadError
from agentq.keys import call_queue_key
from agentq.outcomes import ErrorInfo, Failed, FailureReason, Pending
from agentq.queue import Job, Queue, usage_tokens
from agentq.store import CallRow, DurableStore, Execution

__all__ = ["CallRunner", "Usage", "call_queue_key", "json_object", "rekeyed"]

LOGGER = logging.getLogger("agentq")

Usage = Mapping[str, Any] | Callable[[Any], Mapping[str, Any] | None] | None
"""What ``ctx.call(usage=...)`` takes: figures to record, or a function of the output."""


_JOB_FIELDS: Any = Job.__dict__  # a frozen dataclass with slots: each field's slot setter
_SETTERS = tuple(
    _JOB_FIELDS[name].__set__
    for name in ("key", "fn", "priority", "timeout", "retry", "fingerprint", "name", "persist",
                 "tokens")
)


def rekeyed(job: Job, key: str, fingerprint: Any) -> Job:
    """`job` under the queue key `key` (`call_queue_key`) and `fingerprint`, not persisted by
    the queue (the call's log answers it): a copy of a checked `Job` through its slots, not a
    new `Job` checked again (a third of the cost). `key` is valid by construction."""
    new: Job = object.__new__(Job)
    key_, fn, priority, timeout, retry, fingerprint_, name, persist, tokens = _SETTERS
    key_(new, key)
    fn(new, job.fn)
    priority(new, job.priority)
    timeout(new, job.timeout)
    retry(new, job.retry)
    fingerprint_(new, fingerprint)
    name(new, job.name)
    persist(new, False)
    tokens(new, job.tokens)
    return new


def json_object(value: object, what: str, *, encoded: bool = True) -> dict[str, Any] | None:
    """`value` checked as a stored JSON object: a shallow copy of it, or None.

    Checked (encoded once), not normalised: the store checks and copies it again as it
    records it (`DurableStore.start_call` and ``wait_step`` keep their own decoded copy, tuples
    made lists), so decoding it here too would only be thrown away. With ``encoded=False``
    only its type and keys are checked here: for a value the store is about to check anyway
    before it writes anything (a call's label, `CallRunner.run`).

    Raises:
        TypeError: Not a dict with str keys (nor None).
        PayloadError: A value inside is not JSON, or the whole is too large (the message
            names the field, e.g. ``details of wait 'k'['to'] is a set``).
    """
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"{what} must be a dict with str keys or None, got {value!r:.200}")
    stored = dict(value)
    if encoded:
        encode(stored, what)
    return stored


class CallRunner:
    """Runs and records the durable calls of one step attempt that the log does not answer.

    Args:
        store: The workflow's store.
        queue: The queue the calls run through.
        clock: Time for durations.
        workflow_id: The workflow.
        execution: A callable returning the attempt's current `Execution` (renewed leases
            keep the fencing token).
        record: Called with ``(key, row)`` for each row the store answers (started, then
            completed or failed): the `CallLog` keeps them, so that a call of the same key
            is answered from them.

    All methods run on the engine's event loop.
    """

    def __init__(
        self,
        *,
        store: DurableStore,
        queue: Queue,
        clock: Clock,
        workflow_id: str,
        execution: Callable[[], Execution],
        record: Callable[[str, CallRow], None],
    ) -> None:
        self._store = store
        self._queue = queue
        self._clock = clock
        self._workflow_id = workflow_id
        self._execution = execution
        self._record = record
        self._inner: dict[str, tuple[asyncio.Task[Any], str]] = {}  # key: call task, queue key

    async def run(
        self, job: Job, fingerprint: str, label: dict[str, Any] | None, usage: Usage
    ) -> Any:
        """Record the call `job` as started, run it through the queue and record its outcome,
        inside the call's span (`agentq.tracing.call_span`, with its usage).

        Args:
            job: The call's job (its key is the call's key in the workflow).
            fingerprint: The call's stored fingerprint (`agentq.queue.stored_fingerprint`).
            label: The call's label, its type and keys checked (`json_object` with
                ``encoded=False``: the store encodes it as it records the start), or None.
            usage: Figures to record with its output, checked, or a function of the output.

        Returns:
            The job's output, as stored (decoded from its JSON).

        Raises:
            JobFailed: The job failed, timed out or was lost, or its output is not JSON; the
                call is recorded as failed. For an output that is not JSON (or too large)
                it is final (``retryable`` False, its cause the `PayloadError` naming the
                field and type): the step fails at once instead of running the call again.
            asyncio.CancelledError: Cancelled before the job started; recorded as failed
                (reason ``cancelled``).
            LeaseLostError, WorkflowClosedError: Raised by the store as it records (the
                attempt's lease is lost, the workflow closed): nothing is written.
            StoreError: The store failed.
        """
        with tracing.call_span(self._workflow_id, job.key, label, str(job.priority)) as span:
            output, row = await self._run(job, fingerprint, label, usage)
            if row.usage:
                span.update(tracing.usage_attributes(row.usage))
            return output

    def cancel_unstarted(self, key: str) -> None:
        """Cancel the call `key` if its job still waits for its lane: it never reached the
        world, and is recorded as cancelled. A job that started runs on and is recorded."""
        running = self._inner.get(key)
        if running is not None and isinstance(self._queue.state(running[1]), Pending):
            running[0].cancel()  # the call's own task, waiting in push_and_wait

    async def _run(
        self, job: Job, fingerprint: str, label: dict[str, Any] | None, usage: Usage
    ) -> tuple[Any, CallRow]:
        key = job.key
        store, clock = self._store, self._clock
        try:
            row = await store.start_call(
                self._execution(),
                key,
                fingerprint=fingerprint,
                lane=str(job.priority),
                label=label,
                now=clock.time(),
            )
        except PayloadError:
            # The label is checked (encoded) by the store alone, before it writes anything;
            # a refused one is named here as ``ctx.call`` names it (``label of call 'k'...``).
            json_object(label, f"label of call {key!r}")
            raise
        self._record(key, row)
        queue_key = call_queue_key(self._workflow_id, key)
        started = clock.time()
        # This runs in the call's own task (`CallLog.call` starts it, `_run_call`), so a
        # cancelled step can stop a call that has not started yet (`cancel_unstarted`
        # cancels this task while the job waits for its lane) and lets one that has
        # started run on and be recorded. The job's fingerprint is the call's stored one
        # (or the job's own): the key is this call's alone, and the queue need not derive
        # another from its callable.
        task = asyncio.current_task()
        assert task is not None
        self._inner[key] = (task, queue_key)
        try:
            output = await self._queue.push_and_wait(
                rekeyed(job, queue_key, fingerprint if job.fingerprint is None else job.fingerprint)
            )
        except asyncio.CancelledError:
            failure = Failed(
                FailureReason.CANCELLED,
                ErrorInfo("CancelledError", "its step was cancelled before the call started"),
                None,
            )
            await self._fail(key, failure, max(0.0, clock.time() - started))
            raise
        except JobFailed as failed:
            failure = failed.outcome  # type: ignore[assignment]
            await self._fail(key, failure, max(0.0, clock.time() - started))
            raise JobFailed(key, failure) from failed.__cause__
        except JobLost as lost:
            failure = Failed(FailureReason.CANCELLED, ErrorInfo.from_exception(lost), lost)
            await self._fail(key, failure, max(0.0, clock.time() - started))
            raise JobFailed(key, failure) from lost
        finally:
            self._inner.pop(key, None)
            # The log answers this key from now on. The job was not persisted
            # (persist=False), so a queue's store has nothing of it to remove; a store
            # failure leaves at most a cached outcome in memory, which the log answers first.
            with contextlib.suppress(AgentqError):
                await self._queue.forget(queue_key)
        duration = max(0.0, clock.time() - started)
        recorded = None
        if usage is not None:
            # A usage function is given the output as stored (tuples made lists): the output
            # itself when it is so already (a JSON codec's output, a model response), else
            # its round trip through JSON.
            if callable(usage) and not is_decoded(output):
                try:
                    output = decode(encode(output, f"output of call {key!r}"))
                except PayloadError as bad:
                    await self._unstorable(key, bad, duration)
            recorded = self._usage(key, usage, output)
            if job.tokens is not None and recorded is not None:
                used = usage_tokens(recorded)  # settles the charge unless the output did
                if used is not None:
                    self._queue.settle_tokens(queue_key, used)
        try:
            # The store checks the output as it records it (once: no copy is made here)
            # and hands back its own decoded copy in the row: that is the caller's output.
            row = await store.complete_call(
                self._execution(),
                key,
                output=output,
                usage=recorded,
                duration=duration,
                now=clock.time(),
            )
        except PayloadError as refused:
            try:
                encode(output, f"output of call {key!r}")  # names the field, if it is this
            except PayloadError as bad:
                await self._unstorable(key, bad, duration)
            raise refused  # something else the store refused (as any store failure)
        self._record(key, row)
        # The row is the call log's (a repeat of the key is answered from it): the caller gets
        # a copy of its own, so that mutating it changes no later answer.
        return copy_json(row.output), row

    async def _unstorable(self, key: str, bad: PayloadError, duration: float) -> NoReturn:
        """The output of call `key` is not JSON (or too large): it can never be stored, and
        running it again (a retry of the step) could only repeat its effect and fail the
        same way, so the call is recorded as failed and the step fails at once."""
        failure = Failed(FailureReason.ERROR, ErrorInfo.from_exception(bad), bad)
        await self._fail(key, failure, duration)
        raise JobFailed(key, failure, retryable=False) from bad

    def _usage(self, key: str, usage: Usage, output: Any) -> dict[str, Any] | None:
        """The figures to record with a completed call, or None.

        A `usage` function that raises or returns something that is not a JSON object never
        costs the call its record (the job ran, perhaps paid): the call is recorded as
        completed without usage, and the problem is logged at WARNING on the ``agentq``
        logger, naming the call and the error.
        """
        if not callable(usage):
            return None if usage is None else dict(usage)  # checked when the call began
        try:
            return json_object(usage(output), f"usage of call {key!r}")
        except Exception as exc:
            LOGGER.warning(
                "usage of call %r of workflow %r failed (%s: %s); the call is recorded as "
                "completed without usage",
                key, self._workflow_id, type(exc).__name__, exc,
            )
            return None

    async def _fail(self, key: str, failure: Failed, duration: float) -> None:
        reason = (
            str(failure.reason)
            if failure.reason is not FailureReason.ERROR
            else str(failure.error)
        )
        self._record(
            key,
            await self._store.fail_call(
                self._execution(),
                key,
                reason=reason,
                error=failure.error,
                duration=duration,
                now=self._clock.time(),
            ),
        )
