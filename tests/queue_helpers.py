"""Helpers shared by the queue tests: controllable job bodies and an event recorder."""

from __future__ import annotations

import asyncio
from typing import Any

from agentq.queue.jobs import TERMINAL_KINDS, JobEvent, JobEventKind
from agentq.queue.queue import Queue

BOUND = 5.0
"""Upper bound, in real seconds, of any wait in these tests (they never sleep to wait)."""


class Gate:
    """An async job body that runs until released; counts calls and concurrent runs."""

    def __init__(self, output: Any = "done") -> None:
        self.output = output
        self.calls = 0
        self.running = 0
        self.peak = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self) -> Any:
        self.calls += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.started.set()
        try:
            await self.release.wait()
            return self.output
        finally:
            self.running -= 1


class Recorder:
    """Records every `JobEvent` of a queue."""

    def __init__(self, queue: Queue) -> None:
        self.events: list[JobEvent] = []
        self.unsubscribe = queue.subscribe(self.events.append)

    def kinds(self, key: str) -> list[JobEventKind]:
        return [e.kind for e in self.events if e.key == key]

    def terminal(self, key: str) -> list[JobEvent]:
        return [e for e in self.events if e.key == key and e.kind in TERMINAL_KINDS]


async def settle(rounds: int = 20) -> None:
    """Let ready tasks run for a few loop iterations (no time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def until(predicate: Any, rounds: int = 10_000) -> None:
    """Yield to the loop until `predicate()` holds (bounded; fails the test otherwise)."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def send_mail(marks: str, to: str) -> dict[str, str]:
    """A tool whose side effect other processes can see: appends `to` to the `marks` file.

    A plain function (it runs in a thread), importable by the same module name from every
    process, so that its fingerprint is the same everywhere.
    """
    with open(marks, "a", encoding="utf-8") as f:
        f.write(f"{to}\n")
    return {"sent_to": to}
