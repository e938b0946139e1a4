"""The small version of ``bench/scale.py``: 4 serving processes on one SQLite file or PostgreSQL
schema, 200 three-step workflows started by definition, one process SIGKILLed mid-run.

Every step body runs once, except those in flight in the killed process: each of those runs
at most once more, in a survivor, and has a `WorkerRecovered` naming the killed worker. The
children and helpers are those of `test_serving_processes.py` (``serve_child.py``: each body
appends ``"<workflow> <step> <pid>"`` to a side file, so the counts are what really ran).
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
import serve_child as child
from test_serving_processes import Db, all_completed, bodies_ran, ran, servers

from agentq import Queue, WorkflowEngine
from agentq.events import EventKind

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

WORKFLOWS = 200
STEPS = "abc"
PERMITS = 4  # serve_child's lane: at most this many bodies in flight per process


@pytest.fixture(params=["sqlite", "postgres"])
def scale_db(request: pytest.FixtureRequest, tmp_path: Path) -> Db:
    if request.param == "sqlite":
        return Db(str(tmp_path / "scale.db"))
    target = request.getfixturevalue("pg_target")
    return Db(target.dsn, target.schema)


async def test_four_servers_one_killed_finish_200_workflows(
    scale_db: Db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTQ_SERVE_WORK", "0.01")  # short bodies: the kill finds some in flight
    side = tmp_path / "side.txt"
    ids = [f"job-{i:03d}" for i in range(WORKFLOWS)]
    async with Queue() as queue, scale_db.open() as store:
        starter = WorkflowEngine(queue, store, worker_id="starter")
        for i, wid in enumerate(ids):
            assert await starter.start(child.definition(side), wid, i)
    async with servers(scale_db, side, "doomed", "s1", "s2", "s3") as procs:
        doomed = procs[0]
        await bodies_ran(side, doomed.pid, 30)  # a fifth of its share: mid-run
        doomed.send_signal(signal.SIGKILL)
        await doomed.wait()
        await all_completed(scale_db, ids)
        survivors = {str(p.pid) for p in procs[1:]}
    runs, where = ran(side)
    assert set(runs) == {(w, s) for w in ids for s in STEPS}  # every step ran
    async with scale_db.open() as store:
        events = await store.load_events()
    recovered = [e for e in events if e.kind is EventKind.WORKER_RECOVERED]
    taken = {(e.workflow_id, e.step_name) for e in recovered}
    twice = {key for key, n in runs.items() if n > 1}
    assert all(e.data["previous_worker"] == f"doomed:{doomed.pid}" for e in recovered)
    assert len(taken) <= PERMITS  # only what it had in flight was taken over
    assert twice <= taken  # nothing ran twice without a takeover
    for key in twice:  # once in the killed process, once more in a survivor
        assert runs[key] == 2 and where[key][0] == str(doomed.pid) and where[key][1] in survivors
    once = Counter(n for n in runs.values())
    assert once[1] == WORKFLOWS * len(STEPS) - len(twice)
    print(
        f"scale: {sum(runs.values())} bodies for {WORKFLOWS * len(STEPS)} steps; "
        f"{len(twice)} ran twice; {len(recovered)} WorkerRecovered"
    )
