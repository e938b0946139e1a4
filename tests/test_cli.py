"""The `agentq` command line on real SQLite files made by a real engine (click's CliRunner),
and `python -m agentq` in a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agentq import Job, NonRetryable
from agentq.cli import cli
from agentq.cli.commands import Settings, store_title
from agentq.cli.target import is_dsn
from agentq.clock import FakeClock
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import DurableStore, PostgresStore, SqliteStore, StepState, WorkflowState
from agentq.workflows import (
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowDef,
    WorkflowEngine,
)

ROOT = Path(__file__).resolve().parents[1]


async def _tool(x: int) -> dict[str, int]:
    return {"doubled": 2 * x}


async def _plan(ctx: StepContext) -> Any:
    return await ctx.call(
        Job("tool:1", lambda: _tool(ctx.input["x"]), Priority.HIGH),
        label={"kind": "tool", "tool": "double", "tool_call_id": "call-1"},
    )


async def _ask(ctx: StepContext) -> Any:
    answer = await ctx.wait_for_input(
        "approve-send", "send the report?", details={"tool": "send", "args": {"to": "ops"}}
    )
    return {"answer": answer}


def _boom(ctx: StepContext) -> Any:
    raise NonRetryable("the printer is on fire")


def _workflows() -> dict[str, Workflow]:
    return {
        "done": Workflow("done", [StepDef("plan", _plan)], input={"x": 2}),
        "asks": Workflow("asks", [StepDef("plan", _plan), StepDef("ask", _ask)], input={"x": 3}),
        "broken": Workflow("broken", [StepDef("boom", _boom)]),
    }


async def _engine_run(where: Path | Any, clock: FakeClock, *ids: str) -> Any:
    """Run workflows of `_workflows` to their end or wait on a SQLite path or a pg `Target`."""
    if isinstance(where, Path):
        store: DurableStore = await SqliteStore.open(where)
    else:
        store = await PostgresStore.open(where.dsn, schema=where.schema)
    try:
        async with (
            Queue({Priority.MEDIUM: LaneConfig(capacity=10, permits=2),
                   Priority.HIGH: LaneConfig(capacity=10, permits=2)}, clock=clock) as queue,
            WorkflowEngine(queue, store, worker_id="w1", clock=clock) as engine,
        ):
            return [await engine.run(_workflows()[wid]) for wid in ids]
    finally:
        await store.close()


@pytest.fixture
def made(tmp_path: Path, clock: FakeClock) -> Path:
    """A SQLite file with a completed, a waiting and a failed workflow."""
    path = tmp_path / "agentq.db"
    results = asyncio.run(_engine_run(path, clock, "done", "asks", "broken"))
    assert [r.status for r in results] == [RunStatus.COMPLETED, RunStatus.WAITING,
                                           RunStatus.FAILED]
    return path


def run(*args: str, clock: FakeClock | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), obj=Settings(clock=clock or FakeClock(),
                                                            width=200))


async def _read(path: Path) -> tuple[Any, ...]:
    async with SqliteStore(path) as store:
        return (await store.workflows(), await store.step_rows(), await store.load_events())


# ------------------------------------------------------------------ reading


def test_ls_lists_every_workflow_with_progress(made: Path) -> None:
    result = run("ls", str(made))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "3 workflow(s)" in out
    for wid, state in (("done", "completed"), ("asks", "waiting"), ("broken", "failed")):
        line = next(line for line in out.splitlines() if f" {wid} " in line)
        assert state in line
    assert "1/2" in out and "ask (waiting)" in out
    assert "the printer is on fire" in out


def test_ls_filters_by_state_and_prints_json(made: Path) -> None:
    result = run("ls", str(made), "--state", "waiting", "--json")
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["workflow_id"], r["state"], r["steps"]) for r in rows] == [
        ("asks", "waiting", ["plan", "ask"])
    ]


def test_ls_rejects_an_unknown_state_as_usage(made: Path) -> None:
    result = run("ls", str(made), "--state", "sleeping")
    assert result.exit_code == 2
    assert "sleeping" in result.output


def test_show_gives_steps_calls_and_the_wait_with_its_details(made: Path) -> None:
    result = run("show", str(made), "asks")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "workflow asks" in out and "waiting" in out
    assert "waiting for input" in out and "send the report?" in out
    assert "approve-send" in out and '"to": "ops"' in out
    assert "durable calls and waits" in out and "tool:1" in out and '"doubled": 6' in out


def test_show_json_has_every_row_and_field(made: Path) -> None:
    result = run("show", str(made), "broken", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["workflow"]["state"] == "failed"
    (step,) = shown["steps"]
    assert step["state"] == "failed" and step["error"]["type"].endswith("NonRetryable")
    assert shown["calls"] == []
    asks = json.loads(run("show", str(made), "asks", "--json").stdout)
    assert [c["key"] for c in asks["calls"]] == ["tool:1", "approve-send"]
    assert asks["steps"][1]["wait_details"] == {"tool": "send", "args": {"to": "ops"}}


async def _blank(value: Any) -> Any:
    return value


async def _blanks(ctx: StepContext) -> str:
    for key, value in (("v-none", None), ("v-null", "null"), ("v-empty", ""), ("v-text", "hi")):
        await ctx.call(Job(key, lambda v=value: _blank(v)))
    return "ok"


def test_show_prints_call_outputs_none_empty_and_the_text_null_apart(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Review finding: an output None and an output "" both showed as an empty cell."""
    path = tmp_path / "agentq.db"

    async def make() -> None:
        async with (
            Queue(clock=clock) as queue,
            SqliteStore(path) as store,
            WorkflowEngine(queue, store, clock=clock) as engine,
        ):
            assert (await engine.run(Workflow("odd", [StepDef("s", _blanks)]))).outputs == ("ok",)

    asyncio.run(make())
    out = run("show", str(path), "odd").stdout
    table = out[out.index("durable calls and waits"):]
    cells = {line.split()[1]: line.rstrip("│ ").split("│")[-1].strip()
             for line in table.splitlines() if "v-" in line}
    assert cells == {"v-none": "null", "v-null": '"null"', "v-empty": '""', "v-text": '"hi"'}


