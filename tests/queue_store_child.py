"""A process for the Queue(store=) crash test: pushes one key through a SQLite file, then hangs.

Usage: python tests/queue_store_child.py DB MARKS KEY TO

Pushes ``Job(KEY, partial(send_mail, MARKS, TO))`` with ``push_and_wait`` and prints one line,
``done <output as JSON>`` or ``conflict <message>``, once it has its answer; then it sleeps
until the parent kills it with SIGKILL (the queue and the store are never closed).
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys

from queue_helpers import send_mail

from agentq import Job, KeyConflictError, Queue, SqliteStore


async def main(db: str, marks: str, key: str, to: str) -> None:
    queue = Queue(store=await SqliteStore.open(db))
    try:
        output = await queue.push_and_wait(Job(key, functools.partial(send_mail, marks, to)))
    except KeyConflictError as exc:
        print("conflict", exc, flush=True)
    else:
        print("done", json.dumps(output), flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
