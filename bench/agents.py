"""Durable agent runs: agentq beside a plain pydantic-ai `Agent` and the durable peers.

    python -m bench.agents [--runs 200] [--repeat 3] [--memory-runs 10000] [--only plain,agentq]
    python -m bench.agents --profile agentq [--runs 200] [--at-a-time 1] [--top 40]

The workload (bench/agents_workload.py): one prompt, 5 model requests each asking for 2 tool
calls (tools that do no work), then the final answer. Rows, each as its users write it:

- pydantic-ai `Agent.run`, no durability: the limit (1x);
- agentq `DurableAgent.run` on a `SqliteStore` (docs/agents.md);
- agentq, the same run through ``engine.start`` + ``engine.run`` (no `AgentRun` built);
- LangGraph's prebuilt ReAct agent with `AsyncSqliteSaver` at its fastest safe setting (WAL,
  synchronous=NORMAL, ``durability="sync"``);
- pydantic-ai's `DBOSDurability` on DBOS's SQLite system database (WAL, synchronous=NORMAL),
  its tool a ``@DBOS.step()``.

The peers come from the ``bench`` extra (``pip install -e '.[bench]'``; `make bench` installs
it into its own environment, .venv-bench); a peer that is not installed prints
``not installed`` and why.

Tables:

- throughput: `--runs` runs one after another, then `--runs` runs 16 at a time; runs/s (best
  of `--repeat`, interleaved), the ratio to the limit, and the CPU a run (every thread of the
  process, `time.process_time`);
- latency: one run with model requests sleeping 100 ms and tools 50 ms, its wall time against
  the limit's;
- memory: the RSS of one process after `--memory-runs` / 10 and after `--memory-runs` finished
  `DurableAgent` runs on one engine (16 at a time): flat or not.

Each measurement runs in a process of its own on a new directory (DBOS is one per process;
no row inherits another's memory), after 5 warm-up runs that are not timed. The load average
is printed before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.agents_workload import ENGINES, PEERS

WARMUP = 5
AT_A_TIME = 16
LIMIT = "plain"


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _rss_mib() -> float:
    """This process's resident set now, in MiB (Linux's /proc; else the peak, from rusage)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _pool(run_one: Any, ids: list[str], at_a_time: int) -> None:
    todo = iter(ids)

    async def worker() -> None:
        for run_id in todo:
            await run_one(run_id)

    await asyncio.gather(*(worker() for _ in range(at_a_time)))


async def child(engine: str, runs: int, at_a_time: int, latency: bool) -> dict[str, Any]:
    """One measurement, in this process: wall and CPU seconds of `runs` runs of `engine`."""
    make = ENGINES[engine][1]
    with tempfile.TemporaryDirectory(prefix="agentq-bench-") as tmp:
        async with make(Path(tmp), latency) as run_one:
            await _pool(run_one, [f"warm-{i}" for i in range(1 if latency else WARMUP)], 1)
            start, cpu = time.perf_counter(), time.process_time()
            await _pool(run_one, [f"run-{i}" for i in range(runs)], at_a_time)
            return {"wall": time.perf_counter() - start, "cpu": time.process_time() - cpu}


async def child_memory(checkpoints: list[int]) -> dict[str, Any]:
    """RSS (MiB) after each number of finished `DurableAgent` runs in `checkpoints`."""
    make = ENGINES["agentq"][1]
    rss: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="agentq-bench-") as tmp:
        async with make(Path(tmp), False) as run_one:
            done = 0
            for target in checkpoints:
                await _pool(run_one, [f"run-{i}" for i in range(done, target)], AT_A_TIME)
                done = target
                gc.collect()
                rss[str(target)] = _rss_mib()
                print(f"{target} runs: {rss[str(target)]:.1f} MiB", file=sys.stderr, flush=True)
    return {"rss": rss}


async def child_profile(engine: str, runs: int, at_a_time: int, top: int) -> None:
    """Run `runs` runs of `engine` under cProfile; print the top functions in ms a run."""
    import cProfile
    import pstats

    make = ENGINES[engine][1]
    profiler = cProfile.Profile(time.thread_time)  # the loop thread's CPU, not the wall
    with tempfile.TemporaryDirectory(prefix="agentq-bench-") as tmp:
        async with make(Path(tmp), False) as run_one:
            await _pool(run_one, [f"warm-{i}" for i in range(WARMUP)], 1)
            profiler.enable()
            await _pool(run_one, [f"run-{i}" for i in range(runs)], at_a_time)
            profiler.disable()
    stats = pstats.Stats(profiler)
    rows = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in rows.values())
    print(f"{engine}: {runs} runs, {at_a_time} at a time: {total / runs * 1000:.1f} ms "
          "of CPU a run on the loop's thread (time.thread_time; cProfile's own cost included)")
    for key, title in ((2, "own time"), (3, "cumulative")):
        print(f"\ntop {top} by {title} (ms a run, calls a run, function):")
        ranked = sorted(rows.items(), key=lambda kv: kv[1][key], reverse=True)[:top]
        for (file, line, func), (_, calls, tt, ct, _) in ranked:
            where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
            value = tt if key == 2 else ct
            print(f"{value / runs * 1000:>8.2f} {calls / runs:>8.1f}  {where} {func}")


