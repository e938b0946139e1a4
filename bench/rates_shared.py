"""Budgets shared through PostgreSQL by two processes: achieved rates beside their limits.

Run: ``python -m bench.rates_shared [--dsn DSN]`` (about 25 s, plus a throwaway cluster of its
own without ``--dsn`` or ``AGENTQ_PG_DSN``, started as ``tests/pg_cluster.py`` does). Two
worker processes (``python -m bench.rates_shared --worker ...``) each open a `PostgresStore`
on one schema and a `Queue(store=...)` whose MEDIUM lane has the same budget, push their
jobs at once and report the wall-clock time each body started. Rows:

- **2 processes, Rate(20, 1 s)**: 80 no-op jobs each (160 in all) through one shared
  ``rate=Rate(20, 1.0)``: the achieved rate after the first burst of 20, and the most starts
  in any 1 s window across both processes, beside the limit (one budget for both: a queue
  per process without the store would start 40 a second): as the store charged them (the
  gate's decisions), and as the bodies began (a body begins a little after its charge, later
  on a loaded machine, so a window of body starts may hold one or two more).
- **2 processes, 429 storm**: 40 jobs each in a lane with ``rate=Rate(1000, 1.0)`` (shared,
  in effect unlimited); every fifth job's first attempt fails with HTTP 429 and
  ``Retry-After: 0.5``. How long after a refusal its pause was stored (committed), and the
  *other* process's first attempts after that: the next one's gap after the refusal, and
  how many began while the stored pause was on (more than 20 ms after it was stored: a start
  the store granted just before the pause was stored may begin a little after it).

- **2 processes, one run group**: one process submits a group of 120 members (one step
  that works 50 ms) and drains its results, the other serves the definition; both engines'
  MEDIUM lanes have 8 permits and one shared ``rate=Rate(20, 1.0)``. The members per second
  achieved after the first burst, beside the limit; the share of the members each process
  ran (the submitter claims only what its lane can start, so the server takes members
  too); the most starts in any 1 s window as the store charged them.

Each row ends with the machine's load average (``os.getloadavg``), as the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from agentq import (  # noqa: E402
    BudgetGrant,
    Job,
    LaneConfig,
    Priority,
    Queue,
    Rate,
    StepContext,
    StepDef,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.retry import RetryPolicy  # noqa: E402
from agentq.store import PostgresStore  # noqa: E402


def load() -> str:
    """The machine's 1-minute load average, for the rows."""
    return f"load {os.getloadavg()[0]:.2f}"


class TooMany(Exception):
    def __init__(self) -> None:
        super().__init__("HTTP 429")
        self.status_code = 429
        self.headers = {"retry-after": "0.5"}


async def worker(dsn: str, schema: str, name: str, jobs: int, count: int, storm: bool) -> None:
    """One process: drain `jobs` jobs through the shared lane; print the events as JSON."""
    events: list[tuple[float, str]] = []  # (wall time, "start" | "refused" | "retry")
    seen: set[str] = set()

    def body(key: str) -> Callable[[], Coroutine[Any, Any, str]]:
        async def run() -> str:
            first = key not in seen
            seen.add(key)
            if storm and first and int(key.split("-")[1]) % 5 == 0:
                events.append((time.time(), "refused"))
                raise TooMany()
            events.append((time.time(), "start" if first else "retry"))
            return key

        return run

    class Noted(PostgresStore):
        async def take_budget(self, lane: str, **kwargs: Any) -> BudgetGrant:
            grant = await super().take_budget(lane, **kwargs)
            if grant.charge is not None:  # the time the store charged: the gate's decision
                events.append((kwargs["now"], "charged"))
            return grant

        async def pause_lane(self, lane: str, until: float) -> None:
            await super().pause_lane(lane, until)
            events.append((time.time(), "stored"))  # the pause is committed: all see it

    lane = LaneConfig(capacity=jobs + 10, permits=10, rate=Rate(count, 1.0))
    policy = RetryPolicy(max_attempts=3)
    async with Noted(dsn, schema=schema) as store, Queue(
        {Priority.MEDIUM: lane}, store=store
    ) as queue:
        print("ready", flush=True)  # both processes start their pushes together, on "go"
        await asyncio.to_thread(sys.stdin.readline)
        handles = [
            queue.push_nowait(Job(f"{name}-{i}", body(f"{name}-{i}"), retry=policy,
                                  persist=False))
            for i in range(jobs)
        ]
        for accepted in handles:
            await accepted.handle  # type: ignore[union-attr]
    print(json.dumps(events))


