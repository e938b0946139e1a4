"""`agentq.widgets.export_html` / `dashboard_html`: the dashboard views as one static page."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from agentq.clock import FakeClock
from agentq.store import MemoryStore, StepState
from agentq.widgets import dashboard_html, export_html
from agentq.workflows import WorkflowEngine

from .fakes import Tools, agent_workflow
from .test_detail import PROBE, no_probe, probe_workflow
from .test_tree import failing, three_steps

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


async def test_a_cancelled_workflows_wait_is_shown_as_ended_not_waiting(
    clock: FakeClock,
) -> None:
    """Review finding 10 (export part): as in ``agentq show``, through the one rule
    `shown_call`: the wait reads cancelled, ends when the workflow closed, and its duration
    stops growing."""
    store = await _store(clock)
    await clock.advance(5.0)
    assert await store.cancel_workflow("w<1>", "no longer needed", clock.time())
    await clock.advance(100.0)
    soup = _soup(await dashboard_html(store, now=clock.time()))
    node = soup.select_one('[data-agentq="tree-node"][data-node="c:k"]')
    assert node is not None and node["data-state"] == "cancelled"
    detail = node.select_one('[data-agentq="detail"][data-kind="call"]')
    assert detail is not None
    facts = {tr.th.text: tr.td.text for tr in detail.find_all("tr") if tr.th and tr.td}
    assert facts["state"] == "cancelled" and facts["duration"] == "5.00 s", facts
    assert "…" not in facts["duration"] and facts["finished"]
    listed = soup.select_one('[data-node="w"] [data-agentq="detail-call"][data-key="k"]')
    assert listed is not None and "cancelled" in listed.text and "waiting" not in listed.text
    assert "…" not in listed.text
    rows = await store.calls("w<1>")
    assert [r.state.value for r in rows] == ["waiting"]  # the stored row is unchanged


# ------------------------------------------------------------------ the run trees (issue 14)


async def _ran(engine: WorkflowEngine) -> list[str]:
    """Run a plain three-step workflow, an agent (waiting), a failing one and an XSS probe."""
    assert (await engine.run(three_steps())).status == "completed"
    assert (await engine.run(agent_workflow(Tools()))).status == "waiting"
    assert (await engine.run(failing())).status == "failed"
    assert (await engine.run(probe_workflow(f"wf{PROBE}"))).status == "waiting"
    return ["three", "trip", "broken", f"wf{PROBE}"]


def _soup(page: str) -> BeautifulSoup:
    return BeautifulSoup(page, "html.parser")


async def test_every_workflow_has_a_tree_whose_nodes_hold_their_details(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    ids = await _ran(engine)
    page = await dashboard_html(engine.store, now=clock.time(), title="runs")
    no_probe(page)
    soup = _soup(page)
    trees = {t["data-workflow"]: t for t in soup.select('[data-agentq="tree"]')}
    assert set(trees) == set(ids)  # every workflow, the probe's id unescaped by the parser
    for tree in trees.values():
        for node in tree.select('[data-agentq="tree-node"]'):
            detail = node.find(attrs={"data-agentq": "detail"})  # its own, folded inside it
            assert detail is not None, node["data-node"]
    # The workflow's detail has its input; a call's its output; the failed call its error
    # and traceback; the waiting step its question.
    three = trees["three"]
    assert three.select_one('[data-node="w"] [data-kind="workflow"]') is not None
    call_a = three.select_one('[data-node="c:a"] [data-agentq="detail"]')
    assert call_a is not None and call_a["data-kind"] == "call" and "Output" in call_a.text
    charge = trees["broken"].select_one('[data-node="c:charge"]')
    assert charge is not None and charge.name == "details"
    assert charge.select_one('[data-agentq="detail-error"]') is not None
    assert "service down" in charge.select_one('[data-agentq="traceback"]').text  # type: ignore[union-attr]
    probe_root = trees[f"wf{PROBE}"].select_one('[data-node="w"] [data-kind="workflow"]')
    assert probe_root is not None and "Input" in probe_root.text and PROBE in probe_root.text
    wait = trees["trip"].select_one('[data-node="c:approve"]')
    assert wait is not None and "book it?" in wait.text
    # Only the roots are open; every node expands with a click, no script.
    assert [d["data-node"] for d in soup.select("details[data-agentq=tree-node][open]")] == \
        ["w"] * len(ids)


async def test_the_page_loads_nothing_and_runs_no_script(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    await _ran(engine)
    soup = _soup(await dashboard_html(engine.store, now=clock.time()))
    assert soup.find(["script", "link", "img", "iframe", "object", "embed", "video",
                      "audio", "source", "style"]) is None
    for tag in soup.find_all(True):
        for attr in ("src", "href", "srcset", "action", "data", "poster"):
            assert not tag.has_attr(attr), (tag.name, attr)
        assert not any(a.startswith("on") for a in tag.attrs), tag.name
        style = str(tag.get("style", ""))
        assert "url(" not in style and "@import" not in style


async def test_the_trees_are_bounded_and_the_page_says_so(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    await _ran(engine)
    soup = _soup(await dashboard_html(engine.store, now=clock.time(), workflows=2))
    runs = soup.select_one('[data-agentq="tree-caps"]').parent  # type: ignore[union-attr]
    assert len(runs.select('[data-agentq="tree"]')) == 2  # the latest two workflows
    assert "latest 2 of 4 workflows" in runs.text and "1,000 nodes in all" in runs.text
    assert "2 more workflows not shown" in runs.text
    # A node budget spent in the first tree: its cuts are counted, later trees left out.
    soup = _soup(await dashboard_html(engine.store, now=clock.time(), workflows=2, nodes=3))
    runs = soup.select_one('[data-agentq="tree-caps"]').parent  # type: ignore[union-attr]
    assert len(runs.select('[data-agentq="tree-node"]')) == 3  # of the probe's 5
    assert len(runs.select('[data-agentq="tree"]')) == 1 and "3 nodes in all" in runs.text
    assert "3 more workflows not shown" in runs.text
    tree = runs.select_one('[data-agentq="tree"]')
    assert tree is not None
    assert sum(int(str(m["data-hidden"])) for m in tree.select('[data-agentq="more"]')) > 0
    with pytest.raises(ValueError, match="nodes"):
        await dashboard_html(engine.store, now=clock.time(), nodes=0)


async def test_export_html_refuses_the_stores_own_file_and_writes_atomically(
    clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # review F3: export_html(store, <its own path>) replaced the database with the page.
    from agentq.store import SqliteStore
    from agentq.widgets import export

    db = tmp_path / "s.db"
    async with SqliteStore(db) as store:
        await store.start_workflow("w", ["a"], None, clock.time())
        before = db.read_bytes()
        for target in (db, str(db), tmp_path / "sub" / ".." / "s.db", f"{db}-wal",
                       f"{db}-shm"):
            if "sub" in str(target):
                (tmp_path / "sub").mkdir(exist_ok=True)
            with pytest.raises(ValueError, match="refusing to write the export") as info:
                await export_html(store, target, now=clock.time())
            assert str(db) in str(info.value) and "\n" not in str(info.value)
        assert db.read_bytes() == before and [r.workflow_id for r in await store.workflows()]
        with pytest.raises(ValueError, match="path must name a file, got ''"):
            await export_html(store, "", now=clock.time())
        with pytest.raises(TypeError, match="path must be a str or a path, got int"):
            await export_html(store, 5, now=clock.time())  # type: ignore[arg-type]
        # A failed write leaves the earlier page whole and no temporary file.
        page = tmp_path / "page.html"
        await export_html(store, page, now=clock.time())
        good = page.read_text(encoding="utf-8")

        def broken(*_args: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(export.os, "replace", broken)
        with pytest.raises(OSError, match="No space left"):
            await export_html(store, page, now=clock.time(), title="new")
        assert page.read_text(encoding="utf-8") == good
        assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"workflows": True}, TypeError, "workflows must be an int >= 1, got True"),
        ({"nodes": 1.5}, TypeError, "nodes must be an int >= 1, got 1.5"),
        ({"nodes": "5"}, TypeError, "nodes must be an int >= 1, got '5'"),
        ({"workflows": 2.5}, TypeError, "workflows must be an int >= 1, got 2.5"),
        ({"workflows": 0}, ValueError, "workflows must be >= 1, got 0"),
        ({"limit": -1}, ValueError, "limit must be >= 1, got -1"),
        ({"now": float("inf")}, ValueError, "now must be finite Unix seconds"),
        ({"now": -1e12}, ValueError, "now must be finite Unix seconds"),
        ({"now": None}, TypeError, "now must be Unix seconds"),
        ({"now": True}, TypeError, "now must be Unix seconds"),
        ({"title": 5}, TypeError, "title must be a str, got int: 5"),
    ],
)
async def test_page_arguments_are_checked_and_the_error_names_the_bad_one(
    clock: FakeClock, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    # review F5
    args: dict[str, object] = {"now": clock.time(), **kwargs}
    with pytest.raises(error) as info:
        await dashboard_html(MemoryStore(), **args)  # type: ignore[arg-type]
    assert str(info.value).startswith(message)


async def test_bidi_controls_in_user_strings_are_isolated(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    # review F4: a U+202E in a key or step name reversed agentq's own words after it.
    from agentq.queue import Job
    from agentq.workflows import StepContext, StepDef, Workflow

    async def step(ctx: StepContext) -> object:
        return await ctx.call(Job("refund-\u202e", lambda: 1))

    await engine.run(Workflow("order-\u202e7", [StepDef("pay\u202e", step)]))
    page = await dashboard_html(engine.store, now=clock.time(), title="db\u202e")
    soup = _soup(page)
    for raw in ("refund-\u202e", "pay\u202e", "order-\u202e7", "db\u202e"):
        outside = [s for s in soup.find_all(string=lambda t, r=raw: t is not None and r in t)
                   if s.parent is not None and s.parent.name not in ("bdi", "title")]
        assert outside == [], (raw, [str(s.parent)[:120] for s in outside])
    assert '<bdi>' in page and 'data-node="c:refund-\u202e"' in page  # ids stay exact