def _spawn(args: list[str]) -> dict[str, Any] | str:
    """Run ``python -m bench.agents --child ...``; its JSON, or why it failed (a str)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.agents", *args], capture_output=True, text=True
    )
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        return f"failed: {lines[-1] if lines else f'exit {proc.returncode}'}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _missing(engine: str) -> str | None:
    """Why `engine` cannot run here, or None."""
    for module in PEERS.get(engine, ()):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"not installed: no module {module!r} (pip install -e '.[bench]')"
    return None


def _best(
    names: list[str], repeat: int, args: list[str], skip: dict[str, str]
) -> dict[str, tuple[float, float] | str]:
    """Best wall and least CPU seconds over `repeat` interleaved rounds, per engine."""
    best: dict[str, tuple[float, float] | str] = {}
    for _ in range(repeat):
        for name in names:
            if name in skip:
                best[name] = skip[name]
                continue
            got = _spawn(["--child", name, *args])
            if isinstance(got, str):
                best[name] = skip[name] = got
                continue
            old = best.get(name)
            wall, cpu = got["wall"], got["cpu"]
            if isinstance(old, tuple):
                wall, cpu = min(wall, old[0]), min(cpu, old[1])
            best[name] = (wall, cpu)
    return best


def throughput(names: list[str], runs: int, repeat: int, skip: dict[str, str]) -> None:
    one = _best(names, repeat, ["--runs", str(runs), "--at-a-time", "1"], skip)
    many = _best(names, repeat, ["--runs", str(runs), "--at-a-time", str(AT_A_TIME)], skip)
    print(f"\nthroughput: {runs} runs, best of {repeat}")
    print(f"{'engine':<48}{'1 at a time':>12}{'vs limit':>9}{'16 at a time':>13}"
          f"{'vs limit':>9}{'CPU/run':>9}{'(16)':>8}")
    limits = [one.get(LIMIT), many.get(LIMIT)]
    for name in names:
        cells = []
        for best, limit in zip((one, many), limits, strict=True):
            got = best[name]
            if isinstance(got, str):
                print(f"{ENGINES[name][0]:<48}{got}")
                break
            rate = runs / got[0]
            limit_rate = runs / limit[0] if isinstance(limit, tuple) else float("nan")
            cells.append((rate, rate / limit_rate, got[1] / runs * 1000))
        else:
            (r1, x1, c1), (r16, x16, c16) = cells
            print(f"{ENGINES[name][0]:<48}{r1:>12.1f}{x1:>8.2f}x{r16:>13.1f}{x16:>8.2f}x"
                  f"{c1:>7.1f}ms{c16:>6.1f}ms")


def latency(names: list[str], repeat: int, skip: dict[str, str]) -> None:
    best = _best(names, repeat, ["--runs", "1", "--at-a-time", "1", "--latency"], skip)
    limit = best.get(LIMIT)
    print("\nlatency: one run, model requests sleep 100 ms, tools 50 ms, best of "
          f"{repeat}")
    for name in names:
        got = best[name]
        if isinstance(got, str):
            print(f"{ENGINES[name][0]:<48}{got}")
        else:
            ratio = got[0] / limit[0] if isinstance(limit, tuple) else float("nan")
            print(f"{ENGINES[name][0]:<48}{got[0] * 1000:>8.0f} ms{ratio:>8.2f}x")


def memory(runs: int) -> None:
    first = max(runs // 10, 1)
    got = _spawn(["--child-memory", f"{first},{runs}"])
    print(f"\nmemory: RSS of one engine after finished DurableAgent runs ({AT_A_TIME} at a time)")
    if isinstance(got, str):
        print(f"{ENGINES['agentq'][0]:<48}{got}")
        return
    low, high = got["rss"][str(first)], got["rss"][str(runs)]
    per_run = (high - low) * 1024 / (runs - first) if runs > first else 0.0
    verdict = "flat" if high - low <= 0.05 * low else "grows"
    print(f"{ENGINES['agentq'][0]:<48}after {first:,}: {low:.1f} MiB, after {runs:,}: "
          f"{high:.1f} MiB ({per_run:+.2f} KiB a run: {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory-runs", type=int, default=10_000, help="0: no memory row")
    parser.add_argument("--only", default=",".join(ENGINES), help="engines, comma-separated")
    parser.add_argument("--child", choices=list(ENGINES), help=argparse.SUPPRESS)
    parser.add_argument("--child-memory", help=argparse.SUPPRESS)
    parser.add_argument(
        "--profile", choices=list(ENGINES),
        help="profile this engine's runs with cProfile instead (--runs, --at-a-time)",
    )
    parser.add_argument("--top", type=int, default=40, help="functions listed by --profile")
    parser.add_argument("--at-a-time", type=int, default=1, help="with --profile")
    parser.add_argument("--latency", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.child, args.runs, args.at_a_time, args.latency))))
        return
    if args.profile:
        asyncio.run(child_profile(args.profile, args.runs, args.at_a_time, args.top))
        return
    if args.child_memory:
        checkpoints = [int(n) for n in args.child_memory.split(",")]
        print(json.dumps(asyncio.run(child_memory(checkpoints))))
        return
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        parser.error(f"unknown engine(s) {unknown}; choose from {list(ENGINES)}")
    if LIMIT not in names:
        names.insert(0, LIMIT)
    print(f"bench/agents.py: {sys.executable}, Python {sys.version.split()[0]}; {_load()}")
    skip = {n: why for n in names if (why := _missing(n)) is not None}
    throughput(names, args.runs, args.repeat, skip)
    latency(names, args.repeat, skip)
    if args.memory_runs > 0:
        memory(args.memory_runs)
    print(f"\nafter: {_load()}")


if __name__ == "__main__":
    main()
