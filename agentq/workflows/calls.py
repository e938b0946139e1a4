"""Durable calls and waits inside a step: `CallLog`, what `ctx.call` and `ctx.wait_for_input` do.

A `CallLog` belongs to one step attempt. The driver builds it when the attempt starts and hands
it to the attempt's `StepContext`; it reads the workflow's recorded calls (`DurableStore.calls`)
once, at the attempt's first call or wait (a step that makes none costs no read), and the
driver closes it when the attempt ends, after `settle` has waited for every call that was
still being recorded. So:

- a call whose key completed earlier in this workflow (in this process or another, before a
  crash, a retry, a resume or a restart) answers from that read, appending nothing;
- any other call is recorded as started (``CallStarted``, committed before the job runs, so a
  crash leaves a trace of every call that may have reached the outside world), runs through
  the queue in its lane (permits, backpressure, in-process joins), and its outcome is recorded
  (``CallCompleted`` / ``CallFailed``) under the attempt's fencing token: a worker that lost
  its lease records nothing (the attempt's `CallRunner`, ``calling.py``);
- a call whose step is cancelled (a workflow cancel, a step timeout) while it runs still has
  its outcome recorded when the job ends: it may have reached the world, and the log must say
  what came back. A call still waiting for its lane then is cancelled before it starts and
  recorded as failed (reason ``cancelled``): it never reached the world.

The attempt's one read of the log and its keyed waits (``ctx.wait_for_input``, ``ctx.sleep``,
``ctx.receive``) are `KeyedLog`'s (``keyed.py``), the base of `CallLog`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from agentq.clock import Clock
from agentq.codec import copy_json
from agentq.errors import KeyConflictError
from agentq.queue import Job, Queue, same_stored, stored_fingerprint
from agentq.store import CallRow, DurableStore, Execution
from agentq.workflows.calling import CallRunner, Usage, call_queue_key, json_object
from agentq.workflows.children import ChildRunner, Spawner
from agentq.workflows.keyed import KeyedLog
from agentq.workflows.parking import (
    MAX_WAIT_TIMEOUT,
    SLEEP_KEY_PREFIX,
    SLEEP_REASON_PREFIX,
    InputRequested,
)
from agentq.workflows.recorder import Definition

__all__ = [  # the parking names are re-exported from `agentq.workflows.parking`
    "MAX_WAIT_TIMEOUT", "SLEEP_KEY_PREFIX", "SLEEP_REASON_PREFIX", "CallLog", "InputRequested",
    "Usage", "call_queue_key",
]


class CallLog(KeyedLog):
    """The durable calls and waits of one step attempt (see the module docstring and
    `KeyedLog` for its waits).

    Args:
        store: The workflow's store.
        queue: The queue the calls run through.
        clock: Time for durations and deadlines.
        workflow_id: The workflow.
        execution: A callable returning the attempt's current `Execution` (renewed leases
            keep the fencing token).
        load: Reads the workflow's recorded calls and waits (``store.calls(workflow_id)``);
            awaited once, at the attempt's first call or wait.
        spawner: Runs the child runs this attempt starts (the engine), or None.

    All methods run on the engine's event loop, from the step's own task or tasks it starts.
    """

    def __init__(
        self,
        *,
        store: DurableStore,
        queue: Queue,
        clock: Clock,
        workflow_id: str,
        execution: Callable[[], Execution],
        load: Callable[[], Awaitable[list[CallRow]]],
        spawner: Spawner | None = None,
    ) -> None:
        super().__init__(clock=clock, workflow_id=workflow_id, execution=execution, load=load)
        self._store = store
        self._queue = queue
        self._calls: CallRunner | None = None  # built at the attempt's first call to run
        self._spawner = spawner
        self._child_runs: ChildRunner | None = None  # built at its first child run
        self._running: dict[str, asyncio.Task[Any]] = {}
        # The stored fingerprints of the explicit ``fingerprint=`` of this attempt's calls, by
        # value when it is text or a tuple of texts and None (an agent's calls share a few).
        self._explicit: dict[str | tuple[str | None, ...], str] = {}

    # ------------------------------------------------------------------ calls

    async def call(self, job: Job, label: Mapping[str, Any] | None, usage: Usage) -> Any:
        """Run `job` once per key in this workflow; see `StepContext.call`."""
        self._check_open("call")
        if not isinstance(job, Job):
            raise TypeError(f"ctx.call expects an agentq.Job, got {job!r:.200}")
        key = job.key
        # A label's JSON is checked by the store as it records the call's start, before
        # anything is written or run (`CallRunner.run`); here only its type and keys, and its
        # JSON only for a call answered from the log (the store never sees it then).
        label_obj = (
            None if label is None
            else json_object(label, f"label of call {key!r}", encoded=False)
        )
        if usage is not None and not callable(usage):
            usage = json_object(usage, f"usage of call {key!r}")
        fingerprint = self._fingerprint(job)
        if not self._ready:
            await self._read_once()
        row = self._rows.get(key)
        if row is not None and not (row.kind == "call" and row.state == "failed"):
            self._check_same(row, key, job, fingerprint)  # a failed call runs as it is now
            if row.fingerprint is not None:
                fingerprint = row.fingerprint  # the same call: a rerun keeps the row's format
            if row.state == "completed":
                if label_obj is not None:
                    json_object(label_obj, f"label of call {key!r}")
                self.answered += 1
                return copy_json(row.output)  # each answer its own (the caller may mutate it)
        running = self._running.get(key)
        awaited: asyncio.Future[Any]
        if running is None:
            loop = asyncio.get_running_loop()
            awaited = loop.create_future()  # the first caller's answer, cancelled with it
            running = loop.create_task(
                self._run_call(
                    awaited, key, self._runner().run(job, fingerprint, label_obj, usage)
                ),
                name=f"agentq.call:{self._workflow_id}:{key}",
            )
            self._running[key] = running
            running.add_done_callback(functools.partial(self._ran, key))
        else:  # joins the call running
            if label_obj is not None:  # the store never sees this one
                json_object(label_obj, f"label of call {key!r}")
            awaited = asyncio.shield(running)
        try:
            return await awaited
        except asyncio.CancelledError:
            self._runner().cancel_unstarted(key)  # if it never reached the world
            raise

    def _fingerprint(self, job: Job) -> str:
        """The call's stored fingerprint; an explicit one of plain text (a str, or a tuple of
        str and None, as a `DurableAgent`'s model requests have) is taken once an attempt
        (its value alone decides it: ``fn`` is not read)."""
        explicit = job.fingerprint
        if type(explicit) is str or (
            type(explicit) is tuple
            and all(type(part) is str or part is None for part in explicit)
        ):
            known = self._explicit.get(explicit)
            if known is None:
                known = self._explicit[explicit] = stored_fingerprint(job.fn, explicit)
            return known
        return stored_fingerprint(job.fn, explicit)

    def _runner(self) -> CallRunner:
        """The attempt's `CallRunner`, built when it first runs a call (most run none)."""
        if self._calls is None:
            self._calls = CallRunner(
                store=self._store, queue=self._queue, clock=self._clock,
                workflow_id=self._workflow_id, execution=self._execution,
                record=self._rows.__setitem__,
            )
        return self._calls

    def _children(self) -> ChildRunner:
        """The attempt's `ChildRunner`, built at its first child run."""
        if self._child_runs is None:
            self._child_runs = ChildRunner(
                store=self._store, clock=self._clock, workflow_id=self._workflow_id,
                execution=self._execution, rows=self._loaded, park=self._park,
                spawner=self._spawner,
            )
        return self._child_runs

    async def _run_call(
        self, waiter: asyncio.Future[Any], key: str, run: Coroutine[Any, Any, Any]
    ) -> Any:
        """Run a call in its own task (a cancel of its step does not reach it) and answer
        its first caller through `waiter` once it is recorded.

        What `asyncio.shield` of the task would do, minus a future and a loop turn a call:
        the caller wakes as the call ends, not after the task's done callbacks. The key
        leaves `_running` first, so that a caller that goes on at once with the same key
        (after a failure: it runs again) starts a new call instead of joining this one.
        """
        try:
            output = await run
        except BaseException as exc:
            self._finished(key)
            if not waiter.done():  # else its caller was cancelled: `_ran` retrieves it
                if isinstance(exc, asyncio.CancelledError):
                    waiter.cancel()
                else:
                    waiter.set_exception(exc)
            raise
        self._finished(key)
        if not waiter.done():
            waiter.set_result(output)
        return output

    def _finished(self, key: str) -> None:
        if self._running.get(key) is asyncio.current_task():
            del self._running[key]

    def _ran(self, key: str, task: asyncio.Task[Any]) -> None:
        if self._running.get(key) is task:
            del self._running[key]
        if not task.cancelled():
            task.exception()  # raised to the awaiting body; never "never retrieved"

    def _check_same(self, row: CallRow, key: str, job: Job, fingerprint: str) -> None:
        if row.kind != "call":
            raise KeyConflictError(
                f"key {key!r} of workflow {self._workflow_id!r} names a wait_for_input, not "
                "a call: use another key for the call"
            )
        if not same_stored(row.fingerprint, job.fn, job.fingerprint, fingerprint):  # v1 too
            raise KeyConflictError(
                f"key {key!r} of workflow {self._workflow_id!r} was recorded for another call "
                "(its function or the values it uses differ): use a new key for a new call, "
                "or give both jobs the same fingerprint="
            )

    # ------------------------------------------------------------------ child runs

    async def child(self, definition: Definition | str, input: Any, key: str) -> Any:
        """Start (once) child run `key` and return its output; see `StepContext.child`."""
        self._check_open("child")
        return await self._children().child(definition, input, key)

    async def start_child(self, definition: Definition | str, input: Any, key: str) -> str:
        """Start (once) child run `key` without waiting; see `StepContext.start_child`."""
        self._check_open("start_child")
        return await self._children().start(definition, input, key)

    async def children(
        self, definition: Definition | str, inputs: Mapping[str, Any], limit: int | None
    ) -> dict[str, Any]:
        """Fan out child runs; see `StepContext.children`."""
        self._check_open("children")
        return await self._children().children(definition, inputs, limit)

    # ------------------------------------------------------------------ the attempt's end

    async def settle(self) -> None:
        """Wait until every call started in this attempt has been recorded (or refused)."""
        while self._running:
            await asyncio.wait(set(self._running.values()))
