"""A file written by a release of schema version 2 opens, migrates, keeps working.

``data/schema-v2.db`` was written by agentq at schema version 2 (see
``data/make_schema_v2.py``): a completed workflow, one waiting for input, one whose worker
died holding a lease, one waiting out a retry, one pending and one cancelled. Opening it runs
migrations 3 (``steps.recoveries``, and a projection rebuilt from the log), 4
(``job_outcomes``), 5 (durable calls: ``calls`` and the steps' ``wait_*`` columns) and 6
(``workflows.definition``).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from agentq.errors import KeyConflictError
from agentq.events import EventKind
from agentq.store import (
    CallState,
    Claimed,
    SqliteStore,
    StepState,
    WorkflowState,
)
from agentq.store.rules.projection import replay
from agentq.store.sqlite.schema import SCHEMA_VERSION, migrations

pytestmark = pytest.mark.timeout(30)

T0 = 1_767_225_600.0
DATA = Path(__file__).with_name("data") / "schema-v2.db"


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    path = tmp_path / "old.db"
    shutil.copyfile(DATA, path)
    return path


def version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def shape(path: Path) -> tuple[set[str], set[str]]:
    """The file's tables and indexes, and the columns of its steps table."""
    conn = sqlite3.connect(path)
    try:
        names = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'index')"
                " AND name NOT LIKE 'sqlite_%'"
            )
        }
        columns = {r[1] for r in conn.execute("PRAGMA table_info(steps)")}
    finally:
        conn.close()
    return names, columns


LATER_TABLES = {  # what migrations 3, 4, 5 and the messages migration create (the calls'
    # two indexes of migration 5 became the key of the table: test_migration_calls_key.py)
    "job_outcomes", "job_outcomes_by_expiry", "calls",
    "messages", "messages_by_topic", "messages_by_key", "messages_by_workflow"}
LATER_COLUMNS = {"recoveries", "wait_key", "wait_details", "wait_deadline"}


async def test_the_fixture_is_a_version_2_file(old_file: Path) -> None:
    assert version(old_file) == 2 < SCHEMA_VERSION == len(migrations())
    names, columns = shape(old_file)
    assert not names & LATER_TABLES and not columns & LATER_COLUMNS
    assert {"events", "workflows", "steps", "workflows_by_start"} <= names


async def test_an_old_file_gets_migrations_3_4_and_5(old_file: Path) -> None:
    async with SqliteStore(old_file) as store:
        assert version(old_file) == SCHEMA_VERSION
        names, columns = shape(old_file)
        assert names >= LATER_TABLES and columns >= LATER_COLUMNS
        # 3: lost attempts are counted apart, rebuilt from the old log
        [crashed] = await store.step_rows("crashed")
        assert (crashed.state, crashed.attempt, crashed.recoveries) == (StepState.LEASED, 1, 0)
        # 4: job outcomes
        assert await store.save_job(
            "job", fingerprint="fp", output=[1], completed_at=T0, expires_at=None
        )
        loaded = await store.load_job("job", T0)
        assert loaded is not None and loaded.output == [1]
        # 5: durable calls (none in the old log)
        assert await store.calls() == []


async def test_an_old_file_migrates_and_reads_as_before(old_file: Path) -> None:
    async with SqliteStore(old_file) as store:
        assert version(old_file) == SCHEMA_VERSION
        events = await store.load_events()
        assert len(events) == 22 and await store.calls() == []
        workflows = await store.workflows()
        assert [(w.workflow_id, w.state) for w in workflows] == [
            ("done", WorkflowState.COMPLETED),
            ("waiting", WorkflowState.WAITING),
            ("crashed", WorkflowState.RUNNING),
            ("retrying", WorkflowState.RUNNING),
            ("pending", WorkflowState.RUNNING),
            ("cancelled", WorkflowState.CANCELLED),
        ]
        steps = await store.step_rows()
        assert all((s.wait_key, s.wait_details, s.wait_deadline) == (None, None, None)
                   for s in steps)
        assert (await store.step_rows("done"))[0].output == {"x": [1, 2]}
        replayed = replay(events)
        assert [rows.workflow for _, rows in replayed] == workflows
        assert [s for _, rows in replayed for _, s in sorted(rows.steps.items())] == steps
        await store.rebuild_projection()
        assert await store.step_rows() == steps and await store.workflows() == workflows


