"""Two processes drain one run group on one SQLite file or PostgreSQL database, with a rate
limit shared through the store: the one that submitted the group claims only what its lane
can start (it never holds more steps leased than its permits), so the other (serving) runs
members too; every member's body runs once, and no window of the limit ever holds more
starts than it allows, across both processes.

`group_drain_child.py` is both processes: ``submit`` (records the group and runs members)
and ``serve`` (serves the definition). Real time: the processes share the system clock.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path

import group_drain_child as child
import pytest

from agentq.store import PostgresStore, SqliteStore, WorkflowState

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "group_drain_child.py"


def most_in_any_window(times: list[float], per: float) -> int:
    return max(sum(1 for u in times if t - per < u <= t) for t in times)


async def spawn(mode: str, args: list[str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), mode, *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_two_processes_drain_one_group_within_one_shared_rate(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    side = tmp_path / "side.txt"
    if kind == "sqlite":
        db, schema = str(tmp_path / "drain.db"), None
        async with SqliteStore(db):
            pass  # the tables, before two processes race to make them
    else:
        target = request.getfixturevalue("pg_target")
        db, schema = target.dsn, target.schema
    args = [db, str(side), *([] if schema is None else [schema])]
    server = await spawn("serve", args)
    try:
        assert server.stdout is not None and server.stdin is not None
        async with asyncio.timeout(30):
            assert (await server.stdout.readline()).strip() == b"serving"
        submitter = await spawn("submit", args)
        async with asyncio.timeout(120):
            out, err_submit = await submitter.communicate()
        assert submitter.returncode == 0, err_submit.decode()
        assert out.decode().split() == ["done", str(len(child.ITEMS))]
        server.stdin.write(b"stop\n")
        async with asyncio.timeout(60):
            _, err_serve = await server.communicate()
        assert server.returncode == 0, err_serve.decode()
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()

    starts: Counter[str] = Counter()
    by_pid: Counter[str] = Counter()
    held: dict[str, int] = {}  # the most leases each process held as a body began
    charges: list[float] = []
    for line in side.read_text().splitlines():
        kind_, *rest = line.split()
        if kind_ == "start":
            starts[rest[0]] += 1
            by_pid[rest[1]] += 1
        elif kind_ == "held":
            held[rest[0]] = max(held.get(rest[0], 0), int(rest[1]))
        else:
            charges.append(float(rest[1]))
    # the submitter claims no more than its lane can start: the rest stays ready
    assert max(held.values()) <= child.PERMITS, held
    assert starts == Counter(child.ITEMS.keys())  # every member's body once, no more
    assert set(by_pid) == {str(submitter.pid), str(server.pid)}, by_pid  # both ran members
    assert min(by_pid.values()) >= len(child.ITEMS) // 6, by_pid  # a real share each
    rate = child.RATE
    assert len(charges) == len(child.ITEMS)
    assert most_in_any_window(sorted(charges), rate.per_seconds) <= rate.count
    for err in (err_submit, err_serve):  # no traceback, no warning of a member skipped
        assert b"Traceback" not in err and b"nothing to run" not in err, err.decode()
    store = SqliteStore(db) if schema is None else PostgresStore(db, schema=schema)
    async with store:
        rows = await store.group_members("drain")
    assert {r.state for r in rows} == {WorkflowState.COMPLETED} and len(rows) == len(starts)
