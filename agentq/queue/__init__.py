"""The in-process queue: idempotency keys, priority lanes, backpressure, permits."""

from agentq.queue.jobs import (
    Accepted,
    Cached,
    InFlight,
    Job,
    JobEvent,
    JobEventKind,
    JobHandle,
    Queued,
)
from agentq.queue.lanes import LANE_ORDER, LaneConfig, LaneStats, Priority, QueueStats
from agentq.queue.queue import CloseReport, Queue

__all__ = [
    "LANE_ORDER",
    "Accepted",
    "Cached",
    "CloseReport",
    "InFlight",
    "Job",
    "JobEvent",
    "JobEventKind",
    "JobHandle",
    "LaneConfig",
    "LaneStats",
    "Priority",
    "Queue",
    "QueueStats",
    "Queued",
]
