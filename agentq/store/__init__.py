"""The durable store: the `DurableStore` protocol and its implementations.

The stores also implement `agentq.queue.JobOutcomeStore`, the three verbs (`load_job`,
`save_job`, `forget_job`) by which a `Queue(store=...)` keeps completed keys across restarts.
Stores are passive: they are given the time (``now``, Unix seconds), never sleep and never
start tasks.

Other layers import only from here. Inside, the store is six rooms (sub-packages); each
imports only the rooms above it in this list, and a backend (``memory``, ``sqlite``,
``postgres``) never imports another backend. Each room's ``__init__`` lists its modules in
reading order:

    ``contract``    what a store is asked and hands out: the rows, claims and ready work,
                    the argument checks, and the `DurableStore` protocol (its reads, its
                    durable calls, its writes).
    ``rules``       the transition rules shared by every store, the projection (rows as a
                    fold of the event log), `Tx` / `Draft` / `apply`, and `RuleStore`: the
                    write verbs once, over any transaction.
    ``sql``         what both SQL stores share: row decoding, the read queries (`Dialect`),
                    `SqlStore`: the read verbs once.
    ``memory``      `MemoryStore`, the reference store in dicts.
    ``sqlite``      `SqliteStore`: one file, group commit; its ``schema.sql``.
    ``postgres``    `PostgresStore`: a pool on worker threads, ``LISTEN``; its
                    ``schema.sql``.
"""

from agentq.store.contract.children import (
    CHILD_WAIT_PREFIX,
    RECEIVE_WAIT_PREFIX,
    SLEEP_WAIT_PREFIX,
    ChildStart,
    child_of,
    child_workflow_id,
    closed_with_parent,
    engine_wait,
    parent_of,
    waited_child,
)
from agentq.store.contract.claims import (
    AlreadyCompleted,
    AlreadyWaiting,
    Claimed,
    ClaimResult,
    Execution,
    HeldByOther,
    NotBefore,
    WorkflowClosed,
    execution_of,
)
from agentq.store.contract.groups import (
    DurableGroups,
    GroupManifest,
    member_id,
    summed_usage,
)
from agentq.store.contract.hooks import MAX_HOOK_ERROR_CHARS, HookRow
from agentq.store.contract.protocol import DurableStore
from agentq.store.contract.ready import ReadyWork, WorkNotifier
from agentq.store.contract.rows import (
    EVENT_COLUMNS,
    CallKind,
    CallRow,
    CallShown,
    CallState,
    StepRow,
    StepState,
    WorkflowRow,
    WorkflowState,
    shown_call,
)
from agentq.store.contract.schedules import ScheduleRow, instance_id
from agentq.store.contract.schedules import check_name as check_schedule_name
from agentq.store.contract.sweep import SweepReport
from agentq.store.memory.store import MemoryStore
from agentq.store.postgres.store import PostgresStore
from agentq.store.rules.lease import CANCEL_HANDED_BACK_REASON, HANDED_BACK_REASON
from agentq.store.rules.projection import replay
from agentq.store.rules.projection_calls import project_call, touches_calls
from agentq.store.sqlite.store import SqliteStore

__all__ = [
    "CANCEL_HANDED_BACK_REASON",
    "CHILD_WAIT_PREFIX",
    "EVENT_COLUMNS",
    "HANDED_BACK_REASON",
    "MAX_HOOK_ERROR_CHARS",
    "AlreadyCompleted",
    "AlreadyWaiting",
    "CallKind",
    "CallRow",
    "CallShown",
    "CallState",
    "ChildStart",
    "ClaimResult",
    "Claimed",
    "DurableGroups",
    "DurableStore",
    "Execution",
    "GroupManifest",
    "HeldByOther",
    "HookRow",
    "MemoryStore",
    "NotBefore",
    "PostgresStore",
    "ReadyWork",
    "ScheduleRow",
    "SqliteStore",
    "StepRow",
    "StepState",
    "SweepReport",
    "WorkNotifier",
    "WorkflowClosed",
    "WorkflowRow",
    "WorkflowState",
    "check_schedule_name",
    "child_of",
    "child_workflow_id",
    "closed_with_parent",
    "execution_of",
    "member_id",
    "instance_id",
    "parent_of",
    "project_call",
    "replay",
    "shown_call",
    "summed_usage",
    "touches_calls",
    "waited_child",
    "RECEIVE_WAIT_PREFIX",
    "SLEEP_WAIT_PREFIX",
    "engine_wait",
]
