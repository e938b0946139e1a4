"""Widgets are freed: `stop()` and a cell's re-run close them (review 14 #5)."""

from __future__ import annotations

import asyncio
import gc
import weakref

import ipywidgets

from agentq.clock import FakeClock
from agentq.widgets import Dashboard, StepTable

from .fakes import FakeEngine, ReadStore


def registered() -> int:
    return len(ipywidgets.widgets.widget._instances)


async def test_a_setup_cell_run_ten_times_leaves_no_store_or_widget_alive() -> None:
    before = registered()
    stores: list[weakref.ref[ReadStore]] = []
    for _ in range(10):  # "setup + dashboard" cell, run again and again
        store = ReadStore()
        stores.append(weakref.ref(store))
        dash = Dashboard(FakeEngine(store, FakeClock())).start()
        await dash.refresh()
        dash.steps.next.click()  # a callback that reaches the dashboard
        await dash.stop()
        del store, dash
    gc.collect()
    assert [r() for r in stores] == [None] * 10
    assert registered() == before


async def test_stop_closes_the_widgets_unless_asked_to_keep_them() -> None:
    kept = StepTable(ReadStore(), clock=FakeClock())
    await kept.stop(close=False)
    assert kept.html.comm is not None
    await kept.stop()
    assert kept.html.comm is None and kept.widget.comm is None and kept._banner.comm is None


async def test_a_refresher_replaced_by_its_cells_rerun_closes_its_widgets() -> None:
    table = StepTable(ReadStore(), clock=FakeClock()).start()
    table._replaced()
    assert table.replaced and table.html.comm is None and table.widget.layout.comm is None
    await table.stop()  # harmless afterwards


SETUP_CELL = """
store = ReadStore()
stores.append(weakref.ref(store))
dash = Dashboard(FakeEngine(store, FakeClock())).start()
dash
"""


async def test_a_setup_cell_rerun_in_ipython_frees_the_store_its_output_history_held() -> None:
    # Issue 22 fault 3: IPython's output history (Out, _N, _) kept every run's dashboard,
    # hence its store and connection thread, after the cell ran again.
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    try:
        stores: list[weakref.ref[ReadStore]] = []
        shell.user_ns.update(ReadStore=ReadStore, FakeEngine=FakeEngine, FakeClock=FakeClock,
                             Dashboard=Dashboard, weakref=weakref, stores=stores)
        for _ in range(5):
            shell.parent_header = {"metadata": {"cellId": "setup"}}  # as the kernel sets it
            result = await shell.run_cell_async(
                SETUP_CELL, store_history=True, cell_id="setup",
                transformed_cell=shell.transform_cell(SETUP_CELL))
            result.raise_error()
            assert shell.user_ns["Out"][shell.execution_count - 1] is shell.user_ns["dash"]
        shell.last_execution_result = None  # the kernel's next cell replaces it
        await asyncio.sleep(0)  # the cancelled refreshers end (the kernel's loop runs on)
        gc.collect()
        assert [r() is None for r in stores] == [True, True, True, True, False]
        await shell.user_ns["dash"].stop()
        assert not any(v is shell.user_ns["dash"] for v in shell.user_ns["Out"].values())
    finally:
        InteractiveShell.clear_instance()
