"""The dashboard and one approval in Notebook 7 and in Voila (issue 14), beside JupyterLab.

Each front end gets its own server (isolated config and home in a temp dir, bound to
127.0.0.1) serving a small notebook: one workflow waiting for approval and a `Dashboard`. A
person's click on *Approve* must reach the kernel and the dashboard must show the workflow
completed without running another cell. Screenshots: ``notebook7.png``, ``voila.png`` in the
test's ``tmp_path``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from .conftest import START_TIMEOUT, _free_port, new_context

CELLS = [
    '''\
from agentq import MemoryStore, Queue, StepDef, WaitForInput, Workflow, WorkflowEngine
from agentq.widgets import Dashboard

async def ask(ctx):
    if not ctx.resumed:
        raise WaitForInput("ship order-1?")
    return ctx.resume_input

engine = WorkflowEngine(Queue(), MemoryStore(), worker_id="frontend")
await engine.run(Workflow("order-1", [StepDef("ask", ask)]))''',
    "dash = Dashboard(engine).start()\ndash",
]


def write_notebook(path: Path) -> None:
    cells = [
        {"cell_type": "code", "id": f"cell-{i}", "metadata": {}, "execution_count": None,
         "outputs": [], "source": source}
        for i, source in enumerate(CELLS)
    ]
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": kernelspec},
                                "nbformat": 4, "nbformat_minor": 5}))


def _is_up(ready: str) -> bool:
    """Whether `ready` answers (an http URL), or its port accepts a connection (tcp://)."""
    if ready.startswith("tcp://"):
        host, port = ready.removeprefix("tcp://").split(":")
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return True
        except OSError:
            return False
    try:
        with urllib.request.urlopen(ready, timeout=5):
            return True
    except urllib.error.HTTPError as error:
        error.close()
        return False
    except (urllib.error.URLError, ConnectionError):
        return False


def _serve(base: Path, command: list[str], ready: str) -> Iterator[subprocess.Popen[bytes]]:
    for folder in ("home", "config/labconfig", "runtime", "data"):
        (base / folder).mkdir(parents=True, exist_ok=True)
    (base / "config/labconfig/page_config.json").write_text(
        '{"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": true}}'
    )
    env = {
        **os.environ,
        "HOME": str(base / "home"),
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTER_DATA_DIR": str(base / "data"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    log = base / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, cwd=base, stdout=out, stderr=out)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if _is_up(ready):
                break
            time.sleep(0.3)
        else:
            pytest.fail(f"server did not start: {log.read_text(errors='replace')[-3000:]}")
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def approve_and_check(page: Page, shot: Path) -> None:
    slot = page.locator(".agentq-approval").filter(
        has=page.locator("[data-agentq='approval'][data-workflow='order-1']")
    )
    await expect(slot).to_be_visible()
    await expect(slot).to_contain_text("ship order-1?")
    approve = slot.get_by_role("button", name="Approve")
    await approve.click()
    await expect(page.locator(
        "[data-agentq='approval-log'] [data-agentq='approval-outcome'][data-workflow='order-1']"
    )).to_have_attribute("data-outcome", "completed")
    await expect(page.locator(
        "[data-agentq='step-row'][data-workflow='order-1'][data-status='completed']"
    )).to_have_count(1)
    await page.locator(".agentq-dashboard").screenshot(path=shot)


@pytest.mark.skipif(importlib.util.find_spec("notebook") is None, reason="notebook 7 missing")
async def test_notebook7_shows_the_dashboard_and_a_click_approves(
    browser: Browser, tmp_path: Path
) -> None:
    root = tmp_path / "nb7"
    root.mkdir()
    write_notebook(root / "approve.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "notebook", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}",
        "--JupyterNotebookApp.expose_app_in_browser=True",
    ]  # fmt: skip
    server = _serve(tmp_path / "nb7-home", command, f"{url}/api/status?token={token}")
    next(server)
    context = await new_context(browser, 1400, 1600)
    try:
        page = await context.new_page()
        await page.goto(f"{url}/notebooks/approve.ipynb?token={token}")
        await page.wait_for_function(
            """() => {
                const panel = window.jupyterapp?.shell?.currentWidget;
                return panel?.sessionContext?.session?.kernel?.status === 'idle';
            }"""
        )
        await page.evaluate(
            "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }"
        )
        await approve_and_check(page, tmp_path / "notebook7.png")
    finally:
        await context.close()
        server.close()


@pytest.mark.skipif(importlib.util.find_spec("voila") is None, reason="voila missing")
async def test_voila_shows_the_dashboard_and_a_click_approves(
    browser: Browser, tmp_path: Path
) -> None:
    root = tmp_path / "voila"
    root.mkdir()
    write_notebook(root / "approve.ipynb")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "voila", str(root / "approve.ipynb"), "--no-browser",
        f"--port={port}", "--Voila.ip=127.0.0.1", "--Voila.port_retries=0",
    ]  # fmt: skip
    # A GET of the page runs the notebook: wait for the port only.
    server = _serve(tmp_path / "voila-home", command, f"tcp://127.0.0.1:{port}")
    next(server)
    context = await new_context(browser, 1400, 1600)
    try:
        page = await context.new_page()
        await page.goto(url)
        await approve_and_check(page, tmp_path / "voila.png")
    finally:
        await context.close()
        server.close()
