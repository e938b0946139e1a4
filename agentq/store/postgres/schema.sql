-- The agentq PostgreSQL schema, as a list of migrations.
--
-- Each "-- migration N" section takes a database from version N-1 to version N (the version
-- lives in the one row of agentq_schema). The tables live in their own PostgreSQL schema
-- (agentq by default: PostgresStore(schema=...)), which every connection puts first on its
-- search_path; so the names below are unqualified. Never edit a released section: append a
-- new one. Statements end with ";" at the end of a line.
--
-- Differences from the SQLite schema (schema.sql), each for a reason:
-- - Ids and keys (workflow ids, step names, worker ids, call and wait keys, lanes, job keys
--   and fingerprints) are BYTEA holding UTF-8: agentq keys may contain NUL, which a
--   PostgreSQL TEXT value cannot hold, and BYTEA compares byte-exactly (UTF-8 byte order is
--   code point order, as in SQLite and in Python), whatever the database's collation.
-- - JSON is TEXT, compact, exactly as agentq encoded it (JSONB would reorder object keys).
-- - seq is handed out by the one row of event_seq, updated in the appending transaction: the
--   row lock makes sequence numbers gapless and in commit order, so a reader that polls
--   "events after seq N" never misses one committed late (a SEQUENCE would allow both).

-- migration 1
CREATE TABLE agentq_schema (
    version     INTEGER NOT NULL
);
INSERT INTO agentq_schema (version) VALUES (0);

CREATE TABLE event_seq (
    last_seq    BIGINT  NOT NULL
);
INSERT INTO event_seq (last_seq) VALUES (0);

-- The append-only event log: one row per Event. data is the kind's JSON object.
CREATE TABLE events (
    seq         BIGINT  PRIMARY KEY,
    at          DOUBLE PRECISION NOT NULL,  -- Unix seconds (UTC)
    workflow_id BYTEA   NOT NULL,
    step_index  INTEGER,
    step_name   BYTEA,
    kind        TEXT    NOT NULL,
    attempt     INTEGER,
    worker_id   BYTEA,
    data        TEXT    NOT NULL            -- JSON object
);
CREATE INDEX events_by_workflow ON events (workflow_id, seq);

-- The log is append-only: refuse any UPDATE, DELETE or TRUNCATE of an event, whoever tries.
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'agentq: the events table is append-only';
END;
$$;
CREATE TRIGGER events_no_update BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_append_only();

-- Wake-ups: an event after which a serving engine may find work ready notifies the channel
-- "agentq.<schema>" (delivered at commit; repeats in one transaction are folded into one).
-- PostgresStore.wait_for_work LISTENs on it.
CREATE FUNCTION events_notify_work() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('agentq.' || TG_TABLE_SCHEMA, '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_wake_workers AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.kind IN ('WorkflowStarted', 'StepCompleted', 'RetryScheduled', 'StepResumed',
                       'WorkflowRetried', 'WorkerRecovered', 'WaitTimedOut'))
    EXECUTE FUNCTION events_notify_work();

-- The projection: one row per workflow (its updated_at and last_seq are read from its latest
-- event), locked FOR UPDATE by every write verb on the workflow ...
CREATE TABLE workflows (
    workflow_id BYTEA   PRIMARY KEY,
    started_seq BIGINT  NOT NULL UNIQUE,    -- seq of its WorkflowStarted: the start order
    state       TEXT    NOT NULL,
    step_names  TEXT    NOT NULL,           -- JSON list of str
    input       TEXT    NOT NULL,           -- JSON
    reason      TEXT,
    created_at  DOUBLE PRECISION NOT NULL,
    definition  BYTEA                       -- the WorkflowDef's name; NULL: a plain Workflow
);
CREATE INDEX workflows_by_state ON workflows (state, started_seq);
-- ready_workflows: the open workflows of some definitions, in start order.
CREATE INDEX workflows_by_definition ON workflows (definition, state, started_seq);

-- ... one row per step ...
CREATE TABLE steps (
    workflow_id      BYTEA   NOT NULL,
    step_index       INTEGER NOT NULL,
    step_name        BYTEA   NOT NULL,
    state            TEXT    NOT NULL,
    attempt          INTEGER NOT NULL,
    worker_id        BYTEA,
    lease_token      BIGINT  NOT NULL,
    lease_expires_at DOUBLE PRECISION,
    output           TEXT,                  -- JSON
    reason           TEXT,
    error            TEXT,                  -- JSON {type, message, traceback}
    resume_input     TEXT,                  -- JSON
    resumed          BOOLEAN NOT NULL,
    retry_at         DOUBLE PRECISION,
    started_at       DOUBLE PRECISION,
    finished_at      DOUBLE PRECISION,
    recoveries       INTEGER NOT NULL,
    wait_key         BYTEA,
    wait_details     TEXT,                  -- JSON object
    wait_deadline    DOUBLE PRECISION,
    PRIMARY KEY (workflow_id, step_index)
);
CREATE INDEX steps_by_lease_expiry ON steps (lease_expires_at) WHERE state = 'leased';

