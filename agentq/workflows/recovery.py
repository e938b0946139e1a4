"""`recover`: finish the work a crashed worker left behind.

After a crash (or SIGKILL) a step stays leased by a worker that no longer exists, and
workflows stay ``running`` with nobody driving them. `recover`:

1. re-admits every step whose lease has expired (``now > expires_at``), recording
   `WorkerRecovered`; a live lease is never touched, not even at the same clock tick;
2. resumes, concurrently, every running workflow that this engine has registered and that
   no live lease holds (another worker is driving those);
3. reports the workflows it could not resume because their step bodies are not registered
   here: step bodies are code, not data, so a restarted program registers its workflows
   again before calling `recover`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from agentq.store import Execution, StepState, WorkflowState
from agentq.workflows.engine import WorkflowEngine
from agentq.workflows.model import RunResult

__all__ = ["RecoveryReport", "recover"]


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What `recover` did.

    Attributes:
        recovered: The expired leases that were re-admitted (one `WorkerRecovered` each).
        resumed: Result of each workflow this engine resumed, by workflow id.
        unregistered: Running workflows left alone because their steps are not registered
            with this engine.
        held_elsewhere: Running workflows left alone because another worker holds a live
            lease on one of their steps.
        errors: Exceptions raised while resuming a workflow, by workflow id (the other
            workflows were still resumed).
    """

    recovered: tuple[Execution, ...] = ()
    resumed: dict[str, RunResult] = field(default_factory=dict)
    unregistered: tuple[str, ...] = ()
    held_elsewhere: tuple[str, ...] = ()
    errors: dict[str, Exception] = field(default_factory=dict)


async def recover(engine: WorkflowEngine) -> RecoveryReport:
    """Re-admit expired leases and resume the interrupted workflows this engine knows.

    Safe to call at any time and from several processes at once: re-admission is a
    compare-and-swap, and each step is claimed by exactly one worker.

    Args:
        engine: The engine whose store is inspected and whose registered workflows resume.

    Returns:
        A `RecoveryReport`.

    Raises:
        TypeError: `engine` is not a `WorkflowEngine` (the message names the value).
        StoreError: The store failed.
    """
    if not isinstance(engine, WorkflowEngine):
        raise TypeError(f"recover() expects a WorkflowEngine, got {engine!r:.80}")
    store = engine.store
    now = engine.clock.time()
    recovered: list[Execution] = []
    for execution in await store.expired_leases(now):
        if await store.release_expired(execution, now):
            recovered.append(execution)

    now = engine.clock.time()
    live: set[str] = set()
    for row in await store.step_rows():
        if (
            row.state is StepState.LEASED
            and row.lease_expires_at is not None
            and now <= row.lease_expires_at
        ):
            live.add(row.workflow_id)

    to_resume: list[str] = []
    unregistered: list[str] = []
    held: list[str] = []
    for wf in await store.workflows(WorkflowState.RUNNING):
        wid = wf.workflow_id
        if engine.registered(wid) is None:
            unregistered.append(wid)
        elif wid in live and not engine.running(wid):
            held.append(wid)
        else:
            to_resume.append(wid)

    results = await asyncio.gather(
        *(engine.run(wid) for wid in to_resume), return_exceptions=True
    )
    resumed: dict[str, RunResult] = {}
    errors: dict[str, Exception] = {}
    for wid, result in zip(to_resume, results, strict=True):
        if isinstance(result, RunResult):
            resumed[wid] = result
        elif isinstance(result, Exception):
            errors[wid] = result
        else:
            raise result
    return RecoveryReport(
        tuple(recovered), resumed, tuple(unregistered), tuple(held), errors
    )
