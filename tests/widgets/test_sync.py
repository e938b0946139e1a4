"""agentq.sync.run: the opt-in helper for code that cannot await (BH-22).

Anything that makes a loop re-entrant patches asyncio for the whole process, so every case that
nests runs in a subprocess (or a real Jupyter kernel), never in the test process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from agentq import sync

SETUP = """
import asyncio, time
from agentq import sync
from agentq.queue import Queue
from agentq.store import MemoryStore
from agentq.workflows import StepDef, Workflow, WorkflowEngine

async def slow(ctx):
    await asyncio.sleep(2)
    return "late"

async def quick(ctx):
    async with asyncio.timeout(1):          # needs a current task
        await asyncio.sleep(0)
    return "ok"

def workflow(workflow_id):
    return Workflow(workflow_id, [StepDef("quick", quick), StepDef("slow", slow, timeout=0.3)])

def check(engine, result, elapsed):
    assert result.status == "failed" and result.step == "slow", result
    assert result.reason == "timeout", result.reason
    assert result.outputs == ("ok",), result.outputs
    assert elapsed < 1.5, f"the step ran {elapsed:.2f} s: its 0.3 s timeout did not cut it"
"""

INSIDE_A_COROUTINE = SETUP + """
import sys
if sys.argv[1] == "patched-first":
    import nest_asyncio2
    nest_asyncio2.apply()                    # what some users (or libraries) do first

def blocking_helper(engine, wf):             # sync code, called from async code
    return sync.run(engine.run(wf))

async def main():
    async with Queue() as queue:
        engine = WorkflowEngine(queue, MemoryStore(), worker_id="w")
        start = time.monotonic()
        result = blocking_helper(engine, workflow("w1"))
        check(engine, result, time.monotonic() - start)
        kinds = [str(e.kind) for e in await engine.store.load_events("w1")]
        assert kinds.count("StepFailed") == 1 and kinds[-1] == "WorkflowFailed", kinds
        # The loop is still fine for plain awaits afterwards.
        result = await engine.run(Workflow("w2", [StepDef("quick", quick)]))
        assert result.status == "completed", result
        assert sync.run(asyncio.sleep(0.01, "nested again")) == "nested again"
    print("OK")

asyncio.run(main())
"""


def run_script(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("mode", ["plain", "patched-first"])
def test_bh22_sync_run_inside_a_running_coroutine_keeps_step_timeouts(mode: str) -> None:
    assert run_script(INSIDE_A_COROUTINE, mode).strip().endswith("OK")


def test_bh22_sync_run_from_jupyter_cells_with_and_without_nest_asyncio(tmp_path: Path) -> None:
    cells = [
        SETUP,
        # A sync cell on the kernel's running loop: the helper nests into it.
        "queue = Queue()\nengine = WorkflowEngine(queue, MemoryStore(), worker_id='w')\n"
        "start = time.monotonic()\nresult = sync.run(engine.run(workflow('c1')))\n"
        "check(engine, result, time.monotonic() - start)",
        # Top-level await still works afterwards, and so does nesting again.
        "result = await engine.run(Workflow('c2', [StepDef('quick', quick)]))\n"
        "assert result.status == 'completed'\n"
        "import nest_asyncio2\nnest_asyncio2.apply()\n"
        "start = time.monotonic()\nresult = sync.run(engine.run(workflow('c3')))\n"
        "check(engine, result, time.monotonic() - start)",
        "await queue.close()",
    ]
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(book, timeout=60, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError with the traceback when a cell fails


def test_without_a_running_loop_it_is_asyncio_run() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert sync.run(answer()) == 42
    with pytest.raises(TimeoutError):
        sync.run(asyncio.sleep(5), timeout=0.01)


def test_a_loop_that_cannot_nest_gets_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class OddLoop:
        pass

    monkeypatch.setattr(asyncio, "get_running_loop", lambda: OddLoop())
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match=r"cannot nest inside a running OddLoop.*await"):
        sync.run(coro)
    assert coro.cr_frame is None  # closed: no "never awaited" warning


def test_missing_nest_asyncio2_names_the_extra() -> None:
    code = textwrap.dedent("""
        import asyncio, sys
        sys.modules["nest_asyncio2"] = None
        from agentq import sync
        from agentq.errors import MissingExtraError

        async def main():
            try:
                sync.run(asyncio.sleep(0))
            except MissingExtraError as exc:
                assert "agentq[notebook]" in str(exc), exc
                print("OK")

        asyncio.run(main())
    """)
    assert run_script(code).strip() == "OK"


def test_importing_agentq_sync_patches_nothing() -> None:
    code = (
        "import asyncio, sys, agentq.sync\n"
        "assert 'nest_asyncio2' not in sys.modules\n"
        "assert not hasattr(asyncio, '_nest_patched')\n"
    )
    run_script(code)
