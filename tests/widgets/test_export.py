"""`agentq.widgets.export_html` / `dashboard_html`: the dashboard views as one static page."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.clock import FakeClock
from agentq.store import MemoryStore, StepState
from agentq.widgets import dashboard_html, export_html

EVIL = "<img src=x onerror=alert(1)>"


async def _store(clock: FakeClock) -> MemoryStore:
    store = MemoryStore()
    await store.start_workflow("w<1>", ["ok", EVIL], {"q": EVIL}, clock.time())
    for index in (0, 1):
        claim = await store.claim_step("w<1>", index, "w1", 30.0, clock.time())
        execution = claim.execution  # type: ignore[union-attr]
        if index == 0:
            await store.complete_step(execution, {"x": 1}, clock.time())
        else:
            await store.wait_step(execution, f"approve {EVIL}?", clock.time(), key="k",
                                  details={"tool": EVIL})
    return store


async def test_the_page_has_every_view_and_escapes_stored_strings(clock: FakeClock) -> None:
    store = await _store(clock)
    page = await dashboard_html(store, now=clock.time(), title=f"db {EVIL}")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert EVIL not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert 'data-agentq="approval"' in page and 'data-key="k"' in page
    assert 'data-agentq="steps"' in page and 'data-agentq="timeline"' in page
    assert 'data-agentq="call-totals"' in page
    assert "Waiting for input (1)" in page
    assert "<script" not in page and "<button" not in page
    rows = await store.step_rows()
    assert [r.state for r in rows] == [StepState.COMPLETED, StepState.WAITING]


async def test_an_empty_store_renders_and_bad_limits_are_refused(clock: FakeClock) -> None:
    page = await dashboard_html(MemoryStore(), now=clock.time())
    assert "0 workflow(s), 0 event(s)" in page and "no step waits for input" in page
    with pytest.raises(ValueError, match="limit"):
        await dashboard_html(MemoryStore(), now=clock.time(), limit=0)


async def test_export_html_writes_the_file(clock: FakeClock, tmp_path: Path) -> None:
    store = await _store(clock)
    path = await export_html(store, tmp_path / "d.html", now=clock.time())
    assert path == tmp_path / "d.html"
    assert path.read_text(encoding="utf-8") == await dashboard_html(store, now=clock.time())
    with pytest.raises(OSError):
        await export_html(store, tmp_path / "missing" / "d.html", now=clock.time())
