"""agentq: run an AI agent's tool calls safely inside your own process.

- `Queue`: in-process asyncio job queue with idempotency keys, priority lanes with bounded
  capacity (backpressure) and their own concurrency permits.
- `WorkflowEngine`: ordered, durable, multi-step workflows with retries, timeouts and
  waiting for outside input, every transition an `Event` in an append-only log.
- `DurableStore`: `MemoryStore` (tests) and `SqliteStore` (one SQLite file; extra ``sqlite``).
- `agentq.frames` and `agentq.widgets`: pandas and ipywidgets views (extra ``notebook``).

``import agentq`` needs no third-party package.
"""

from agentq.clock import Clock, FakeClock, SystemClock
from agentq.codec import MAX_PAYLOAD_BYTES
from agentq.errors import (
    AgentqError,
    DeadlockError,
    EngineError,
    InvalidKeyError,
    JobFailed,
    JobLost,
    KeyConflictError,
    LeaseLostError,
    MissingExtraError,
    NotWaitingError,
    PayloadError,
    QueueClosed,
    QueueFull,
    SchemaError,
    StoreError,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowClosedError,
    WorkflowMismatchError,
    WrongLoopError,
)
from agentq.events import Event, EventKind
from agentq.keys import MAX_KEY_BYTES
from agentq.outcomes import (
    Completed,
    ErrorInfo,
    Failed,
    FailureReason,
    Outcome,
    Pending,
    Processing,
    State,
)
from agentq.queue import (
    Accepted,
    Cached,
    CloseReport,
    InFlight,
    Job,
    JobEvent,
    JobEventKind,
    JobHandle,
    LaneConfig,
    LaneStats,
    Priority,
    Queue,
    Queued,
    QueueStats,
)
from agentq.retry import Backoff, RetryPolicy
from agentq.store import (
    ClaimResult,
    DurableStore,
    Execution,
    MemoryStore,
    SqliteStore,
    StepRow,
    StepState,
    WorkflowRow,
    WorkflowState,
)
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
    "Accepted",
    "AgentqError",
    "Backoff",
    "Cached",
    "ClaimResult",
    "Clock",
    "CloseReport",
    "Completed",
    "DeadlockError",
    "DurableStore",
    "EngineError",
    "ErrorInfo",
    "Event",
    "EventKind",
    "Execution",
    "Failed",
    "FailureReason",
    "FakeClock",
    "InFlight",
    "InvalidKeyError",
    "Job",
    "JobEvent",
    "JobEventKind",
    "JobFailed",
    "JobHandle",
    "JobLost",
    "KeyConflictError",
    "LaneConfig",
    "LaneStats",
    "LeaseLostError",
    "MAX_KEY_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_REASON_CHARS",
    "MemoryStore",
    "MissingExtraError",
    "NonRetryable",
    "NotWaitingError",
    "Outcome",
    "PayloadError",
    "Pending",
    "Priority",
    "Processing",
    "Queue",
    "QueueClosed",
    "QueueFull",
    "QueueStats",
    "Queued",
    "RecoveryReport",
    "RetryPolicy",
    "RunResult",
    "RunStatus",
    "SchemaError",
    "SqliteStore",
    "State",
    "StepContext",
    "StepDef",
    "StepRow",
    "StepState",
    "StepStatus",
    "StoreError",
    "SystemClock",
    "UnknownStepError",
    "UnknownWorkflowError",
    "WaitForInput",
    "Workflow",
    "WorkflowClosedError",
    "WorkflowEngine",
    "WorkflowMismatchError",
    "WorkflowRow",
    "WorkflowState",
    "WrongLoopError",
    "recover",
]
