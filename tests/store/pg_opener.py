"""An opener for `test_postgres.py`: opens a `PostgresStore` on a new database at the same time
as other processes, so that they migrate it together.

Run as ``python pg_opener.py DSN INDEX``: prints ``ready``, waits for a line on stdin, opens
the store (creating agentq's tables unless another process did), starts workflow
``wf{INDEX}`` and prints its id. Any error exits non-zero.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agentq.store import PostgresStore


async def main(dsn: str, index: str) -> None:
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    async with PostgresStore(dsn) as store:
        await store.start_workflow(f"wf{index}", ["a"], None, 1.0)
    print(f"wf{index}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