-- ... and one row per durable call or wait, by (workflow, key).
CREATE TABLE calls (
    first_seq   BIGINT  PRIMARY KEY,        -- seq of the key's first event
    workflow_id BYTEA   NOT NULL,
    call_key    BYTEA   NOT NULL,
    kind        TEXT    NOT NULL,           -- call | wait
    step_index  INTEGER NOT NULL,
    state       TEXT    NOT NULL,
    fingerprint BYTEA,
    lane        BYTEA,
    attempt     INTEGER NOT NULL,
    label       TEXT,                       -- JSON object
    usage       TEXT,                       -- JSON object
    output      TEXT,                       -- JSON
    reason      TEXT,
    error       TEXT,                       -- JSON {type, message, traceback}
    details     TEXT,                       -- JSON object
    deadline    DOUBLE PRECISION,
    started_at  DOUBLE PRECISION,
    finished_at DOUBLE PRECISION,
    duration    DOUBLE PRECISION,
    runs        INTEGER NOT NULL,
    last_seq    BIGINT  NOT NULL
);
CREATE UNIQUE INDEX calls_by_key ON calls (workflow_id, call_key);

-- Job outcomes of Queue(store=...): not part of the event log.
CREATE TABLE job_outcomes (
    key          BYTEA   PRIMARY KEY,
    fingerprint  BYTEA   NOT NULL,
    output       TEXT    NOT NULL,          -- JSON
    completed_at DOUBLE PRECISION NOT NULL,
    expires_at   DOUBLE PRECISION           -- NULL: never
);
CREATE INDEX job_outcomes_by_expiry ON job_outcomes (expires_at) WHERE expires_at IS NOT NULL;

-- migration 2
-- LeaseReleased (a lease a cancel revoked is handed back: its step may be claimed at once)
-- wakes serving engines too.
DROP TRIGGER events_wake_workers ON events;
CREATE TRIGGER events_wake_workers AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.kind IN ('WorkflowStarted', 'StepCompleted', 'RetryScheduled', 'StepResumed',
                       'WorkflowRetried', 'WorkerRecovered', 'WaitTimedOut', 'LeaseReleased'))
    EXECUTE FUNCTION events_notify_work();

-- migration 3
-- Reserved for the messages table while it was built apart; it came in migration 5: nothing here.

-- migration 4
-- Workflow deadlines (WorkflowDef(timeout=), engine.start(deadline=)): Unix seconds after which
-- the workflow fails with WorkflowTimedOut; NULL for none and in databases made before this
-- version (their logs hold no deadlines: nothing to rebuild).
ALTER TABLE workflows ADD COLUMN deadline DOUBLE PRECISION;

-- migration 5
-- Run groups (engine.group): a group's manifest, kept beside the log (its members are ordinary
-- workflows "<group_id>/<key>"); forget_group deletes both rows.
CREATE TABLE run_groups (
    group_id   BYTEA   PRIMARY KEY,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE run_group_items (
    group_id   BYTEA   NOT NULL,
    position   INTEGER NOT NULL,       -- the order submitted
    item_key   BYTEA   NOT NULL,
    definition TEXT    NOT NULL,       -- the member's WorkflowDef name (each key may have its own)
    input      TEXT    NOT NULL,       -- JSON
    PRIMARY KEY (group_id, position)
);

-- migration 6
-- Schedules (engine.schedule): one row per schedule, apart from the event log. A tick is fired
-- by a compare-and-swap on next_tick (the row locked FOR UPDATE) in the transaction that
-- starts the tick's instance.
CREATE TABLE schedules (
    name          BYTEA   PRIMARY KEY,
    definition    BYTEA   NOT NULL,         -- the WorkflowDef each tick starts
    cron          TEXT,                     -- a 5-field cron expression (UTC), or NULL ...
    every         DOUBLE PRECISION,         -- ... a period in seconds
    input         TEXT    NOT NULL,         -- JSON, every instance's input
    next_tick     DOUBLE PRECISION NOT NULL,
    updated_at    DOUBLE PRECISION NOT NULL,
    last_tick     DOUBLE PRECISION,
    last_instance BYTEA
);

-- migration 7
-- Retention (store.sweep): an ended workflow is deleted with its events. The log stays
-- append-only for every workflow still stored: an event is deleted only once its workflow's
-- row is gone (the sweep deletes the row first, in the same transaction). Sequence numbers
-- come from event_seq, so they are never handed out again. The function reads the workflows
-- of its own schema whatever the search_path of the deleting session (SET ... FROM CURRENT:
-- the migration's, which is agentq's schema).
CREATE OR REPLACE FUNCTION events_kept_while_stored() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM workflows WHERE workflow_id = OLD.workflow_id) THEN
        RAISE EXCEPTION 'agentq: the events table is append-only (events go only with their workflow)';
    END IF;
    RETURN OLD;