def test_a_cancelled_workflows_wait_is_shown_as_ended(made: Path) -> None:
    """Finding 10: after `agentq cancel`, the wait row reads cancelled, not waiting."""
    asks = json.loads(run("show", str(made), "asks", "--json").stdout)
    assert [c["state"] for c in asks["calls"]] == ["completed", "waiting"]
    assert run("cancel", str(made), "asks").exit_code == 0
    asks = json.loads(run("show", str(made), "asks", "--json").stdout)
    assert [c["state"] for c in asks["calls"]] == ["completed", "cancelled"]
    shown = run("show", str(made), "asks").stdout
    table = shown[shown.index("durable calls and waits"):]
    assert "approve-send" in table and "waiting" not in table and "cancelled" in table


async def _nap(ctx: StepContext) -> str:
    await ctx.sleep(3600)
    return "woke"


def test_show_gives_a_sleeping_steps_wake_time_and_the_workflow_deadline(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "naps.db"

    async def make() -> Any:
        async with (
            SqliteStore(path) as store,
            Queue({Priority.MEDIUM: LaneConfig(capacity=10, permits=2)}, clock=clock) as queue,
            WorkflowEngine(queue, store, worker_id="w1", clock=clock) as engine,
        ):
            return await engine.run(Workflow("naps", [StepDef("nap", _nap)], timeout=7200))

    assert asyncio.run(make()).status is RunStatus.WAITING
    out = run("show", str(path), "naps").stdout
    assert "sleeping until" in out and "sleep:0" in out
    assert "deadline:" in out and "WorkflowTimedOut" in out
    shown = json.loads(run("show", str(path), "naps", "--json").stdout)
    assert shown["workflow"]["deadline"] == clock.time() + 7200
    assert shown["steps"][0]["wait_deadline"] == clock.time() + 3600
    [line] = run("ls", str(path), "--json").stdout.splitlines()
    assert json.loads(line)["deadline"] == clock.time() + 7200


def test_show_says_whether_the_end_hooks_were_delivered(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "hooks.db"
    told: list[str] = []

    def fails(result: Any) -> None:
        raise RuntimeError("the pager is down")

    async def make() -> None:
        quiet = WorkflowDef("quiet", [StepDef("s", _boom)])
        told_def = WorkflowDef("told", [StepDef("s", _boom)],
                               on_end=lambda r: told.append(r.workflow_id))
        flaky = WorkflowDef("flaky", [StepDef("s", _boom)], on_end=fails)
        async with (
            SqliteStore(path) as store,
            Queue({Priority.MEDIUM: LaneConfig(capacity=10, permits=2)}, clock=clock) as queue,
            WorkflowEngine(queue, store, worker_id="w1", clock=clock) as engine,
        ):
            for definition in (quiet, told_def, flaky):
                engine.register(definition)
                await engine.run(definition.workflow(definition.name))

    asyncio.run(make())
    assert told == ["told"]
    assert "on_end hooks: delivered" in run("show", str(path), "told").stdout
    assert "on_end hooks" not in run("show", str(path), "quiet").stdout  # no hook for it
    out = run("show", str(path), "flaky").stdout
    assert "on_end hooks: pending, next attempt" in out and "the pager is down" in out
    [row] = json.loads(run("show", str(path), "flaky", "--json").stdout)["hooks"]
    assert (row["attempts"], row["delivered_at"]) == (1, None)
    assert row["error"] == "RuntimeError: the pager is down"


def test_show_an_unknown_workflow_is_refused(made: Path) -> None:
    result = run("show", str(made), "nope")
    assert result.exit_code == 1
    assert result.stderr.strip() == "agentq: no workflow 'nope' in this store"
    assert "Traceback" not in result.output


def test_events_table_json_after_and_limit(made: Path) -> None:
    everything = run("events", str(made), "--json")
    assert everything.exit_code == 0
    events = [json.loads(line) for line in everything.stdout.splitlines()]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(seqs) > 5
    assert events[0]["kind"] == "WorkflowStarted" and events[0]["data"]["input"] == {"x": 2}
    one = run("events", str(made), "asks", "--json", "--after", str(seqs[2]), "--limit", "2")
    rows = [json.loads(line) for line in one.stdout.splitlines()]
    assert len(rows) == 2
    assert all(r["workflow_id"] == "asks" and r["seq"] > seqs[2] for r in rows)
    table = run("events", str(made), "broken")
    assert table.exit_code == 0
    assert "WorkflowFailed" in table.stdout and "StepWaiting" not in table.stdout


def test_events_of_an_unknown_workflow_and_a_negative_after(made: Path) -> None:
    assert run("events", str(made), "nope").exit_code == 1
    bad = run("events", str(made), "--after", "-1")
    assert bad.exit_code == 2 and "-1" in bad.output


# ------------------------------------------------------------------ bad stores


def test_a_missing_file_is_never_created(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    result = run("ls", str(path))
    assert result.exit_code == 1
    assert "no such file" in result.stderr and "typo.db" in result.stderr
    assert not path.exists()


COMMANDS = [
    ("ls",), ("show", "w"), ("events",), ("export", "--html", "page.html"),
    ("approve", "w"), ("cancel", "w"), ("retry", "w"),
]
"""Every command, read-only and recording, with the arguments after STORE."""


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_no_command_creates_a_sqlite_file(tmp_path: Path, command: tuple[str, ...]) -> None:
    path = tmp_path / "typo.db"
    verb, *rest = command
    result = run(verb, str(path), *(str(tmp_path / r) if r.endswith(".html") else r
                                    for r in rest))
    assert result.exit_code == 1
    assert result.stderr.startswith("agentq: no such file") and "typo.db" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not path.exists() and not (tmp_path / "page.html").exists()


def _namespaces(dsn: str, *names: str) -> set[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)", (list(names),)
        ).fetchall()
    return {row[0] for row in rows}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_mistyped_pg_schema_is_refused_and_never_created(
    pg_target: Any, tmp_path: Path, command: tuple[str, ...]
) -> None:
    typo = f"{pg_target.schema}_typo"
    verb, *rest = command
    result = run("--pg-schema", typo, verb, pg_target.dsn,
                 *(str(tmp_path / r) if r.endswith(".html") else r for r in rest))
    assert result.exit_code == 1
    assert result.stderr == (
        f"agentq: no schema {typo!r} in that PostgreSQL database (the command line never "
        "creates a store; check --pg-schema)\n"
    )
    assert _namespaces(pg_target.dsn, typo) == set()


def test_a_pg_schema_without_an_agentq_store_is_refused_and_left_empty(pg_target: Any) -> None:
    import psycopg

    other = f"{pg_target.schema}_other"
    with psycopg.connect(pg_target.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{other}"')
    try:
        result = run("--pg-schema", other, "ls", pg_target.dsn)
        assert result.exit_code == 1
        assert result.stderr == (
            f"agentq: schema {other!r} of that PostgreSQL database holds no agentq store\n"
        )
        with psycopg.connect(pg_target.dsn, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (other,)
            ).fetchone()
        assert tables == (0,)
    finally:
        with psycopg.connect(pg_target.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{other}" CASCADE')


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "is empty"), (b"hello, not a database at all" * 10, "not a SQLite database")],
)
def test_a_file_that_is_not_an_agentq_database_is_refused(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "other.db"
    path.write_bytes(content)
    result = run("ls", str(path))
    assert result.exit_code == 1
    assert message in result.stderr
    assert path.read_bytes() == content


def test_a_foreign_sqlite_database_is_not_touched(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    conn.close()
    result = run("ls", str(path))
    assert result.exit_code == 1
    assert "not an agentq database" in result.stderr


@pytest.mark.parametrize(
    ("setup", "has"),
    [
        ("PRAGMA journal_mode = wal", "no tables"),  # blank: finding 4
        ("CREATE TABLE users (id INTEGER)", "users"),  # finding 5: never switched to WAL
        ("CREATE TABLE users (id INTEGER); PRAGMA user_version = 2", "users"),
    ],
)
def test_a_sqlite_file_without_agentq_tables_is_refused_byte_for_byte(
    tmp_path: Path, setup: str, has: str
) -> None:
    import sqlite3

    path = tmp_path / "notes.db"
    conn = sqlite3.connect(path)
    conn.executescript(setup)
    conn.close()
    before = path.read_bytes()
    for argv in (["ls"], ["events"], ["cancel", "wf"]):
        result = run(*argv[:1], str(path), *argv[1:])
        assert result.exit_code == 1
        assert result.stderr == (
            f"agentq: {str(path)!r} is a SQLite database, not an agentq database (it has "
            f"{has}); the file was left as it was\n"
        )
    assert path.read_bytes() == before  # the journal mode is in the header: not switched


def test_a_directory_is_refused(tmp_path: Path) -> None:
    result = run("ls", str(tmp_path))
    assert result.exit_code == 1 and "is a directory" in result.stderr


def test_a_wrong_dsn_is_refused_in_one_line_without_its_password() -> None:
    result = run("ls", "postgresql://agentq:s3cret@127.0.0.1:1/nowhere?connect_timeout=5")
    assert result.exit_code == 1
    assert result.stderr.startswith("agentq: cannot open the PostgreSQL store")
    assert "s3cret" not in result.output and "Traceback" not in result.output


def test_every_command_on_postgresql(pg_target: Any, clock: FakeClock, tmp_path: Path) -> None:
    results = asyncio.run(_engine_run(pg_target, clock, "done", "asks", "broken"))
    assert [r.status for r in results] == [RunStatus.COMPLETED, RunStatus.WAITING,
                                           RunStatus.FAILED]
    dsn, schema = pg_target.dsn, pg_target.schema

    def pg(*args: str) -> Result:
        return run("--pg-schema", schema, *args, clock=clock)

    listed = pg("ls", dsn, "--json")
    assert listed.exit_code == 0, listed.output
    assert [json.loads(line)["state"] for line in listed.stdout.splitlines()] == [
        "completed", "waiting", "failed"]
    shown = pg("show", dsn, "asks")
    assert shown.exit_code == 0 and "approve-send" in shown.stdout
    events = pg("events", dsn, "broken", "--json")
    assert json.loads(events.stdout.splitlines()[-1])["kind"] == "WorkflowFailed"
    assert pg("show", dsn, "nope").exit_code == 1
    approved = pg("approve", dsn, "asks", "--note", "from psql land")
    assert approved.exit_code == 0, approved.output
    assert pg("approve", dsn, "asks").exit_code == 1  # answered already
    (final,) = asyncio.run(_engine_run(pg_target, clock, "asks"))
    assert final.status is RunStatus.COMPLETED
    assert final.outputs[1] == {"answer": {"approved": True, "note": "from psql land"}}
    assert pg("cancel", dsn, "broken").exit_code == 1  # failed: nothing to cancel
    assert pg("retry", dsn, "broken").exit_code == 0
    page = tmp_path / "pg.html"
    exported = pg("export", dsn, "--html", str(page))
    assert exported.exit_code == 0, exported.output
    assert 'data-agentq="timeline"' in page.read_text(encoding="utf-8")


def test_store_title_hides_a_dsn_password() -> None:
    assert store_title("postgresql://u:pw@db:5432/x") == "postgresql://db:5432/x"
    assert store_title("host=db user=u password=pw dbname=x") == "host=db dbname=x"
    assert store_title("/tmp/a/agentq.db") == "agentq.db"


def test_what_counts_as_a_dsn(tmp_path: Path) -> None:
    assert is_dsn("postgresql://db/x") and is_dsn("postgres://u@db/x")
    assert is_dsn("host=db port=5432 dbname=x") and is_dsn("dbname='my db' user=a")
    assert not is_dsn("agentq.db") and not is_dsn("color=blue")
    odd = tmp_path / "host=db"
    odd.write_bytes(b"")
    assert not is_dsn(str(odd))  # an existing file is a file


# ------------------------------------------------------------------ recording decisions


def test_approve_records_the_input_and_an_engine_continues(made: Path, clock: FakeClock) -> None:
    result = run("approve", str(made), "asks", "--note", "looks fine", clock=clock)
    assert result.exit_code == 0, result.output
    assert "recorded the approval of step 'ask' (wait 'approve-send')" in result.stdout
    _, steps, events = asyncio.run(_read(made))
    resumed = [e for e in events if e.kind == "StepResumed"]
    assert [(e.workflow_id, e.data["input"], e.data["key"]) for e in resumed] == [
        ("asks", {"approved": True, "note": "looks fine"}, "approve-send")
    ]
    ask = next(s for s in steps if s.workflow_id == "asks" and s.step_name == "ask")
    assert ask.state is StepState.PENDING  # recorded only: no step body ran here
    # The process that has the definition continues it (later: engine.serve()).
    (final,) = asyncio.run(_engine_run(made, clock, "asks"))
    assert final.status is RunStatus.COMPLETED
    assert final.outputs[1] == {"answer": {"approved": True, "note": "looks fine"}}
    calls = [e for e in asyncio.run(_read(made))[2] if e.kind == "CallStarted"]
    assert len([c for c in calls if c.workflow_id == "asks"]) == 1  # the tool ran once


async def test_an_approval_on_the_command_line_is_picked_up_by_a_serving_engine(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "served.db"
    definition = WorkflowDef("report", [StepDef("plan", _plan), StepDef("ask", _ask)])
    async with (
        SqliteStore(path) as store,
        Queue({Priority.MEDIUM: LaneConfig(capacity=10, permits=2),
               Priority.HIGH: LaneConfig(capacity=10, permits=2)}, clock=clock) as queue,
        WorkflowEngine(queue, store, worker_id="server", clock=clock) as engine,
    ):
        engine.register(definition)
        await engine.start(definition, "r-1", {"x": 5})
        listed = await asyncio.to_thread(run, "ls", str(path), "--json")
        assert [json.loads(line)["definition"] for line in listed.stdout.splitlines()] == [
            "report"]
        server = asyncio.ensure_future(engine.serve(poll_interval=1.0))
        try:
            await _until(store, "r-1", WorkflowState.WAITING)
            # the command line, on its own connection (here a thread; any process will do)
            result = await asyncio.to_thread(
                run, "approve", str(path), "r-1", "--note", "ship it", clock=clock
            )
            assert result.exit_code == 0, result.output
            async with asyncio.timeout(20):
                await clock.wait_for_sleepers(1)
            await clock.advance(1.0)  # the server's next poll finds the resumed step
            await _until(store, "r-1", WorkflowState.COMPLETED)
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
        (step,) = [r for r in await store.step_rows("r-1") if r.step_name == "ask"]
        assert step.output == {"answer": {"approved": True, "note": "ship it"}}
        events = await store.load_events("r-1")
        assert [e.kind for e in events].count("CallStarted") == 1  # the tool ran once


async def _until(store: SqliteStore, workflow_id: str, state: WorkflowState) -> None:
    async with asyncio.timeout(20):
        while True:
            row = await store.get_workflow(workflow_id)
            if row is not None and row.state is state:
                return
            await asyncio.sleep(0)


def test_reject_with_explicit_json_input(made: Path) -> None:
    value = {"approved": False, "note": "no", "override_args": None}
    result = run("reject", str(made), "asks", "--step", "ask", "--input", json.dumps(value))
    assert result.exit_code == 0, result.output
    assert "rejection" in result.stdout
    events = asyncio.run(_read(made))[2]
    assert [e.data["input"] for e in events if e.kind == "StepResumed"] == [value]


def test_approve_refusals_record_nothing(made: Path) -> None:
    before = asyncio.run(_read(made))[2]
    cases = [
        (("approve", str(made), "nope"), 1, "no workflow 'nope'"),
        (("approve", str(made), "done"), 1, "no step waits for input"),
        (("approve", str(made), "asks", "--step", "plan"), 1, "is completed, not waiting"),
        (("approve", str(made), "asks", "--step", "fly"), 1, "has no step 'fly'"),
        (("approve", str(made), "asks", "--input", "{not json"), 2, "not JSON"),
        (("approve", str(made), "asks", "--input", "1", "--note", "x"), 2, "not both"),
        (("approve", str(made), "broken"), 1, "failed: no step waits"),
    ]
    for args, code, message in cases:
        result = run(*args)
        assert result.exit_code == code, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output
    assert asyncio.run(_read(made))[2] == before


def test_a_second_approval_is_refused(made: Path) -> None:
    assert run("approve", str(made), "asks").exit_code == 0
    again = run("approve", str(made), "asks")
    assert again.exit_code == 1
    assert "no step waits for input" in again.stderr


def test_cancel_then_retry_then_an_engine_runs_it(made: Path, clock: FakeClock) -> None:
    result = run("cancel", str(made), "asks", "--reason", "not today", clock=clock)
    assert result.exit_code == 0, result.output
    workflows = {w.workflow_id: w for w in asyncio.run(_read(made))[0]}
    assert workflows["asks"].state is WorkflowState.CANCELLED
    assert workflows["asks"].reason == "not today"
    again = run("cancel", str(made), "asks")
    assert again.exit_code == 1 and "already cancelled" in again.stderr
    retried = run("retry", str(made), "asks", clock=clock)
    assert retried.exit_code == 0, retried.output
    workflows = {w.workflow_id: w for w in asyncio.run(_read(made))[0]}
    assert workflows["asks"].state is WorkflowState.RUNNING
    (result_run,) = asyncio.run(_engine_run(made, clock, "asks"))
    assert result_run.status is RunStatus.WAITING  # it asks again


def test_retry_from_a_step_and_refusals(made: Path) -> None:
    assert run("retry", str(made), "done").exit_code == 1  # completed: not retryable
    bad_step = run("retry", str(made), "broken", "--from-step", "7")
    assert bad_step.exit_code == 1 and "has no step '7'" in bad_step.stderr
    ok = run("retry", str(made), "broken", "--from-step", "boom")
    assert ok.exit_code == 0, ok.output
    events = asyncio.run(_read(made))[2]
    assert [e.data["from_step"] for e in events if e.kind == "WorkflowRetried"] == [0]
    assert run("cancel", str(made), "nope").exit_code == 1


# ------------------------------------------------------------------ export


def test_export_parquet_frames(made: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "export"
    result = run("export", str(made), "--parquet", str(out))
    assert result.exit_code == 0, result.output
    events = pq.read_table(out / "events.parquet").to_pylist()
    steps = pq.read_table(out / "steps.parquet").to_pylist()
    calls = pq.read_table(out / "calls.parquet").to_pylist()
    assert {e["kind"] for e in events} >= {"WorkflowStarted", "StepWaiting", "WorkflowFailed"}
    assert json.loads(events[0]["input"]) == {"x": 2}
    assert len(steps) == 4
    assert {(c["workflow_id"], c["key"]) for c in calls} == {
        ("done", "tool:1"), ("asks", "tool:1"), ("asks", "approve-send")}


def exported(made: Path, page: Path, *options: str) -> str:
    """Run ``agentq export made --html page [options]`` and return the page written."""
    result = run("export", str(made), "--html", str(page), *options)
    assert result.exit_code == 0, result.output
    return page.read_text(encoding="utf-8")


def test_export_html_is_one_static_page_of_the_dashboard_views(
    made: Path, tmp_path: Path
) -> None:
    page = exported(made, tmp_path / "dash.html")
    assert page.startswith("<!DOCTYPE html>")
    assert 'data-agentq="approval" data-workflow="asks" data-step="ask"' in page
    assert 'data-agentq="steps"' in page and 'data-agentq="timeline"' in page
    assert 'data-agentq="call-totals"' in page
    assert "agentq.db" in page and "<script" not in page


def test_export_html_has_each_workflows_tree_with_details_and_bounds_it(
    made: Path, tmp_path: Path
) -> None:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(exported(made, tmp_path / "trees.html"), "html.parser")
    trees = {t["data-workflow"]: t for t in soup.select('[data-agentq="tree"]')}
    assert set(trees) == {"done", "asks", "broken"}
    for tree in trees.values():
        for node in tree.select('[data-agentq="tree-node"]'):
            assert node.find(attrs={"data-agentq": "detail"}) is not None, node["data-node"]
    assert soup.find(["script", "link", "img"]) is None
    assert not any(t.has_attr("src") or t.has_attr("href") for t in soup.find_all(True))
    small = tmp_path / "small.html"
    soup = BeautifulSoup(exported(made, small, "--workflows", "1", "--nodes", "2"),
                         "html.parser")
    assert len(soup.select('[data-agentq="tree"]')) == 1
    assert len(soup.select('[data-agentq="tree-node"]')) == 2
    assert "2 more workflows not shown" in soup.text
    assert run("export", str(made), "--html", str(small), "--nodes", "0").exit_code == 2


def test_export_needs_a_target_and_a_writable_place(made: Path, tmp_path: Path) -> None:
    assert run("export", str(made)).exit_code == 2
    result = run("export", str(made), "--html", str(tmp_path / "no" / "such" / "dir.html"))
    assert result.exit_code == 1 and "cannot write" in result.stderr


def test_export_never_writes_over_the_store(made: Path, tmp_path: Path) -> None:
    # review F3: `agentq export f3.db --html f3.db` replaced the database with the page.
    before = made.read_bytes()
    link = tmp_path / "link.db"
    link.symlink_to(made)
    for target in (made, tmp_path / "." / "agentq.db", link, Path(f"{made}-wal"),
                   Path(f"{made}-shm")):
        result = run("export", str(made), "--html", str(target), "--parquet",
                     str(tmp_path / "pq"))
        assert result.exit_code == 1, (target, result.output)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("agentq: refusing to write the export")
        assert str(target) in lines[0] and str(made) in lines[0]
    assert made.read_bytes() == before and not (tmp_path / "pq").exists()  # nothing written
    assert run("ls", str(made)).exit_code == 0


def test_export_refuses_options_it_would_ignore_and_an_empty_file_name(
    made: Path, tmp_path: Path
) -> None:
    # review F10
    result = run("export", str(made), "--parquet", str(tmp_path / "pq"), "--nodes", "5")
    assert result.exit_code == 2 and "--nodes applies to --html only" in result.output
    result = run("export", str(made), "--parquet", str(tmp_path / "pq"), "--workflows", "2")
    assert result.exit_code == 2 and "--workflows applies to --html only" in result.output
    result = run("export", str(made), "--html", "")
    assert result.exit_code == 2 and "'' is not a file name" in result.output
    page = exported(made, tmp_path / "one.html", "--workflows", "2", "--nodes", "1")
    assert "Trees of the latest 1 of 3 workflows (at most 2)" in page
    assert "and 1 node in all" in page and "1 nodes" not in page


# ------------------------------------------------------------------ as a program


def test_python_dash_m_agentq(made: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "agentq", "ls", str(made), "--json"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["workflow_id"] for line in done.stdout.splitlines()] == [
        "done", "asks", "broken"]
    missing = subprocess.run(
        [sys.executable, "-m", "agentq", "show", str(made.with_name("x.db")), "w"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert missing.returncode == 1 and missing.stderr.startswith("agentq: no such file")
    usage = subprocess.run(
        [sys.executable, "-m", "agentq", "frobnicate"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert usage.returncode == 2


def test_python_dash_m_agentq_without_the_cli_extra_names_it() -> None:
    code = (
        "import sys, runpy; sys.modules['click'] = None; "
        "runpy.run_module('agentq', run_name='__main__')"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    assert done.returncode == 1
    assert "pip install 'agentq[cli]'" in done.stderr and "Traceback" not in done.stderr