async def test_old_workflows_resume_recover_and_make_durable_calls(old_file: Path) -> None:
    async with SqliteStore(old_file) as store:
        # The step-level wait written by the old release is answered as before.
        await store.resume_step("waiting", 1, {"approve": True}, T0 + 10)
        resumed = await store.claim_step("waiting", 1, "new", 10.0, T0 + 10)
        assert isinstance(resumed, Claimed) and resumed.resume_input == {"approve": True}
        await store.complete_step(resumed.execution, "sent", T0 + 10)
        assert (await store.get_workflow("waiting")).state is WorkflowState.COMPLETED  # type: ignore[union-attr]

        # The dead worker's lease is taken over; the new attempt makes durable calls.
        [expired] = await store.expired_leases(T0 + 10)
        assert (expired.workflow_id, expired.worker_id) == ("crashed", "old-worker")
        taken = await store.claim_step("crashed", 0, "new", 10.0, T0 + 10)
        assert isinstance(taken, Claimed)  # the lost attempt runs again under its number
        assert (taken.execution.attempt, taken.recoveries) == (1, 1)
        ex = taken.execution
        await store.start_call(ex, "tool-1", fingerprint="f", lane=None, label=None, now=T0 + 10)
        row = await store.complete_call(
            ex, "tool-1", output={"ok": 1}, usage=None, duration=0.1, now=T0 + 11
        )
        assert row.state is CallState.COMPLETED
        with pytest.raises(KeyConflictError):
            await store.wait_step(ex, "?", T0 + 11, key="tool-1")
        await store.wait_step(ex, "send?", T0 + 11, key="approve", deadline=T0 + 20)
        assert await store.time_out_wait("crashed", 0, T0 + 20)
        kinds = [e.kind for e in await store.load_events("crashed")]
        assert kinds[-6:] == [
            EventKind.WORKER_RECOVERED, EventKind.STEP_STARTED, EventKind.CALL_STARTED,
            EventKind.CALL_COMPLETED, EventKind.STEP_WAITING, EventKind.WAIT_TIMED_OUT,
        ]

        # The retry time, the pending and the cancelled workflows behave as before.
        retry = await store.claim_step("retrying", 0, "new", 10.0, T0 + 10)
        assert isinstance(retry, Claimed) and retry.execution.attempt == 2
        pending = await store.claim_step("pending", 0, "new", 10.0, T0 + 10)
        assert isinstance(pending, Claimed)
        [cancelled] = await store.step_rows("cancelled")
        assert (cancelled.state, cancelled.reason) == (StepState.FAILED, "cancelled")

        live = (await store.workflows(), await store.step_rows(), await store.calls())
        await store.rebuild_projection()
        assert (await store.workflows(), await store.step_rows(), await store.calls()) == live

    async with SqliteStore(old_file) as again:  # reopened: no second migration
        assert version(old_file) == SCHEMA_VERSION
        assert [r.key for r in await again.calls("crashed")] == ["tool-1", "approve"]


async def test_an_old_file_sweeps_and_never_hands_out_a_sequence_number_again(
    old_file: Path,
) -> None:
    """The log of an old file is copied into the AUTOINCREMENT table as it was; once the
    latest workflows are swept, new events still follow the highest number handed out."""
    async with SqliteStore(old_file) as store:
        events = await store.load_events()
        last = await store.last_seq()
        assert last == events[-1].seq == 22
        report = await store.sweep(ended_before=T0 + 1e6)
        gone = {"done", "cancelled"}
        assert report.workflows == 2
        assert report.events == sum(e.workflow_id in gone for e in events)
        assert await store.load_events() == [e for e in events if e.workflow_id not in gone]
        assert await store.last_seq() == last
        await store.start_workflow("cancelled", ["again"], None, T0)
        assert [e.seq for e in await store.load_events("cancelled")] == [last + 1]
    conn = sqlite3.connect(old_file)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM events WHERE workflow_id = 'waiting'")
    finally:
        conn.close()
