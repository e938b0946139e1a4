"""Durable workflows: ordered steps, each attempt a job in the queue, every transition stored.

What is inside, in reading order (each module imports only the ones above it, the foundation
modules, `agentq.queue` and `agentq.store`; nothing here imports the notebook layer):

==============  ===============================================================================
``model``       `Workflow`, `StepDef`, `StepContext`, and what a run reports: `StepStatus`,
                `RunStatus`, `RunResult` (the signals `WaitForInput` and `NonRetryable` are
                `agentq.errors`', re-exported)
``waits``       the waits of a run (backoff, poll, an interrupted body) that a cancel wakes
``attempts``    one step attempt: the job body, its queue key and name, the lease (renewed,
                handed back once the body stopped), the cancel-safe claim, the markers the
                driver acts on
``registry``    the workflows an engine knows by id, and the checks on registering one again
``results``     stored rows read back as a `StepStatus` or a `RunResult`; what the store says
                to `run` and `resume` of an ended workflow that is no longer registered
``driver``      the loop that runs one workflow's steps: claim, attempt, record; the
                engine's settings
``engine``      `WorkflowEngine`: run, resume, cancel, status, close, unregister; one run
                per workflow
``recovery``    `recover` and its `RecoveryReport`: finish what a crashed worker left
==============  ===============================================================================
"""

from agentq.workflows.engine import WorkflowEngine
from agentq.workflows.model import (
    MAX_REASON_CHARS,
    NonRetryable,
    RunResult,
    RunStatus,
    StepContext,
    StepDef,
    StepStatus,
    WaitForInput,
    Workflow,
)
from agentq.workflows.recovery import RecoveryReport, recover

__all__ = [
    "MAX_REASON_CHARS",
    "NonRetryable",
    "RecoveryReport",
    "RunResult",
    "RunStatus",
    "StepContext",
    "StepDef",
    "StepStatus",
    "WaitForInput",
    "Workflow",
    "WorkflowEngine",
    "recover",
]
