-- The agentq SQLite schema, as a list of migrations.
--
-- Each "-- migration N" section takes a file from version N-1 to version N (the version lives
-- in PRAGMA user_version). A new file gets every section in order; an older file gets the
-- sections after its version, all in one transaction. Never edit a released section: append a
-- new one. The projection tables (workflows, steps, calls) can always be recomputed from the
-- events log, so a migration that reshapes them may drop and recreate them and then rebuild.

-- migration 1
-- The append-only event log: one row per Event. data is the kind's JSON object.
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY,    -- the sequence number: rowid, never reused
    at          REAL    NOT NULL,       -- Unix seconds (UTC)
    workflow_id TEXT    NOT NULL,
    step_index  INTEGER,
    step_name   TEXT,
    kind        TEXT    NOT NULL,
    attempt     INTEGER,
    worker_id   TEXT,
    data        TEXT    NOT NULL        -- JSON object
);
CREATE INDEX events_by_workflow ON events (workflow_id, seq);

-- The projection: one row per workflow (its updated_at and last_seq are read from its latest
-- event, so that only a change of state rewrites the row) ...
CREATE TABLE workflows (
    workflow_id TEXT    PRIMARY KEY,
    started_seq INTEGER NOT NULL,       -- seq of its WorkflowStarted: the start order
    state       TEXT    NOT NULL,
    step_names  TEXT    NOT NULL,       -- JSON list of str
    input       TEXT    NOT NULL,       -- JSON
    reason      TEXT,
    created_at  REAL    NOT NULL
) WITHOUT ROWID;
CREATE INDEX workflows_by_state ON workflows (state, started_seq);

-- ... and one row per step.
CREATE TABLE steps (
    workflow_id      TEXT    NOT NULL,
    step_index       INTEGER NOT NULL,
    step_name        TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    attempt          INTEGER NOT NULL,
    worker_id        TEXT,
    lease_token      INTEGER NOT NULL,
    lease_expires_at REAL,
    output           TEXT,              -- JSON
    reason           TEXT,
    error            TEXT,              -- JSON {type, message, traceback}
    resume_input     TEXT,              -- JSON
    resumed          INTEGER NOT NULL,
    retry_at         REAL,
    started_at       REAL,
    finished_at      REAL,
    PRIMARY KEY (workflow_id, step_index)
) WITHOUT ROWID;

-- migration 2
-- The log is append-only: refuse any UPDATE or DELETE of an event, whoever tries.
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'agentq: the events table is append-only');
END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'agentq: the events table is append-only');
END;
-- expired_leases reads only leased steps, by expiry.
CREATE INDEX steps_by_lease_expiry ON steps (lease_expires_at) WHERE state = 'leased';
-- workflows() and step_rows() list workflows in start order.
CREATE UNIQUE INDEX workflows_by_start ON workflows (started_seq);

-- migration 3
-- Crashes get their own budget: recoveries counts a step's attempts lost to crashes (one per
-- WorkerRecovered event), and a lost attempt no longer counts toward max_attempts. Both follow
-- from the log, so the projection is rebuilt from it once the column is there.
ALTER TABLE steps ADD COLUMN recoveries INTEGER NOT NULL DEFAULT 0;
-- agentq: rebuild projection

-- migration 4
-- Job outcomes of Queue(store=...): the output of each completed idempotency key, with the
-- fingerprint of the call that completed it. Not part of the event log (a job outcome
-- belongs to a queue, not to a workflow); rows are deleted by forget_job and, once expired,
-- by the next save_job.
CREATE TABLE job_outcomes (
    key          TEXT    PRIMARY KEY,   -- the idempotency key, compared byte-exactly
    fingerprint  TEXT    NOT NULL,      -- opaque text from the queue: equal means same call
    output       TEXT    NOT NULL,      -- JSON
    completed_at REAL    NOT NULL,      -- Unix seconds (UTC)
    expires_at   REAL                   -- Unix seconds; NULL: never
);
-- save_job deletes the expired rows by expiry.
CREATE INDEX job_outcomes_by_expiry ON job_outcomes (expires_at) WHERE expires_at IS NOT NULL;

-- migration 5
-- Durable calls and waits (ctx.call, ctx.wait_for_input). A step's keyed wait: its key,
-- details (JSON object) and deadline (Unix seconds), while it waits; NULL for the step-level
-- wait and in files written before this version, whose waits all are step-level.
ALTER TABLE steps ADD COLUMN wait_key TEXT;
ALTER TABLE steps ADD COLUMN wait_details TEXT;
ALTER TABLE steps ADD COLUMN wait_deadline REAL;
-- The calls projection: one row per (workflow, key), a call or a wait. Rebuildable from the
-- log like steps; empty in older files, which have no call events. The rowid is the seq of
-- the key's first event, so a workflow's rows are read in that order from calls_by_workflow.
CREATE TABLE calls (
    first_seq   INTEGER PRIMARY KEY,    -- seq of the key's first event
    workflow_id TEXT    NOT NULL,
    call_key    TEXT    NOT NULL,
    kind        TEXT    NOT NULL,       -- call | wait
    step_index  INTEGER NOT NULL,
    state       TEXT    NOT NULL,       -- started completed failed | waiting answered timed_out
    fingerprint TEXT,
    lane        TEXT,
    attempt     INTEGER NOT NULL,
    label       TEXT,                   -- JSON object
    usage       TEXT,                   -- JSON object
    output      TEXT,                   -- JSON (a wait: the input that answered it)
    reason      TEXT,
    error       TEXT,                   -- JSON {type, message, traceback}
    details     TEXT,                   -- JSON object
    deadline    REAL,
    started_at  REAL,
    finished_at REAL,
    duration    REAL,
    runs        INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL
);
CREATE UNIQUE INDEX calls_by_key ON calls (workflow_id, call_key);
CREATE INDEX calls_by_workflow ON calls (workflow_id);

