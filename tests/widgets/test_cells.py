"""Re-running a cell stops the refreshers its previous run started (agentq.widgets.live.cells), and
`agentq.sync.run` refuses to block a cell while a widget waits for clicks (issue 14)."""

from __future__ import annotations

import asyncio
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from queue import Empty
from typing import Any

import IPython
import pytest
from jupyter_client.manager import start_new_kernel

from agentq import sync
from agentq.clock import FakeClock
from agentq.errors import DeadlockError
from agentq.widgets import ApprovalPanel, Dashboard, LaneMonitor, StepTable

from .fakes import FakeEngine, ReadStore, StatsQueue

ROOT = Path(__file__).resolve().parents[2]


class FakeEvents:
    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def register(self, event: str, fn: Any) -> None:
        assert event == "pre_run_cell"
        self.callbacks.append(fn)

    def unregister(self, event: str, fn: Any) -> None:
        if fn not in self.callbacks:
            raise ValueError(fn)
        self.callbacks.remove(fn)

    def run_cell(self, shell: FakeShell, cell_id: str) -> None:
        for fn in self.callbacks[:]:
            fn(types.SimpleNamespace(cell_id=cell_id))
        shell.parent_header = {"metadata": {"cellId": cell_id}}


class FakeShell:
    def __init__(self) -> None:
        self.events = FakeEvents()
        self.parent_header: dict[str, Any] = {}

    def run(self, cell_id: str) -> None:
        self.events.run_cell(self, cell_id)


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeShell]:
    fake = FakeShell()
    monkeypatch.setattr(IPython, "get_ipython", lambda: fake)
    yield fake


def refreshers() -> list[str]:
    tasks = [t for t in asyncio.all_tasks() if not t.done()]
    return sorted(t.get_name() for t in tasks if t.get_name().startswith("agentq"))


async def test_rerunning_the_cell_cancels_the_refresher_it_started(shell: FakeShell) -> None:
    queue = StatsQueue()
    shell.run("setup")
    first = LaneMonitor(queue, clock=FakeClock()).start()
    assert refreshers() == ["agentq.LaneMonitor"]
    shell.run("other")  # another cell: nothing happens
    assert first.running and not first.replaced
    shell.run("setup")  # the same cell again, before its new run starts
    assert first.replaced and not first.running
    await asyncio.sleep(0)  # let the cancellation land
    second = LaneMonitor(queue, clock=FakeClock()).start()
    assert refreshers() == ["agentq.LaneMonitor"]
    assert 'data-agentq="replaced"' in first._banner.value
    assert shell.events.callbacks == [second._cell._pre_run_cell]
    await first.stop()  # harmless after a replacement
    await second.stop()
    assert shell.events.callbacks == [] and refreshers() == []


async def test_without_a_cell_id_nothing_is_registered(shell: FakeShell) -> None:
    table = StepTable(ReadStore(), clock=FakeClock()).start()  # no cellId in the header
    assert shell.events.callbacks == [] and table.running
    await table.stop()


async def test_outside_ipython_start_registers_nothing() -> None:
    assert "IPython" not in sys.modules or sys.modules["IPython"].get_ipython() is None
    monitor = LaneMonitor(StatsQueue(), clock=FakeClock()).start()
    assert monitor._cell.cell_id is None
    await monitor.stop()


async def test_sync_run_refuses_while_an_approval_panel_runs(clock: FakeClock) -> None:
    engine = FakeEngine(ReadStore(), clock)
    panel = ApprovalPanel(engine).start()
    assert refreshers() == ["agentq.clicks:ApprovalPanel"]
    coro = asyncio.sleep(0)
    with pytest.raises(DeadlockError, match=r"ApprovalPanel waits for clicks.*await"):
        sync.run(coro)
    assert coro.cr_frame is None  # closed, never run: no "never awaited" warning
    assert "nest_asyncio2" not in sys.modules or not hasattr(asyncio, "_nest_patched")
    await panel.stop()


