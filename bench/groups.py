"""Run-group throughput on SQLite: members ended per second, submitted as one group.

    python -m bench.groups [--members 200] [--permits 16] [--repeat 3]

Each round makes a fresh SQLite file (WAL, ``synchronous=NORMAL``), submits a group of N
trivial members (one step that returns its input) with `WorkflowEngine.group(...).submit`,
and drains `results()` until the last member has ended; the rate is members / seconds from
the submit to the last result (the manifest, N starts, N runs, N reads of the ends). A
second row submits the same group again on the same file: nothing runs, every member is
answered from its record. The best of `repeat` rounds is printed, with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script, bench/ comes first on sys.path and its queue.py would shadow the stdlib's.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from agentq import (  # noqa: E402
    LaneConfig,
    Priority,
    Queue,
    StepContext,
    StepDef,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.store import SqliteStore  # noqa: E402


async def _echo(ctx: StepContext) -> Any:
    return ctx.input


TRIVIAL = WorkflowDef("trivial", [StepDef("echo", _echo)])


async def one_round(path: Path, members: int, permits: int) -> tuple[float, float]:
    """Submit and drain a fresh group, then submit it again; the two rates (members/s)."""
    items = {f"m{n:05d}": n for n in range(members)}
    rates = []
    lanes = {Priority.MEDIUM: LaneConfig(capacity=members + 10, permits=permits)}
    async with Queue(lanes) as queue, SqliteStore(path) as store:
        engine = WorkflowEngine(queue, store)
        for _ in range(2):
            group = engine.group("bench")
            start = time.perf_counter()
            await group.submit(TRIVIAL, items)
            ended = [m async for m in group.results()]
            rates.append(len(ended) / (time.perf_counter() - start))
            assert len(ended) == members and {m.status for m in ended} == {"completed"}
        await engine.close()
    return rates[0], rates[1]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


async def main(members: int, permits: int, repeat: int) -> None:
    print(f"bench/groups.py: {members} trivial members, {permits} permits, best of {repeat}; "
          f"{_load()}")
    first, again = 0.0, 0.0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="agentq-bench-") as tmp:
            a, b = await one_round(Path(tmp) / "groups.db", members, permits)
        first, again = max(first, a), max(again, b)
    print(f"{'row':<48}{'members/s':>12}")
    print(f"{'submit + results (every member runs)':<48}{first:>12,.0f}")
    print(f"{'the same group again (every member recorded)':<48}{again:>12,.0f}")
    print(f"after: {_load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--members", type=int, default=200)
    parser.add_argument("--permits", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.members, args.permits, args.repeat))