-- migration 6
-- Workflow definitions (WorkflowDef): the name of the definition a workflow was made from, so
-- that any engine that registered that definition can run it; NULL for a plain Workflow and
-- in files written before this version (their logs have no definitions: nothing to rebuild).
ALTER TABLE workflows ADD COLUMN definition TEXT;
-- ready_workflows: the open workflows of some definitions, in start order (a serving engine's
-- poll reads only these rows, then each one's current step by the steps' primary key).
CREATE INDEX workflows_by_definition ON workflows (definition, state, started_seq);

-- migration 7
-- Reserved for the messages table while it was built apart; it came in migration 9: nothing here.

-- migration 8
-- Workflow deadlines (WorkflowDef(timeout=), engine.start(deadline=)): Unix seconds after which
-- the workflow fails with WorkflowTimedOut; NULL for none and in files written before this
-- version (their logs hold no deadlines: nothing to rebuild).
ALTER TABLE workflows ADD COLUMN deadline REAL;

-- migration 9
-- Run groups (engine.group): a group's manifest, kept beside the log (its members are ordinary
-- workflows "<group_id>/<key>"); forget_group deletes both rows.
CREATE TABLE run_groups (
    group_id   TEXT    PRIMARY KEY,
    created_at REAL    NOT NULL
) WITHOUT ROWID;
CREATE TABLE run_group_items (
    group_id   TEXT    NOT NULL,
    position   INTEGER NOT NULL,       -- the order submitted
    item_key   TEXT    NOT NULL,
    definition TEXT    NOT NULL,       -- the member's WorkflowDef name (each key may have its own)
    input      TEXT    NOT NULL,       -- JSON
    PRIMARY KEY (group_id, position)
) WITHOUT ROWID;

-- migration 10
-- Schedules (engine.schedule): one row per schedule, apart from the event log. A tick is fired
-- by a compare-and-swap on next_tick in the transaction that starts the tick's instance.
CREATE TABLE schedules (
    name          TEXT    PRIMARY KEY,
    definition    TEXT    NOT NULL,     -- the WorkflowDef each tick starts
    cron          TEXT,                 -- a 5-field cron expression (UTC), or NULL ...
    every         REAL,                 -- ... a period in seconds
    input         TEXT    NOT NULL,     -- JSON, every instance's input
    next_tick     REAL    NOT NULL,     -- Unix seconds
    updated_at    REAL    NOT NULL,     -- Unix seconds: made or last replaced
    last_tick     REAL,
    last_instance TEXT                  -- the workflow id of the last tick's instance
) WITHOUT ROWID;

-- migration 11
-- Retention (store.sweep): an ended workflow is deleted with its events. The log stays
-- append-only for every workflow still stored: an event is deleted only once its workflow's
-- row is gone (the sweep deletes the row first, in the same transaction). Sequence numbers
-- stay never reused, even once a sweep deleted the latest events: the log is made
-- AUTOINCREMENT (copied once into a new table; sqlite_sequence keeps the highest seq handed
-- out, which last_seq reads).
CREATE TABLE events_autoincrement (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    at          REAL    NOT NULL,
    workflow_id TEXT    NOT NULL,
    step_index  INTEGER,
    step_name   TEXT,
    kind        TEXT    NOT NULL,
    attempt     INTEGER,
    worker_id   TEXT,
    data        TEXT    NOT NULL
);
INSERT INTO events_autoincrement (seq, at, workflow_id, step_index, step_name, kind, attempt,
    worker_id, data)
SELECT seq, at, workflow_id, step_index, step_name, kind, attempt, worker_id, data FROM events
ORDER BY seq;
DROP TABLE events;
ALTER TABLE events_autoincrement RENAME TO events;
CREATE INDEX events_by_workflow ON events (workflow_id, seq);
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'agentq: the events table is append-only');
END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN EXISTS (SELECT 1 FROM workflows WHERE workflow_id = OLD.workflow_id)
BEGIN
    SELECT RAISE(ABORT, 'agentq: the events table is append-only (events go only with their workflow)');
END;

