"""Running a crash child script in a real process, and reading its side file.

Shared by the tests that SIGKILL a child mid-run and continue its work in a new process
(durable calls, definitions, pydantic-ai agents). A child script takes ``MODE DB SIDE`` and
appends ``KEY PID`` to SIDE each time a body that reaches "the world" runs.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from pathlib import Path


async def run_child(
    script: Path, mode: str, db: Path, side: Path, **env: str
) -> tuple[int, str, str]:
    """Run ``script MODE DB SIDE`` with `env` added; its exit code, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), mode, str(db), str(side),
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def side_runs(side: Path) -> tuple[Counter[str], dict[str, set[str]]]:
    """How often each body ran, and in which processes (by pid)."""
    runs: Counter[str] = Counter()
    pids: dict[str, set[str]] = {}
    for line in side.read_text().splitlines():
        key, pid = line.rsplit(" ", 1)  # a key may hold spaces; the pid is last
        runs[key] += 1
        pids.setdefault(key, set()).add(pid)
    return runs, pids