def _member(events: list[tuple[float, str]]) -> WorkflowDef:
    """The group's members: one step that notes its start and works 50 ms."""

    async def work(ctx: StepContext) -> int:
        events.append((time.time(), "start"))
        await asyncio.sleep(0.05)
        return int(ctx.input)

    return WorkflowDef("member", [StepDef("work", work)])


async def group_worker(dsn: str, schema: str, role: str, members: int, count: int) -> None:
    """One process of the group row: ``submit`` the group and drain it, or ``serve`` until a
    line on stdin; print the body starts and the store's charges as JSON."""
    events: list[tuple[float, str]] = []

    class Noted(PostgresStore):
        async def take_budget(self, lane: str, **kwargs: Any) -> BudgetGrant:
            grant = await super().take_budget(lane, **kwargs)
            if grant.charge is not None:
                events.append((kwargs["now"], "charged"))
            return grant

    lane = LaneConfig(capacity=members + 10, permits=8, rate=Rate(count, 1.0))
    async with Noted(dsn, schema=schema) as store, Queue({Priority.MEDIUM: lane}) as queue:
        engine = WorkflowEngine(queue, store, poll_interval=0.1)
        member = _member(events)
        if role == "serve":
            engine.register(member)
            stop = asyncio.Event()
            serving = asyncio.ensure_future(engine.serve(poll_interval=0.1, stop=stop))
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
            stop.set()
            await serving
        else:
            group = engine.group("bench")
            await group.submit(member, {f"m{n:03d}": n for n in range(members)})
            done = [m async for m in group.results()]
            assert len(done) == members and {m.status for m in done} == {"completed"}
        await engine.close()
    print(json.dumps(events), flush=True)


def _most_in_window(times: list[float], per: float) -> int:
    return max(sum(1 for u in times if t - per < u <= t) for t in times)


def _two_workers(dsn: str, jobs: int, count: int, storm: bool) -> dict[str, list[list[Any]]]:
    schema = f"rates_{uuid.uuid4().hex[:8]}"
    asyncio.run(_create(dsn, schema))
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "bench.rates_shared", "--worker", name, "--dsn", dsn,
             "--schema", schema, "--jobs", str(jobs), "--count", str(count)]
            + (["--storm"] if storm else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=_HERE.parent, text=True,
        )
        for name in ("p1", "p2")
    }
    for proc in procs.values():  # both have opened their store and queue
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs.values():
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    return {name: json.loads(proc.communicate(timeout=120)[0]) for name, proc in procs.items()}


async def _create(dsn: str, schema: str) -> None:
    async with PostgresStore(dsn, schema=schema):
        pass  # the schema and its tables, before two processes race to make them


def shared_rate(dsn: str) -> None:
    count, jobs = 20, 80
    out = _two_workers(dsn, jobs, count, storm=False)
    starts = sorted(t for events in out.values() for t, kind in events if kind == "start")
    span = starts[-1] - starts[0]
    achieved = (len(starts) - count) / span  # the first window is a burst of `count`
    charged = sorted(t for events in out.values() for t, kind in events if kind == "charged")
    print(f"  2 processes, one lane on PostgreSQL   limit {count}/s   achieved "
          f"{achieved:5.1f}/s after the first burst ({len(starts)} starts)   most in any 1 s "
          f"window: {_most_in_window(charged, 1.0)} charged by the store, "
          f"{_most_in_window(starts, 1.0)} body starts   {load()}")


