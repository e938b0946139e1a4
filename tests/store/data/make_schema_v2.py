"""Write ``schema-v2.db``: a SQLite file as the last release of schema version 2 wrote it.

`tests/store/test_migration.py` opens a copy of it with the current agentq (which migrates
it) and checks that every workflow in it keeps working. The committed file was made by running
this script with agentq at commit e8432a7 (schema version 2) on the path::

    mkdir /tmp/agentq-v2 && git archive e8432a7 agentq | tar -x -C /tmp/agentq-v2
    PYTHONPATH=/tmp/agentq-v2 python tests/store/data/make_schema_v2.py

It only uses verbs that release had, so it also runs (and writes the current version) today.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agentq.outcomes import ErrorInfo
from agentq.store import Claimed, SqliteStore

T0 = 1_767_225_600.0
PATH = Path(__file__).with_name("schema-v2.db")


async def claim(store: SqliteStore, workflow_id: str, index: int, ttl: float = 10.0) -> object:
    result = await store.claim_step(workflow_id, index, "old-worker", ttl, T0)
    assert isinstance(result, Claimed), result
    return result.execution


async def main() -> None:
    PATH.unlink(missing_ok=True)
    async with SqliteStore(PATH) as store:
        await store.start_workflow("done", ["a", "b"], {"n": 1}, T0)
        for index, output in enumerate(({"x": [1, 2]}, "ok")):
            await store.complete_step(await claim(store, "done", index), output, T0)  # type: ignore[arg-type]
        await store.start_workflow("waiting", ["a", "b"], None, T0)
        await store.complete_step(await claim(store, "waiting", 0), 1, T0)  # type: ignore[arg-type]
        await store.wait_step(await claim(store, "waiting", 1), "approve?", T0)  # type: ignore[arg-type]
        await store.start_workflow("crashed", ["a"], None, T0)
        await claim(store, "crashed", 0, ttl=5.0)  # its worker died: the lease expires
        await store.start_workflow("retrying", ["a"], None, T0)
        failed = await claim(store, "retrying", 0)
        await store.fail_step(failed, "error", ErrorInfo("E", "m", "t"), T0, T0 + 1)  # type: ignore[arg-type]
        await store.start_workflow("pending", ["a", "b"], [1, "two"], T0)
        await store.start_workflow("cancelled", ["a"], None, T0)
        await store.wait_step(await claim(store, "cancelled", 0), "never", T0)  # type: ignore[arg-type]
        await store.cancel_workflow("cancelled", "stop", T0)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
