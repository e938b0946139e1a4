"""A racer for `test_processes.py`: claims and completes the steps of many workflows.

Run as ``python race_worker.py DB NAME ROUNDS``. It opens two `SqliteStore`s (two
connections) on DB, prints ``ready``, reads a Unix time on stdin and waits for it (so that
both processes start together), then races: each connection
runs four tasks over every workflow ``wf-0`` … ``wf-{ROUNDS-1}`` (three steps each), starting
it, claiming each step in turn and completing the steps it claimed; it moves on to the next
workflow when another racer holds a step. At the end it prints one JSON line:
``{"won": [[workflow_id, step_index, lease_token], …], "lost": N}`` (the claims it won, and
how many claims found the step held or completed by a rival). Any error exits non-zero.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agentq.store import AlreadyCompleted, Claimed, HeldByOther, SqliteStore

STEPS = ["a", "b", "c"]
TASKS = 4


async def race(
    store: SqliteStore, me: str, rounds: range, won: list[list[object]], lost: list[str]
) -> None:
    for r in rounds:
        wid = f"wf-{r}"
        await store.start_workflow(wid, STEPS, {"round": r}, time.time())
        for index in range(len(STEPS)):
            result = await store.claim_step(wid, index, me, 60.0, time.time())
            if isinstance(result, Claimed):
                won.append([wid, index, result.execution.lease_token])
                await store.complete_step(result.execution, {"by": me}, time.time())
            elif isinstance(result, HeldByOther):
                lost.append(wid)
                break  # the holder goes on with this workflow
            elif isinstance(result, AlreadyCompleted):
                lost.append(wid)
            else:
                raise AssertionError(f"{wid}[{index}]: unexpected {result!r}")


async def main(path: str, name: str, rounds: int) -> None:
    stores = [await SqliteStore.open(path) for _ in range(2)]
    try:
        print("ready", flush=True)
        start_at = float(await asyncio.to_thread(sys.stdin.readline))
        await asyncio.sleep(max(start_at - time.time(), 0.0))
        won: list[list[object]] = []
        lost: list[str] = []
        await asyncio.gather(
            *(
                race(store, f"{name}.{i}.{t}", range(t, rounds, TASKS), won, lost)
                for i, store in enumerate(stores)
                for t in range(TASKS)
            )
        )
        print(json.dumps({"won": won, "lost": len(lost)}), flush=True)
    finally:
        for store in stores:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
