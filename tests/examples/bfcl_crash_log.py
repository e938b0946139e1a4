"""Helpers of the BFCL crash tests (not a test module): run the replay's command line in a child
process, and read what a run killed with SIGKILL left in agentq's log and in the service host.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from agentq.store import CallKind, CallState, SqliteStore, StepState

ROOT = Path(__file__).parents[2]


def run_replay(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m examples.bfcl_replay --db <folder>/bfcl.db ARGS`` in a child process."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "examples.bfcl_replay", "--db", str(folder / "bfcl.db"), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env=env,
        check=False,
    )


def applied_keys(path: Path) -> list[str]:
    """The keys the service host committed (one row per key), in no particular order."""
    with sqlite3.connect(path) as db:
        keys = [key for (key,) in db.execute("SELECT idempotency_key FROM applied_calls")]
    db.close()
    return keys


@dataclass(frozen=True)
class LeftByCrash:
    """What a killed replay left behind.

    Attributes:
        killed: The key of the state-changing call the process died around (its marker).
        completed: Call keys completed in agentq's log.
        in_doubt: Call keys started in agentq's log and never finished.
        applied: Keys the service host committed.
        answered_later: Completed calls of the steps that had not completed: the rerun runs
            those steps again, and each such call is answered from the log.
    """

    killed: str
    completed: frozenset[str]
    in_doubt: frozenset[str]
    applied: frozenset[str]
    answered_later: int


def read_crash(folder: Path, point: str, after: int) -> LeftByCrash:
    """Read the marker, agentq's log (``<folder>/bfcl.db``) and the host's file after a kill."""
    marker = folder / f"bfcl-services.db.crashed-{point}-{after}"
    killed = str(json.loads(marker.read_text())["key"])

    async def read() -> LeftByCrash:
        async with SqliteStore(folder / "bfcl.db") as store:
            calls = [row for row in await store.calls() if row.kind == CallKind.CALL]
            steps = {
                (row.workflow_id, row.step_index): row.state for row in await store.step_rows()
            }
        completed = [row for row in calls if row.state == CallState.COMPLETED]
        unfinished = sum(
            steps[(row.workflow_id, row.step_index)] != StepState.COMPLETED for row in completed
        )
        return LeftByCrash(
            killed,
            frozenset(row.key for row in completed),
            frozenset(row.key for row in calls if row.state == CallState.STARTED),
            frozenset(applied_keys(folder / "bfcl-services.db")),
            unfinished,
        )

    return asyncio.run(read())
