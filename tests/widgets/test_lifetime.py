"""Widgets are freed: `stop()` and a cell's re-run close them (review 14 #5)."""

from __future__ import annotations

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
