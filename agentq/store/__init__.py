"""The durable store: the `DurableStore` protocol and its implementations."""

from agentq.store.base import (
    EVENT_COLUMNS,
    AlreadyCompleted,
    AlreadyWaiting,
    Claimed,
    ClaimResult,
    DurableStore,
    Execution,
    HeldByOther,
    StepRow,
    StepState,
    WorkflowClosed,
    WorkflowRow,
    WorkflowState,
)
from agentq.store.memory import MemoryStore
from agentq.store.sqlite import SqliteStore

__all__ = [
    "EVENT_COLUMNS",
    "AlreadyCompleted",
    "AlreadyWaiting",
    "ClaimResult",
    "Claimed",
    "DurableStore",
    "Execution",
    "HeldByOther",
    "MemoryStore",
    "SqliteStore",
    "StepRow",
    "StepState",
    "WorkflowClosed",
    "WorkflowRow",
    "WorkflowState",
]
