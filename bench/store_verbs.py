"""CPU per `SqliteStore` verb, beside the CPU of the same transaction in plain sqlite3.

    python -m bench.store_verbs [--workflows 300] [--repeat 3]

Each round drives `--workflows` three-step workflows through the store's verbs, one after
another, as the engine calls them: ``start_workflow``; per step ``claim_step``,
``renew_lease``, two durable calls (``start_call`` then ``complete_call``) and
``complete_step``; the middle step also waits for input (``wait_step``), is answered
(``resume_step``) and claimed again. Every verb is timed alone with `time.process_time` (the
CPU of every thread of the process, so a verb shipped to the connection's thread counts too);
a row prints the best round's mean CPU per call.

The floor row is the least a durable verb can cost here: plain `sqlite3`, no event loop, one
transaction per event (``BEGIN IMMEDIATE``, insert the event, upsert its row, ``COMMIT``) on the
same schema, WAL, ``synchronous=NORMAL``. Read the ratios within one run: the machine's load
average is printed before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

# Run as a script, bench/ comes first on sys.path and its queue.py would shadow the stdlib's.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from agentq.store import Claimed, SqliteStore  # noqa: E402
from agentq.store.sqlite.schema import migrate  # noqa: E402

T0 = 1_767_225_600.0
STEPS = ("a", "b", "c")
T = TypeVar("T")

_INSERT_EVENT = (
    "INSERT INTO events (at, workflow_id, step_index, step_name, kind, attempt, worker_id, data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_STEP = (
    "INSERT INTO steps (workflow_id, step_index, step_name, state, attempt, worker_id, "
    "lease_token, lease_expires_at, resumed) VALUES (?, ?, ?, 'leased', 1, 'bench', ?, ?, 0) "
    "ON CONFLICT (workflow_id, step_index) DO UPDATE SET lease_token = excluded.lease_token, "
    "lease_expires_at = excluded.lease_expires_at"
)


def floor(path: Path, transactions: int) -> float:
    """Plain sqlite3, one ``BEGIN IMMEDIATE`` / insert / upsert / ``COMMIT`` per event; return
    the CPU seconds per transaction."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    migrate(conn, str(path))
    start = time.process_time()
    for i in range(transactions):
        wid = f"wf-{i // 8}"
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            _INSERT_EVENT,
            (T0 + i, wid, 0, "a", "StepStarted", 1, "bench", json.dumps({"lease_token": i})),
        )
        conn.execute(_UPSERT_STEP, (wid, i % 8, "a", i, T0 + i + 30))
        conn.execute("COMMIT")
    cpu = time.process_time() - start
    conn.close()
    return cpu / transactions


class Timer:
    """CPU seconds and calls per verb name."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    async def __call__(self, name: str, verb: Awaitable[T]) -> T:
        start = time.process_time()
        result = await verb
        self.cpu[name] += time.process_time() - start
        self.calls[name] += 1
        return result


async def one_workflow(store: SqliteStore, timed: Timer, wid: str, now: float) -> None:
    """One three-step workflow through the verbs, each timed under its name."""
    await timed("start_workflow", store.start_workflow(wid, STEPS, {"prompt": "hi"}, now))
    for index in range(len(STEPS)):
        claim = await timed("claim_step", store.claim_step(wid, index, "bench", 30.0, now))
        assert isinstance(claim, Claimed), claim
        ex = await timed("renew_lease", store.renew_lease(claim.execution, 30.0, now))
        for k in range(2):
            key = f"call-{index}-{k}"
            await timed(
                "start_call",
                store.start_call(ex, key, fingerprint="f", lane=None, label={"t": k}, now=now),
            )
            await timed(
                "complete_call",
                store.complete_call(
                    ex, key, output={"k": k}, usage={"tokens": 3}, duration=0.01, now=now
                ),
            )
        if index == 1:
            await timed("wait_step", store.wait_step(ex, "approve?", now, key="approve"))
            await timed("resume_step", store.resume_step(wid, index, True, now, key="approve"))
            claim = await timed("claim_step", store.claim_step(wid, index, "bench", 30.0, now))
            assert isinstance(claim, Claimed), claim
            ex = claim.execution
        await timed("complete_step", store.complete_step(ex, {"step": index}, now))


async def round_(workflows: int) -> Timer:
    """One round on a fresh file; returns its timings."""
    timed = Timer()
    with tempfile.TemporaryDirectory(prefix="agentq-bench-") as tmp:
        async with SqliteStore(Path(tmp) / "bench.db") as store:
            warm = Timer()
            for w in range(5):
                await one_workflow(store, warm, f"warm-{w}", T0)
            for w in range(workflows):
                await one_workflow(store, timed, f"wf-{w}", T0 + w)
    return timed


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


async def main(workflows: int, repeat: int, run: Callable[[int], Awaitable[Timer]]) -> None:
    print(
        f"bench/store_verbs.py: {workflows} workflows of the store's verbs, one after another, "
        f"best of {repeat}; SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
        f"WAL, synchronous=NORMAL; {_load()}"
    )
    best: dict[str, float] = {}
    calls: dict[str, int] = {}
    floors = []
    for _ in range(repeat):
        timed = await run(workflows)
        for name, cpu in timed.cpu.items():
            per = cpu / timed.calls[name]
            best[name] = min(per, best.get(name, per))
            calls[name] = timed.calls[name]
        with tempfile.TemporaryDirectory(prefix="agentq-bench-") as tmp:
            floors.append(floor(Path(tmp) / "floor.db", workflows * 8))
    base = min(floors)
    total = sum(best[n] * calls[n] for n in best) / sum(calls.values())
    print(f"{'row':<52}{'calls':>8}{'CPU us/call':>13}{'vs floor':>10}")
    print(f"{'floor: sqlite3, 1 tx (insert + upsert), no loop':<52}{'':>8}"
          f"{base * 1e6:>13.1f}{1:>9.2f}x")
    for name in sorted(best, key=lambda n: -best[n]):
        print(f"{'store: ' + name:<52}{calls[name]:>8}{best[name] * 1e6:>13.1f}"
              f"{best[name] / base:>9.2f}x")
    print(f"{'store: every verb above, weighted by calls':<52}{sum(calls.values()):>8}"
          f"{total * 1e6:>13.1f}{total / base:>9.2f}x")
    print(f"after: {_load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.workflows, args.repeat, round_))
