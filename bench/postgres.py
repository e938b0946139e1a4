"""Durable workflow throughput on PostgreSQL, beside a raw psycopg floor for the same writes.

    python -m bench.postgres [--workflows 500] [--repeat 3] [--dsn DSN]

Every row writes the same durable history for N three-step workflows as ``bench/workflows.py``
does on SQLite: 8 events each (WorkflowStarted, StepStarted and StepCompleted per step,
WorkflowCompleted), each committed together with its ``steps`` (or ``workflows``) row, into
agentq's tables in a fresh PostgreSQL schema. Rows:

- floor, psycopg (the 1x row): plain synchronous psycopg on one connection, no event loop,
  one transaction per event (insert the event numbered from ``event_seq``, upsert the row,
  commit): what the driver and the server can do at all.
- store: the same history through `PostgresStore`'s verbs (start_workflow, then claim_step
  and complete_step per step), one workflow after another, then 4 and 16 at a time.
- agentq: `WorkflowEngine.run` of no-op three-step workflows on `PostgresStore`, one
  workflow after another, then 4 at a time.

Without ``--dsn`` (or ``AGENTQ_PG_DSN``) it starts a throwaway cluster of its own
(``tests/pg_cluster.py``, with the server's default durability: fsync on), on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import psycopg  # noqa: E402

from agentq import (  # noqa: E402
    LaneConfig,
    Priority,
    Queue,
    RunStatus,
    StepDef,
    Workflow,
    WorkflowEngine,
)
from agentq.store import PostgresStore  # noqa: E402
from bench.workflows import (  # noqa: E402
    EVENTS_PER_WORKFLOW,
    STEPS,
    _elapsed,
    _noop,
    _one_workflow,
    _pool,
    _stop,
    history,
)

Row = Callable[[str, str, int], Awaitable[int]]

_INSERT_EVENT = (
    "WITH n AS (UPDATE event_seq SET last_seq = last_seq + 1 RETURNING last_seq) "
    "INSERT INTO events (seq, at, workflow_id, step_index, step_name, kind, attempt, worker_id, "
    "data) SELECT n.last_seq, %s, %s, %s, %s, %s, %s, %s, %s FROM n"
)
_UPSERT_WORKFLOW = (
    "INSERT INTO workflows (workflow_id, started_seq, state, step_names, input, reason, "
    "created_at) VALUES (%s, %s, %s, %s, 'null', NULL, %s) "
    "ON CONFLICT (workflow_id) DO UPDATE SET state = excluded.state"
)
_UPSERT_STEP = (
    "INSERT INTO steps (workflow_id, step_index, step_name, state, attempt, worker_id, "
    "lease_token, lease_expires_at, output, resumed, started_at, finished_at, recoveries) "
    "VALUES (%s, %s, %s, %s, 1, 'bench', 1, %s, %s, false, %s, %s, 0) "
    "ON CONFLICT (workflow_id, step_index) DO UPDATE SET state = excluded.state, "
    "lease_expires_at = excluded.lease_expires_at, output = excluded.output, "
    "finished_at = excluded.finished_at"
)


def _keys(params: tuple[object, ...], at: tuple[int, ...]) -> tuple[object, ...]:
    return tuple(v.encode() if i in at and isinstance(v, str) else v for i, v in enumerate(params))


async def floor_psycopg(dsn: str, schema: str, workflows: int) -> int:
    """Plain psycopg, no event loop: one transaction per event (the 1x)."""
    txs = []
    for event, sql, params in history(workflows):
        is_step = "steps" in sql
        txs.append((
            _keys(event, (1, 3, 6)),
            _UPSERT_STEP if is_step else _UPSERT_WORKFLOW,
            _keys(params, (0, 2) if is_step else (0,)),
        ))
    with psycopg.connect(dsn) as conn:
        conn.execute(f"SET search_path TO {schema}")
        conn.commit()
        start = time.perf_counter()
        for event, sql, params in txs:
            conn.execute(_INSERT_EVENT, event)
            conn.execute(sql, params)
            conn.commit()
        _stop(start)
    return len(txs)


async def _drive(dsn: str, schema: str, workflows: int, at_a_time: int) -> int:
    async with PostgresStore(dsn, schema=schema, max_size=max(at_a_time, 2)) as store:
        await _pool(range(workflows), at_a_time, lambda w: _one_workflow(store, w))  # type: ignore[arg-type]
        return await store.last_seq()


async def store_sequential(dsn: str, schema: str, workflows: int) -> int:
    """PostgresStore verbs, one workflow after another."""
    return await _drive(dsn, schema, workflows, 1)


async def store_4_at_a_time(dsn: str, schema: str, workflows: int) -> int:
    """PostgresStore verbs, 4 workflows at a time (4 connections)."""
    return await _drive(dsn, schema, workflows, 4)


async def store_16_at_a_time(dsn: str, schema: str, workflows: int) -> int:
    """PostgresStore verbs, 16 workflows at a time (16 connections)."""
    return await _drive(dsn, schema, workflows, 16)


async def _engine(dsn: str, schema: str, workflows: int, at_a_time: int) -> int:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=workflows, permits=max(at_a_time, 1))}
    async with (
        Queue(lanes) as queue,
        PostgresStore(dsn, schema=schema, max_size=max(at_a_time, 2)) as store,
    ):
        engine = WorkflowEngine(queue, store, worker_id="bench")
        flows = [
            Workflow(f"wf-{w}", [StepDef(name, _noop) for name in STEPS]) for w in range(workflows)
        ]

        async def run(wf: Workflow) -> None:
            result = await engine.run(wf)
            assert result.status is RunStatus.COMPLETED, result

        await _pool(flows, at_a_time, run)
        return await store.last_seq()


async def engine_sequential(dsn: str, schema: str, workflows: int) -> int:
    """WorkflowEngine.run on PostgresStore, one workflow after another."""
    return await _engine(dsn, schema, workflows, 1)


async def engine_4_at_a_time(dsn: str, schema: str, workflows: int) -> int:
    """WorkflowEngine.run on PostgresStore, 4 workflows at a time."""
    return await _engine(dsn, schema, workflows, 4)


ROWS: list[tuple[str, Row]] = [
    ("floor: psycopg, no event loop, 1 tx/event", floor_psycopg),
    ("store: PostgresStore verbs, sequential", store_sequential),
    ("store: PostgresStore verbs, 4 at a time", store_4_at_a_time),
    ("store: PostgresStore verbs, 16 at a time", store_16_at_a_time),
    ("agentq: WorkflowEngine, sequential", engine_sequential),
    ("agentq: WorkflowEngine, 4 at a time", engine_4_at_a_time),
]
BASELINE = "floor: psycopg, no event loop, 1 tx/event"

_schemas = iter(range(1, 1_000_000))


async def measure(dsn: str, row: Row, workflows: int) -> tuple[float, int]:
    """Run `row` once in a fresh schema (agentq's tables, empty); return seconds and events."""
    schema = f"bench_{os.getpid()}_{next(_schemas)}"
    async with PostgresStore(dsn, schema=schema):
        pass  # create the tables, untimed
    try:
        _elapsed.clear()
        events = await row(dsn, schema, workflows)
        seconds = _elapsed[-1]
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    expected = workflows * EVENTS_PER_WORKFLOW
    assert events == expected, f"{row.__name__} wrote {events} events, not {expected}"
    return seconds, events


async def main(dsn: str, workflows: int, repeat: int) -> None:
    with psycopg.connect(dsn) as conn:
        version = conn.execute("SHOW server_version").fetchone()
    print(
        f"bench/postgres.py: {workflows} workflows x {len(STEPS)} steps = "
        f"{workflows * EVENTS_PER_WORKFLOW} events per row; PostgreSQL "
        f"{version[0] if version else '?'} on loopback, psycopg {psycopg.__version__}, "
        f"Python {sys.version.split()[0]}, best of {repeat} (rows interleaved)"
    )
    best: dict[str, tuple[float, int]] = {}
    for _ in range(repeat):
        for name, row in ROWS:
            seconds, events = await measure(dsn, row, workflows)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, events)
    base = best[BASELINE][1] / best[BASELINE][0]
    print(f"{'row':<46}{'events/s':>10}{'workflows/s':>13}{'steps/s':>10}{'vs floor':>10}")
    for name, (seconds, events) in best.items():
        rate = events / seconds
        print(
            f"{name:<46}{rate:>10,.0f}{workflows / seconds:>13,.0f}"
            f"{workflows * len(STEPS) / seconds:>10,.0f}{rate / base:>9.2f}x"
        )


def run(dsn: str | None, workflows: int, repeat: int) -> None:
    """Run the benchmark on `dsn`, or on a throwaway cluster of its own."""
    if dsn:
        asyncio.run(main(dsn, workflows, repeat))
        return
    from tests.pg_cluster import Cluster

    cluster = Cluster(durable=True).start()
    try:
        asyncio.run(main(cluster.dsn(), workflows, repeat))
    finally:
        cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workflows", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dsn", default=os.environ.get("AGENTQ_PG_DSN"))
    args = parser.parse_args()
    run(args.dsn, args.workflows, args.repeat)
