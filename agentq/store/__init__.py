"""The durable store: the `DurableStore` protocol and its implementations.

The stores also implement `agentq.queue.JobOutcomeStore`, the three verbs (`load_job`,
`save_job`, `forget_job`) by which a `Queue(store=...)` keeps completed keys across restarts.

Other layers import only from here. Inside, each module has one job; read them in this order
(each imports only modules above it in the list, plus the foundation modules of `agentq`):

What a store hands out:
    ``rows``        `WorkflowRow`, `StepRow`, `CallRow`, their states and kinds, event
                    rows (`EVENT_COLUMNS`), and `shown_call` (how a wait of a closed
                    workflow is shown).
    ``claims``      `Execution` (a held lease), `execution_of` (the lease of a step row) and
                    the `ClaimResult` answers of a claim.
    ``ready``       `ReadyWork` (what a serving worker may take up now, `is_ready`) and the
                    optional wake-up hook `WorkNotifier`.
    ``protocol_calls``  `DurableCalls`: the durable-call verbs, inherited by `DurableStore`.
    ``protocol``    `DurableStore`: every verb, its atomicity and its errors.

The transition rules, shared by every store:
    ``checks``          argument checks run before anything is read or written.
    ``projection_calls``  `project_call`: the ``calls`` rows as a pure function of the log.
    ``projection``      `project` / `replay`: the rows as a pure function of the event log.
    ``tx``              `Tx` (what a rule needs from a transaction), `Draft`, `apply`.
    ``rules_workflow``  start a workflow, resume a waiting step, time a wait out, cancel,
                        retry.
    ``rules_lease``     claim a step, renew its lease, release an expired lease or a dead
                        worker's.
    ``rules_attempt``   complete, fail or wait: the end of an attempt, under fencing.
    ``rules_calls``     start, complete or fail a durable call, under fencing.

The stores:
    ``verbs``           `RuleStore`: every write verb once, over an abstract `_write`.
    ``detach``          `detached`: the copies `MemoryStore` hands out, sharing only
                        immutable values.
    ``memory``          `MemoryStore`: the reference store, in dicts; a test double.
    ``sqlite_rows``     SQLite column lists and decoding a result row.
    ``sqlite_tx``       the write lock, `SqliteTx` (the rules' `Tx`), a batch's transaction.
    ``sqlite_schema``   migrations from ``schema.sql``.
    ``sql_reads``       the read verbs as queries, for both SQL stores (`Dialect`).
    ``sql_verbs``       `SqlStore`: the read verbs of the SQL stores once, over `_read`.
    ``sqlite_jobs``     the ``job_outcomes`` table: the `JobOutcomeStore` verbs as SQL.
    ``sqlite_connection``  opening the aiosqlite connection; running a call on its thread.
    ``sqlite_batch``    `GroupCommit` (the queue of waiting verbs), `Batch` and `Op`: the verbs
                        of one group-commit transaction.
    ``sqlite``          `SqliteStore`: the connection and the verbs.
    ``postgres_schema``  PostgreSQL migrations from ``postgres_schema.sql``, under an
                        advisory lock.
    ``postgres_tx``     `PostgresTx` (the rules' `Tx`: the workflow row locked, the next
                        sequence number), rebuilding the projection.
    ``postgres_jobs``   the ``job_outcomes`` table in PostgreSQL.
    ``postgres_connection``  connecting, migrating, the pool, one transaction (retries).
    ``postgres_listen``  ``LISTEN`` for new work on a connection of its own.
    ``postgres``        `PostgresStore`: the pool, worker threads, dispatch, wake-ups.

Stores are passive: they are given
the time (``now``, Unix seconds), never sleep and never start tasks.
"""

from agentq.store.claims import (
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
from agentq.store.memory import MemoryStore
from agentq.store.postgres import PostgresStore
from agentq.store.projection_calls import project_call, touches_calls
from agentq.store.protocol import DurableStore
from agentq.store.ready import ReadyWork, WorkNotifier
from agentq.store.rows import (
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
from agentq.store.rules_lease import HANDED_BACK_REASON
from agentq.store.sqlite import SqliteStore

__all__ = [
    "EVENT_COLUMNS",
    "HANDED_BACK_REASON",
    "AlreadyCompleted",
    "AlreadyWaiting",
    "CallKind",
    "CallRow",
    "CallShown",
    "CallState",
    "ClaimResult",
    "Claimed",
    "DurableStore",
    "Execution",
    "HeldByOther",
    "MemoryStore",
    "NotBefore",
    "PostgresStore",
    "ReadyWork",
    "SqliteStore",
    "StepRow",
    "StepState",
    "WorkNotifier",
    "WorkflowClosed",
    "WorkflowRow",
    "WorkflowState",
    "execution_of",
    "project_call",
    "shown_call",
    "touches_calls",
]