async def test_sync_run_refuses_while_a_dashboard_runs(clock: FakeClock) -> None:
    engine = FakeEngine(ReadStore(), clock)
    engine.queue = StatsQueue()  # type: ignore[assignment]
    dash = Dashboard(engine).start()
    with pytest.raises(DeadlockError, match=r"Dashboard waits for clicks"):
        sync.run(asyncio.sleep(0))
    await dash.stop()


# --- in a real kernel ----------------------------------------------------------------------


class Kernel:
    """A python3 kernel driven by execute requests that carry a cell id, as JupyterLab's do."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.km, self.kc = start_new_kernel(kernel_name="python3", env=env)

    def run(self, code: str, cell_id: str) -> str:
        content = {"code": code, "silent": False, "store_history": True,
                   "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}
        msg = self.kc.session.msg("execute_request", content, metadata={"cellId": cell_id})
        self.kc.shell_channel.send(msg)
        out: list[str] = []
        while True:
            try:
                reply = self.kc.get_iopub_msg(timeout=30)
            except Empty:
                raise AssertionError(f"cell {cell_id} timed out; output so far: {out}") from None
            if reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
                continue
            kind, body = reply["msg_type"], reply["content"]
            if kind == "stream":
                out.append(body["text"])
            elif kind == "error":
                raise AssertionError("\n".join(body["traceback"]))
            elif kind == "status" and body["execution_state"] == "idle":
                return "".join(out)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    k = Kernel()
    try:
        yield k
    finally:
        k.close()


COUNT = """
import asyncio
print(sorted(t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("agentq")))
"""

SETUP_01 = """
from agentq import Job, LaneConfig, Priority, Queue
from agentq.widgets import LaneMonitor
queue = Queue({Priority.HIGH: LaneConfig(capacity=10, permits=3)})
await queue.push_and_wait(Job("warm", lambda: 1, Priority.HIGH))
monitor = LaneMonitor(queue).start()
monitor
"""


def test_rerunning_a_setup_cell_in_a_kernel_leaves_no_orphan_task(kernel: Kernel) -> None:
    for _ in range(3):
        kernel.run(SETUP_01, "setup-cell")
        assert kernel.run(COUNT, "count") == "['agentq.LaneMonitor']\n"
    kernel.run("await monitor.stop()", "stop")
    assert kernel.run(COUNT, "count") == "[]\n"


DASHBOARD_SETUP = """
from agentq import MemoryStore, Queue, WorkflowEngine
from agentq.widgets import Dashboard
engine = WorkflowEngine(Queue(), MemoryStore(), worker_id="w")
"""


def test_rerunning_a_dashboard_cell_in_a_kernel_keeps_one_refresher(kernel: Kernel) -> None:
    kernel.run(DASHBOARD_SETUP, "engine")
    for _ in range(3):
        kernel.run("dash = Dashboard(engine).start()\ndash", "dash-cell")
        assert kernel.run(COUNT, "count") == "['agentq.clicks:Dashboard']\n"
    blocked = kernel.run(
        "from agentq import sync\ntry:\n    sync.run(asyncio.sleep(0))\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)", "sync")
    assert blocked.startswith("DeadlockError agentq.sync.run would block this cell"), blocked
    assert "await" in blocked
    kernel.run("await dash.stop()", "stop")
    # With no click-taking widget running, sync.run nests as before (BH-22).
    assert kernel.run("print(sync.run(asyncio.sleep(0, 'ok')))", "sync") == "ok\n"


async def test_the_deadlock_error_names_each_kind_of_widget_once(clock: FakeClock) -> None:
    # Review 14 #10: "while Dashboard, Dashboard waits for clicks".
    panels = [ApprovalPanel(FakeEngine(ReadStore(), clock)).start() for _ in range(2)]
    engine = FakeEngine(ReadStore(), clock)
    engine.queue = StatsQueue()  # type: ignore[assignment]
    dashes = [Dashboard(engine).start() for _ in range(2)]
    with pytest.raises(DeadlockError, match=r"while ApprovalPanel and Dashboard wait for clicks"):
        sync.run(asyncio.sleep(0))
    for view in (*panels, *dashes):
        await view.stop()
