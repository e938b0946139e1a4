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

Waits are rows of the same table (kind ``wait``): `wait_for_input` returns the input a
`resume` recorded for its key, raises `InputTimeout` once the wait timed out, or else parks
the step (`InputRequested`, which the driver records with ``wait_step``). A `receive` is
such a wait too, whose key is its place among the step's receives of a topic and whose
`InputRequested` names the topic: ``wait_step`` answers it at once from a message kept
before, else a later send does (`agentq.store.rules.messages`).

A durable sleep (`CallLog.sleep`) is a keyed wait too: the n-th sleep of the step has the key
``sleep:<n>`` and its wake time as deadline, so the deadline machinery (the store's
`time_out_wait`, `run`, `recover`, `serve`, the engine's timers) wakes it; its time-out means
"woke", and a replay after it returns at once.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn

from agentq.clock import Clock
from agentq.errors import InputTimeout, KeyConflictError, StepContextError
from agentq.events import utc
from agentq.keys import validate_key
from agentq.queue import Job, Queue, same_stored, stored_fingerprint
from agentq.store import RECEIVE_WAIT_PREFIX, CallRow, DurableStore, Execution
from agentq.workflows.calling import CallRunner, Usage, call_queue_key, json_object
from agentq.workflows.children import ChildRunner, Spawner
from agentq.workflows.model import WaitForInput
from agentq.workflows.parking import (
    MAX_WAIT_TIMEOUT,
    SLEEP_KEY_PREFIX,
    SLEEP_REASON_PREFIX,
    InputRequested,
    check_timeout,
)
from agentq.workflows.recorder import Definition

__all__ = [  # the parking names are re-exported from `agentq.workflows.parking`
    "MAX_WAIT_TIMEOUT", "SLEEP_KEY_PREFIX", "SLEEP_REASON_PREFIX", "CallLog", "InputRequested",
    "Usage", "call_queue_key",
]

_OPEN = object()  # `CallLog._answer` of a wait that still waits

def _retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # raised to the callers awaiting it; never "never retrieved"


class CallLog:
    """The durable calls and waits of one step attempt (see the module docstring).

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
        self._store = store
        self._queue = queue
        self._clock = clock
        self._workflow_id = workflow_id
        self._rows: dict[str, CallRow] = {}  # filled by the one read, then kept up to date
        self._calls: CallRunner | None = None  # built at the attempt's first call to run
        self._spawner = spawner
        self._child_runs: ChildRunner | None = None  # built at its first child run
        self._load = load
        self._execution = execution
        self._receives: dict[str, int] = {}  # receives asked per topic in this attempt
        self._read: asyncio.Task[None] | None = None
        self._ready = False
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._closed = False
        self._loop = asyncio.get_running_loop()  # the engine's: a body on another cannot record
        self._sleeps = 0  # sleeps asked for in this attempt: the next one's key
        self.answered = 0
        """Calls answered from the log in this attempt."""
        self.requested: list[InputRequested] = []
        """The waits this attempt asked for (not answered yet), in order: the attempt ends
        waiting on the first even if the body swallowed the signal and returned."""

    # ------------------------------------------------------------------ calls

    async def call(self, job: Job, label: Mapping[str, Any] | None, usage: Usage) -> Any:
        """Run `job` once per key in this workflow; see `StepContext.call`."""
        self._check_open("call")
        if not isinstance(job, Job):
            raise TypeError(f"ctx.call expects an agentq.Job, got {job!r:.200}")
        label_obj = json_object(label, f"label of call {job.key!r}")
        if usage is not None and not callable(usage):
            usage = json_object(usage, f"usage of call {job.key!r}")
        key = job.key
        fingerprint = stored_fingerprint(job.fn, job.fingerprint)
        if not self._ready:
            await self._read_once()
        row = self._rows.get(key)
        if row is not None:
            self._check_same(row, key, job, fingerprint)
            if row.fingerprint is not None:
                fingerprint = row.fingerprint  # the same call: a rerun keeps the row's format
            if row.state == "completed":
                self.answered += 1
                return row.output
        running = self._running.get(key)
        if running is None:
            running = asyncio.get_running_loop().create_task(
                self._runner().run(job, fingerprint, label_obj, usage),
                name=f"agentq.call:{self._workflow_id}:{key}",
            )
            self._running[key] = running
            running.add_done_callback(functools.partial(self._ran, key))
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            self._runner().cancel_unstarted(key)  # if it never reached the world
            raise

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

    async def _read_once(self) -> None:
        """Read the recorded calls, once for the attempt (concurrent first calls share it)."""
        if self._read is None:
            self._read = asyncio.get_running_loop().create_task(self._fill())
            self._read.add_done_callback(_retrieved)
        await asyncio.shield(self._read)  # a cancelled caller leaves the read to the others

    async def _fill(self) -> None:
        for row in await self._load():
            self._rows.setdefault(row.key, row)
        self._ready = True

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

    # ------------------------------------------------------------------ waits

    async def wait(
        self,
        key: str,
        reason: object,
        details: Mapping[str, Any] | None,
        timeout: float | None,  # noqa: ASYNC109 (a durable deadline, stored)
    ) -> Any:
        """Return the input recorded for this wait, or park the step; see `wait_for_input`."""
        self._check_open("wait_for_input")
        validate_key(key, "wait key")
        text = WaitForInput(reason).reason  # the same text rules as a step-level wait
        details_obj = json_object(details, f"details of wait {key!r}")
        check_timeout(f"wait {key!r}", timeout)
        if not self._ready:
            await self._read_once()
        row = self._rows.get(key)
        if row is not None:
            if row.kind == "wait" and row.reason is not None and row.reason != text:
                raise KeyConflictError(
                    f"wait key {key!r} of workflow {self._workflow_id!r} was asked "
                    f"{row.reason!r:.200}, not {text!r:.200}: use a new key for a new question"
                )
            answer = self._answer(
                row, "wait_for_input: use another key for the wait",
                f"wait {key!r} of workflow {self._workflow_id!r} timed out: no input "
                "arrived before its deadline",
            )
            if answer is not _OPEN:
                return answer
        deadline = None if timeout is None else self._clock.time() + float(timeout)
        requested = InputRequested(text, key, details_obj, deadline)
        self.requested.append(requested)
        raise requested

    def now(self) -> float:
        """The engine's clock's time, Unix seconds (a sleep's wake time counts from it)."""
        return self._clock.time()

    async def recorded(self) -> list[CallRow]:
        """`StepContext.recorded`: the rows of the attempt's one read, kept up to date."""
        self._check_open("recorded")
        return list((await self._loaded()).values())

    async def sleep(self, wake_at: float) -> None:
        """Return once `wake_at` (Unix seconds) has passed, parking the step until then.

        See `StepContext.sleep_until`. The n-th sleep of the attempt is keyed ``sleep:<n>``;
        a recorded one that woke (timed out, or was resumed) returns at once, and one still
        waiting keeps its stored wake time. A wake time that has passed already returns at
        once and records nothing.
        """
        self._check_open("sleep")
        key = f"{SLEEP_KEY_PREFIX}{self._sleeps}"
        self._sleeps += 1
        if not self._ready:
            await self._read_once()
        row = self._rows.get(key)
        if row is not None:
            if row.kind != "wait" or not (row.reason or "").startswith(SLEEP_REASON_PREFIX):
                raise KeyConflictError(
                    f"key {key!r} of workflow {self._workflow_id!r} names a "
                    f"{'call' if row.kind == 'call' else 'wait_for_input'}, not a sleep: "
                    f"keys starting with {SLEEP_KEY_PREFIX!r} are kept for ctx.sleep"
                )
            if row.state in ("answered", "timed_out"):
                self.answered += 1
                return
            if row.deadline is not None:
                wake_at = row.deadline  # the wake time stored by the first run
        now = self._clock.time()
        if wake_at <= now:
            return
        if wake_at - now > MAX_WAIT_TIMEOUT:
            raise ValueError(
                f"sleep {key!r}: the wake time {wake_at!r} is more than {MAX_WAIT_TIMEOUT:.0f} "
                "seconds (10 years) away"
            )
        reason = SLEEP_REASON_PREFIX + utc(wake_at).isoformat(timespec="milliseconds")
        requested = InputRequested(reason, key, None, wake_at)
        self.requested.append(requested)
        raise requested

    def _park(self, reason: str, key: str, details: dict[str, Any]) -> NoReturn:
        requested = InputRequested(reason, key, details, None)
        self.requested.append(requested)
        raise requested

    # ------------------------------------------------------------------ child runs

    async def _loaded(self) -> dict[str, CallRow]:
        if not self._ready:
            await self._read_once()
        return self._rows

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

    async def receive(self, topic: str, timeout: float | None) -> Any:  # noqa: ASYNC109
        """Return the next message on `topic`, or park the step; see `StepContext.receive`.

        The n-th receive of `topic` in a step (counted from 0 in each attempt, which replays
        the body from its start) is the keyed wait ``receive:<step index>:<topic>:<n>``: a
        message it took is its answer in the log, so a replay returns the same message.
        """
        self._check_open("receive")
        topic = validate_key(topic, "topic")
        check_timeout(f"receive on topic {topic!r}", timeout)
        n = self._receives.get(topic, 0)
        self._receives[topic] = n + 1
        key = validate_key(
            f"{RECEIVE_WAIT_PREFIX}{self._execution().step_index}:{topic}:{n}", "receive key"
        )
        if not self._ready:
            await self._read_once()
        row = self._rows.get(key)
        if row is not None:
            answer = self._answer(
                row, "receive: use another key for the call",
                f"receive on topic {topic!r} of workflow {self._workflow_id!r} timed "
                "out: no message arrived before its deadline",
            )
            if answer is not _OPEN:
                return answer
        deadline = None if timeout is None else self._clock.time() + float(timeout)
        reason = WaitForInput(f"waiting for a message on {topic}").reason
        requested = InputRequested(reason, key, None, deadline, topic)
        self.requested.append(requested)
        raise requested

    def _answer(self, row: CallRow, not_a_call: str, timed_out: str) -> Any:
        """What the recorded wait `row` (of a wait_for_input or a receive) answers: its
        input, or `_OPEN` while it waits. Raises `KeyConflictError` when the key names a
        call (`not_a_call` ends the message), `InputTimeout` (`timed_out`) when it timed out."""
        if row.kind != "wait":
            raise KeyConflictError(
                f"key {row.key!r} of workflow {self._workflow_id!r} names a call, not a "
                f"{not_a_call}"
            )
        if row.state == "answered":
            self.answered += 1
            return row.output
        if row.state == "timed_out":
            raise InputTimeout(row.key, timed_out)
        return _OPEN

    # ------------------------------------------------------------------ the attempt's end

    def _check_open(self, verb: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not self._loop:
            # A plain-def body runs in a worker thread: an asyncio.run() there makes another
            # loop, where the engine's queue and store cannot be used. Refused before
            # anything is recorded.
            raise StepContextError(
                f"ctx.{verb} of workflow {self._workflow_id!r} was awaited on another event "
                "loop than the engine's (a plain def step driving it with asyncio.run()?): "
                "durable calls and waits need an async def step body; nothing was recorded"
            )
        if self._closed:
            raise StepContextError(
                f"ctx.{verb} of workflow {self._workflow_id!r} was used after its step "
                "attempt ended: call it only while the step body runs (a ctx kept or shared "
                "with a task that outlives the step cannot record)"
            )

    async def settle(self) -> None:
        """Wait until every call started in this attempt has been recorded (or refused)."""
        while self._running:
            await asyncio.wait(set(self._running.values()))

    def close(self) -> None:
        """End the attempt: later `call` and `wait` raise `StepContextError`."""
        self._closed = True
