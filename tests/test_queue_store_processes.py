"""Queue(store=) across processes: a key completed by a process killed with SIGKILL answers here.

Each child (tests/queue_store_child.py) pushes one key through the same SQLite file, prints
its answer and is killed with SIGKILL while it still holds the file open: what it completed
must already be on disk when its push_and_wait returned.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from pathlib import Path

import pytest
from queue_helpers import send_mail

from agentq import Cached, Job, KeyConflictError, Queue, SqliteStore

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

CHILD = Path(__file__).with_name("queue_store_child.py")


async def in_a_killed_process(db: Path, marks: Path, key: str, to: str) -> str:
    """Run the child until it answers, SIGKILL it, and return its answer line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), str(db), str(marks), key, to,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        async with asyncio.timeout(60):
            line = (await proc.stdout.readline()).decode().strip()
    finally:
        proc.kill()  # SIGKILL: no close, no cleanup
        _, err = await proc.communicate()
    assert proc.returncode == -9
    assert line, err.decode()[-2000:]
    return line


async def test_a_key_completed_before_a_kill_answers_in_another_process(tmp_path: Path) -> None:
    db, marks = tmp_path / "queue.db", tmp_path / "marks.txt"
    answer = await in_a_killed_process(db, marks, "mail-42", "alice")
    assert answer == 'done {"sent_to": "alice"}'
    assert marks.read_text() == "alice\n"

    async with SqliteStore(db) as store, Queue(store=store) as queue:
        bob = Job("mail-42", functools.partial(send_mail, str(marks), "bob"))
        with pytest.raises(KeyConflictError, match="stored outcome"):
            await queue.push_and_wait(bob)
        job = Job("mail-42", functools.partial(send_mail, str(marks), "alice"))
        assert await queue.push(job) == Cached({"sent_to": "alice"})
        assert await queue.push_and_wait(job) == {"sent_to": "alice"}
        with pytest.raises(KeyConflictError):  # now known in memory
            await queue.push_and_wait(bob)
        await queue.push_and_wait(
            Job("mail-43", functools.partial(send_mail, str(marks), "carol"))
        )
    assert marks.read_text() == "alice\ncarol\n"  # alice's mail was never sent again

    # And back: a third process sees this one's key, and refuses another call for it.
    assert await in_a_killed_process(db, marks, "mail-43", "carol") == (
        'done {"sent_to": "carol"}'
    )
    conflict = await in_a_killed_process(db, marks, "mail-42", "bob")
    assert conflict.startswith("conflict idempotency key 'mail-42' completed at ")
    assert marks.read_text() == "alice\ncarol\n"