-- migration 12
-- Shared rate windows (`Queue(store=...)` with `LaneConfig(rate=, tokens=)`): a lane's stored
-- pause (a Retry-After seen by any process), and one row a job start charged to the lane's
-- window (when, and its tokens: the estimate, then the usage it reported). Rows older than
-- the lane's longest window are deleted by the next take. Not part of the event log.
CREATE TABLE rate_lanes (
    lane         TEXT PRIMARY KEY,
    paused_until REAL NOT NULL
);
CREATE TABLE rate_charges (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    lane   TEXT    NOT NULL,
    at     REAL    NOT NULL,
    tokens INTEGER NOT NULL
);
CREATE INDEX rate_charges_by_lane ON rate_charges (lane, at);

-- migration 13
-- Messages to a workflow (engine.send, ctx.receive; an input given to resume before its wait):
-- one row per MessageSent, kept until the StepResumed that delivers it consumes it. Rebuildable
-- from the log like calls; empty in older files, which have no MessageSent events. IF NOT
-- EXISTS: the table was once planned as an earlier migration.
CREATE TABLE IF NOT EXISTS messages (
    seq         INTEGER PRIMARY KEY,    -- seq of its MessageSent: the order, oldest first
    workflow_id TEXT    NOT NULL,
    topic       TEXT,                   -- NULL: an input kept for the keyed wait msg_key
    msg_key     TEXT,                   -- the sender's key, or NULL
    payload     TEXT    NOT NULL,       -- JSON
    sent_at     REAL    NOT NULL,       -- Unix seconds
    consumed_by TEXT,                   -- the wait key that took it; NULL while kept
    consumed_at REAL
);
-- A receive takes the oldest kept message of its topic; a key is used once per workflow.
CREATE INDEX IF NOT EXISTS messages_by_topic ON messages (workflow_id, topic, seq)
    WHERE consumed_by IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS messages_by_key
    ON messages (workflow_id, topic IS NULL, msg_key)
    WHERE msg_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_by_workflow ON messages (workflow_id, seq);

-- migration 14
-- End-of-run hooks (WorkflowDef(on_end=), engine.on_end): the outbox, one row per workflow end,
-- written by the transaction that ends the workflow and marked delivered once the hooks
-- returned. Not a projection (delivery attempts are not events): a rebuild leaves it as it is.
-- Workflows that ended before this version have no row (their hooks are not called).
CREATE TABLE end_hooks (
    seq              INTEGER PRIMARY KEY,  -- seq of the event that ended the workflow
    workflow_id      TEXT    NOT NULL,
    definition       TEXT,                 -- NULL: a plain Workflow
    state            TEXT    NOT NULL,     -- completed / failed / cancelled
    ended_at         REAL    NOT NULL,     -- Unix seconds
    attempts         INTEGER NOT NULL,     -- deliveries claimed so far
    due_at           REAL    NOT NULL,     -- the next delivery may start then
    worker_id        TEXT,                 -- the engine that claimed it last
    lease_expires_at REAL,                 -- its claim holds until then; NULL: not claimed
    delivered_at     REAL,                 -- NULL while pending
    error            TEXT                  -- what the last failed delivery raised
);
-- claim_hooks: the pending rows, by seq (delivered rows leave the index).
CREATE INDEX end_hooks_pending ON end_hooks (seq) WHERE delivered_at IS NULL;
CREATE INDEX end_hooks_by_workflow ON end_hooks (workflow_id, seq);

-- migration 15
-- The calls projection keyed by (workflow_id, call_key), WITHOUT ROWID: a call verb finds its
-- row in one b-tree seek and a new key writes one b-tree, where the rowid table (keyed by
-- first_seq) and its two indexes were three (two WAL frames more a start_call, issue 25).
-- first_seq stays a column, unique as the seq of the key's first event: DurableStore.calls
-- orders by it (a workflow's few rows sorted, not read in index order). Copied as it is: the
-- rows do not change.
CREATE TABLE calls_by_key_table (
    first_seq   INTEGER NOT NULL,       -- seq of the key's first event
    workflow_id TEXT    NOT NULL,
    call_key    TEXT    NOT NULL,
    kind        TEXT    NOT NULL,       -- call | wait
    step_index  INTEGER NOT NULL,
    state       TEXT    NOT NULL,       -- started completed failed | waiting answered timed_out
    fingerprint TEXT,
    lane        TEXT,
    attempt     INTEGER NOT NULL,
    label       TEXT,                   -- JSON object
    usage       TEXT,                   -- JSON object
    output      TEXT,                   -- JSON (a wait: the input that answered it)
    reason      TEXT,
    error       TEXT,                   -- JSON {type, message, traceback}
    details     TEXT,                   -- JSON object
    deadline    REAL,
    started_at  REAL,
    finished_at REAL,
    duration    REAL,
    runs        INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    PRIMARY KEY (workflow_id, call_key)
) WITHOUT ROWID;
INSERT INTO calls_by_key_table (first_seq, workflow_id, call_key, kind, step_index, state,
    fingerprint, lane, attempt, label, usage, output, reason, error, details, deadline,
    started_at, finished_at, duration, runs, last_seq)
SELECT first_seq, workflow_id, call_key, kind, step_index, state, fingerprint, lane, attempt,
    label, usage, output, reason, error, details, deadline, started_at, finished_at, duration,
    runs, last_seq FROM calls;
DROP TABLE calls;
ALTER TABLE calls_by_key_table RENAME TO calls;
