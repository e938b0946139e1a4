"""The command line on a big store: ``agentq ls`` and ``agentq events``, table and JSON.

    python -m bench.cli [--workflows 20000] [--path FILE]

Makes a SQLite store of `--workflows` two-step workflows, every tenth one cancelled with a
reason (in a temporary directory; with ``--path``, in FILE, or reuses FILE if it exists),
then times each command as a user runs it: ``python -m agentq`` in a subprocess
(interpreter start-up included), its output to a pipe (no terminal), best of 3 wall-clock
seconds (of 1 for the tables of every row, ``--all`` without ``--json``: about 30 s each).
The machine's load average is printed: numbers are comparable only on a quiet machine.
``docs/cli.md`` ("Pages") has the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentq.store import SqliteStore

COMMANDS = [
    ["ls"], ["ls", "--json"], ["ls", "--all"], ["ls", "--all", "--json"],
    ["ls", "--state", "cancelled"],
    ["events"], ["events", "--json"], ["events", "--all"], ["events", "--all", "--json"],
]


async def make_store(path: Path, workflows: int) -> None:
    """Start `workflows` two-step workflows in `path`, cancelling every tenth one."""
    store = await SqliteStore.open(path)
    try:
        for i in range(workflows):
            wid = f"wf-{i:06d}"
            await store.start_workflow(wid, ["plan", "act"], {"n": i}, 1_700_000_000.0 + i)
            if i % 10 == 0:
                await store.cancel_workflow(wid, f"cancelled by test #{i}", 1_700_000_000.5 + i)
    finally:
        await store.close()


def time_command(path: Path, args: list[str], repeat: int = 3) -> float:
    """Best wall-clock seconds of ``python -m agentq ARGS`` over `repeat` runs (output piped)."""
    best = float("inf")
    cmd = [sys.executable, "-m", "agentq", args[0], str(path), *args[1:]]
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, check=False)
        best = min(best, time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed: {done.stderr.decode()}")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cli", description=__doc__)
    parser.add_argument("--workflows", type=int, default=20_000)
    parser.add_argument("--path", type=Path, default=None,
                        help="the store file (reused if it exists); default: a new one in a "
                        "temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path or Path(tmp) / "cli.db"
        if not path.exists():
            start = time.perf_counter()
            asyncio.run(make_store(path, args.workflows))
            print(f"made {path} ({args.workflows} workflows) in "
                  f"{time.perf_counter() - start:.1f} s")
        print(f"load average {os.getloadavg()[0]:.2f}")
        for command in COMMANDS:
            repeat = 1 if "--all" in command and "--json" not in command else 3
            seconds = time_command(path, command, repeat)
            print(f"agentq {' '.join(command):28} {seconds:6.2f} s", flush=True)
        print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