END;
$$;
DROP TRIGGER events_no_update ON events;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION events_append_only();
DROP TRIGGER IF EXISTS events_no_delete ON events;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_kept_while_stored();

-- migration 8
-- Shared rate windows (`Queue(store=...)` with `LaneConfig(rate=, tokens=)`): a lane's stored
-- pause (a Retry-After seen by any process; its row is also what a take locks), and one row a
-- job start charged to the lane's window (when, and its tokens: the estimate, then the usage
-- it reported). Rows older than the lane's longest window are deleted by the next take.
CREATE TABLE rate_lanes (
    lane         TEXT PRIMARY KEY,
    paused_until DOUBLE PRECISION NOT NULL
);
CREATE TABLE rate_charges (
    id     BIGSERIAL PRIMARY KEY,
    lane   TEXT             NOT NULL,
    at     DOUBLE PRECISION NOT NULL,
    tokens BIGINT           NOT NULL
);
CREATE INDEX rate_charges_by_lane ON rate_charges (lane, at);

-- migration 9
-- Messages to a workflow (engine.send, ctx.receive; an input given to resume before its wait):
-- one row per MessageSent, kept until the StepResumed that delivers it consumes it. Rebuildable
-- from the log like calls; empty in older databases, which have no MessageSent events. IF NOT
-- EXISTS: the table was once planned as an earlier migration.
CREATE TABLE IF NOT EXISTS messages (
    seq         BIGINT  PRIMARY KEY,        -- seq of its MessageSent: the order, oldest first
    workflow_id BYTEA   NOT NULL,
    topic       BYTEA,                      -- NULL: an input kept for the keyed wait msg_key
    msg_key     BYTEA,                      -- the sender's key, or NULL
    payload     TEXT    NOT NULL,           -- JSON
    sent_at     DOUBLE PRECISION NOT NULL,  -- Unix seconds
    consumed_by BYTEA,                      -- the wait key that took it; NULL while kept
    consumed_at DOUBLE PRECISION
);
-- A receive takes the oldest kept message of its topic; a key is used once per workflow.
CREATE INDEX IF NOT EXISTS messages_by_topic ON messages (workflow_id, topic, seq)
    WHERE consumed_by IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS messages_by_key
    ON messages (workflow_id, (topic IS NULL), msg_key)
    WHERE msg_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_by_workflow ON messages (workflow_id, seq);

-- migration 10
-- End-of-run hooks (WorkflowDef(on_end=), engine.on_end): the outbox, one row per workflow end,
-- written by the transaction that ends the workflow and marked delivered once the hooks
-- returned. Not a projection (delivery attempts are not events): a rebuild leaves it as it is.
-- Workflows that ended before this version have no row (their hooks are not called).
CREATE TABLE end_hooks (
    seq              BIGINT  PRIMARY KEY,        -- seq of the event that ended the workflow
    workflow_id      BYTEA   NOT NULL,
    definition       BYTEA,                      -- NULL: a plain Workflow
    state            TEXT    NOT NULL,           -- completed / failed / cancelled
    ended_at         DOUBLE PRECISION NOT NULL,  -- Unix seconds
    attempts         INTEGER NOT NULL,           -- deliveries claimed so far
    due_at           DOUBLE PRECISION NOT NULL,  -- the next delivery may start then
    worker_id        BYTEA,                      -- the engine that claimed it last
    lease_expires_at DOUBLE PRECISION,           -- its claim holds until then; NULL: unclaimed
    delivered_at     DOUBLE PRECISION,           -- NULL while pending
    error            TEXT                        -- what the last failed delivery raised
);
-- claim_hooks: the pending rows, by seq (delivered rows leave the index).
CREATE INDEX end_hooks_pending ON end_hooks (seq) WHERE delivered_at IS NULL;
CREATE INDEX end_hooks_by_workflow ON end_hooks (workflow_id, seq);
