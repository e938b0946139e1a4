"""Review A #1 across processes: a cancel from this process, a retry here, and the body of
the other process's attempt still running long past its lease: this engine starts the step
only once that body has returned and its engine handed the fence back."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from fence_child import TTL, workflow

from agentq import Queue, RunStatus, WorkflowEngine
from agentq.store import CANCEL_HANDED_BACK_REASON, SqliteStore

pytestmark = pytest.mark.timeout(60)

HERE = Path(__file__).parent


async def test_a_retry_in_another_process_waits_for_the_old_thread_body(
    tmp_path: Path,
) -> None:
    db, marks, flag = tmp_path / "f.db", tmp_path / "marks.txt", tmp_path / "flag"
    async with SqliteStore(db):
        pass  # created before the child opens it
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "fence_child.py"), str(db), str(marks), str(flag),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(30):
            while True:  # the child's body started
                if marks.exists() and "start" in marks.read_text():
                    break
                await asyncio.sleep(0.02)
        async with Queue() as queue, SqliteStore(db) as store:
            b = WorkflowEngine(queue, store, worker_id="b", lease_ttl=TTL, poll_interval=0.05)
            assert await b.cancel("wf", "from b")
            fenced_until = (await store.step_rows("wf"))[0].lease_expires_at
            assert fenced_until is not None
            await store.retry_workflow("wf", None, time.time())  # as `agentq retry` does
            run_b = asyncio.ensure_future(b.run(workflow(marks, flag)))
            try:
                async with asyncio.timeout(30):  # the child renews the fence, again and again
                    while True:
                        row = (await store.step_rows("wf"))[0]
                        assert (row.worker_id, row.lease_token) == ("a", 1), "taken over"
                        assert row.lease_expires_at is not None, "the fence was lifted"
                        if row.lease_expires_at > fenced_until + 4 * TTL:
                            break
                        await asyncio.sleep(0.05)
                assert not run_b.done() and marks.read_text().count("start") == 1
            finally:
                flag.touch()  # the old body returns; its engine hands the fence back
            async with asyncio.timeout(30):
                result = await run_b
            assert result.status is RunStatus.COMPLETED
            events = await store.load_events("wf")
        assert [line.split()[0] for line in marks.read_text().splitlines()] == [
            "start", "end", "start", "end"]
        kinds = [str(e.kind) for e in events]
        released = kinds.index("LeaseReleased")
        assert events[released].data["reason"] == CANCEL_HANDED_BACK_REASON
        assert released < len(kinds) - 1 - kinds[::-1].index("StepStarted")
        async with asyncio.timeout(30):
            assert await child.wait() == 0
    finally:
        flag.touch()
        if child.returncode is None:
            child.kill()
            await child.wait()