def storm(dsn: str) -> None:
    out = _two_workers(dsn, 40, 1000, storm=True)
    lags: list[float] = []  # from a refusal to its pause being stored
    gaps: list[float] = []  # from a stored pause to the other process's next first attempt
    inside = 0  # first attempts of the other process while a stored pause was on
    for name, events in out.items():
        other = sorted(t for n, evs in out.items() if n != name for t, kind in evs
                       if kind == "start")  # first attempts: a retry waits for its own pause
        refusals = sorted(t for t, kind in events if kind == "refused")
        stored = sorted(t for t, kind in events if kind == "stored")
        for refused, done in zip(refusals, stored, strict=False):
            lags.append(done - refused)
            after = [t for t in other if t > done + 0.02]  # a grant made before it, started
            inside += sum(t < refused + 0.5 for t in after)
            if after:
                gaps.append(after[0] - refused)
    count = sum(kind == "refused" for evs in out.values() for _, kind in evs)
    lags.sort()
    print(f"  2 processes, 429 storm, Retry-After 0.50 s   {count} refusals; pause stored "
          f"{1000 * lags[len(lags) // 2]:.0f} ms after a refusal (median, max "
          f"{1000 * lags[-1]:.0f} ms); the other process's next first attempt came "
          f">= {min(gaps):.3f} s after the refusal; {inside} began inside a stored pause   "
          f"{load()}")


def one_group(dsn: str) -> None:
    count, members = 20, 120
    schema = f"rates_{uuid.uuid4().hex[:8]}"
    asyncio.run(_create(dsn, schema))

    def spawn(role: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "bench.rates_shared", "--group", role, "--dsn", dsn,
             "--schema", schema, "--jobs", str(members), "--count", str(count)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=_HERE.parent, text=True,
        )

    def events(proc: subprocess.Popen[str], said: str | None = None) -> list[list[Any]]:
        stdout, stderr = proc.communicate(said, timeout=300)
        assert proc.returncode == 0, stderr  # its log (serve's stop, at WARNING) else unsaid
        return list(json.loads(stdout))

    server = spawn("serve")
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    out = {"submitter": events(spawn("submit"))}
    out["server"] = events(server, "stop\n")
    starts = {name: sorted(t for t, kind in evs if kind == "start") for name, evs in out.items()}
    every = sorted(t for times in starts.values() for t in times)
    achieved = (len(every) - count) / (every[-1] - every[0])  # the first window is a burst
    charged = sorted(t for evs in out.values() for t, kind in evs if kind == "charged")
    shares = ", ".join(f"{name} {100 * len(times) / len(every):.0f}%"
                       for name, times in starts.items())
    print(f"  2 processes, one run group on PostgreSQL   limit {count}/s   achieved "
          f"{achieved:5.1f} members/s after the first burst ({len(every)} members)   ran by "
          f"{shares}   most in any 1 s window: {_most_in_window(charged, 1.0)} charged by the "
          f"store   {load()}")


def main(dsn: str) -> None:
    print("Rate limits shared through PostgreSQL (real clock, two processes)")
    shared_rate(dsn)
    storm(dsn)
    one_group(dsn)


def run(dsn: str | None) -> None:
    """Run on `dsn`, or on a throwaway cluster of its own."""
    if dsn:
        main(dsn)
        return
    from tests.pg_cluster import Cluster

    cluster = Cluster().start()
    try:
        main(cluster.dsn())
    finally:
        cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("AGENTQ_PG_DSN"))
    parser.add_argument("--worker")
    parser.add_argument("--group", choices=["submit", "serve"])
    parser.add_argument("--schema", default="agentq")
    parser.add_argument("--jobs", type=int, default=80)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--storm", action="store_true")
    args = parser.parse_args()
    if args.group:
        asyncio.run(group_worker(args.dsn, args.schema, args.group, args.jobs, args.count))
    elif args.worker:
        asyncio.run(worker(args.dsn, args.schema, args.worker, args.jobs, args.count,
                           args.storm))
    else:
        run(args.dsn)
