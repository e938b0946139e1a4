"""The keyed waits of one step attempt and its one read of the log: `KeyedLog`.

A `KeyedLog` (the base of the attempt's `agentq.workflows.calls.CallLog`) reads the workflow's
recorded call and wait rows (`DurableStore.calls`) once, at the attempt's first call or wait,
and keeps them up to date with what the attempt records. Waits are rows of that table (kind
``wait``): `wait_for_input` returns the input a `resume` recorded for its key, raises
`InputTimeout` once the wait timed out, or else parks the step (`InputRequested`, which the
driver records with ``wait_step``). A `receive` is such a wait too, whose key is its place
among the step's receives of a topic and whose `InputRequested` names the topic: ``wait_step``
answers it at once from a message kept before, else a later send does
(`agentq.store.rules.messages`).

A durable sleep (`KeyedLog.sleep`) is a keyed wait too: the n-th sleep of the step has the key
``sleep:<n>`` and its wake time as deadline, so the deadline machinery (the store's
`time_out_wait`, `run`, `recover`, `serve`, the engine's timers) wakes it; its time-out means
"woke", and a replay after it returns at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn

from agentq.clock import Clock
from agentq.codec import copy_json
from agentq.errors import InputTimeout, KeyConflictError, StepContextError
from agentq.events import utc
from agentq.keys import validate_key
from agentq.store import RECEIVE_WAIT_PREFIX, CallRow, Execution
from agentq.workflows.calling import json_object
from agentq.workflows.model import WaitForInput
from agentq.workflows.parking import (
    MAX_WAIT_TIMEOUT,
    SLEEP_KEY_PREFIX,
    SLEEP_REASON_PREFIX,
    InputRequested,
    check_timeout,
)

__all__ = ["KeyedLog"]

_OPEN = object()
"""`KeyedLog._answer` of a wait that still waits."""


def _retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # raised to the callers awaiting it; never "never retrieved"


class KeyedLog:
    """One attempt's read of the recorded calls and waits, and its keyed waits.

    Args:
        clock: Time for deadlines and wake times.
        workflow_id: The workflow.
        execution: A callable returning the attempt's current `Execution` (renewed leases
            keep the fencing token).
        load: Reads the workflow's recorded calls and waits (``store.calls(workflow_id)``);
            awaited once, at the attempt's first call or wait.

    All methods run on the engine's event loop (the one running when it is built), from the
    step's own task or tasks it starts.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        workflow_id: str,
        execution: Callable[[], Execution],
        load: Callable[[], Awaitable[list[CallRow]]],
    ) -> None:
        self._clock = clock
        self._workflow_id = workflow_id
        self._rows: dict[str, CallRow] = {}  # filled by the one read, then kept up to date
        self._load = load
        self._execution = execution
        self._receives: dict[str, int] = {}  # receives asked per topic in this attempt
        self._read: asyncio.Task[None] | None = None
        self._ready = False
        self._closed = False
        self._loop = asyncio.get_running_loop()  # the engine's: a body on another cannot record
        self._sleeps = 0  # sleeps asked for in this attempt: the next one's key
        self.answered = 0
        """Calls and waits answered from the log in this attempt."""
        self.requested: list[InputRequested] = []
        """The waits this attempt asked for (not answered yet), in order: the attempt ends
        waiting on the first even if the body swallowed the signal and returned."""

    # ------------------------------------------------------------------ the one read

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

    async def _loaded(self) -> dict[str, CallRow]:
        if not self._ready:
            await self._read_once()
        return self._rows

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
        """The workflow's call and wait rows as this attempt knows them: its one read of the
        log (shared with its calls and waits, so asking costs no other read), kept up to date
        with what the attempt recorded since; see `StepContext.recorded`."""
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
            return copy_json(row.output)  # each answer its own (the caller may mutate it)
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

    def close(self) -> None:
        """End the attempt: later `call` and `wait` raise `StepContextError`."""
        self._closed = True
