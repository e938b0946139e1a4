"""Drive JupyterLab in Debian's Chromium through Playwright (the `browser` suite).

Every test in this directory is marked `browser` and runs on one session-wide event loop, so
write the tests as `async def` and `await` Playwright's async API. (The sync API is not an
option: after each call it leaves its own loop marked as running in the thread, which breaks
every async test that pytest-asyncio runs later in the session.)

Fixtures:
    jupyterlab: the `JupyterLab` server of the session (isolated config, token, temp root dir).
    browser: the Playwright `Browser` of the session; skips the test when Chromium is absent.
    new_context: `await new_context(browser, width, height)`: a context whose waits are `WAIT_MS`.
    open_notebook: `await open_notebook("quickstart.ipynb")` copies `notebooks/` into a fresh
        folder of the root dir, opens the notebook and returns its `Page` once the kernel is
        idle. `source=path` opens another notebook file instead. Kernels are shut down and the
        page closed when the test ends; a failing test leaves `failure.png` in its `tmp_path`.
    run_all: `await run_all(page)` runs every cell and waits until all have finished (raises
        with the error outputs if one failed); `wait=False` returns once they are queued.
    screenshot: `await screenshot(page, "approved")` saves `tmp_path / "approved.png"`.

Select outputs by the `data-*` attributes that the widgets' HTML carries: text selectors also
match the notebook's source code.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
HERE = Path(__file__).resolve().parent
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def _wait_ms() -> float:
    raw = os.environ.get("AGENTQ_BROWSER_WAIT", "90")
    try:
        seconds = float(raw)
    except ValueError:
        raise pytest.UsageError(f"AGENTQ_BROWSER_WAIT must be seconds, got {raw!r}") from None
    if not 0 < seconds < 3600:
        raise pytest.UsageError(f"AGENTQ_BROWSER_WAIT must be in (0, 3600) s, got {raw!r}")
    return seconds * 1000


WAIT_MS = _wait_ms()
"""The one wait of the suite, in milliseconds: how long anything may take to happen (a
server to answer, a kernel to start, cells to run, an element to show or change). Generous
(90 s; ``AGENTQ_BROWSER_WAIT=<seconds>`` sets it): a loaded machine is slow, a test that
passes waits no longer than the page needs (issue 20 #15: a detail not visible within
Playwright's default 5 s on a loaded machine). No test sleeps a fixed time to wait."""
START_TIMEOUT = WAIT_MS / 1000  # seconds for a server to answer


class OpenNotebook(Protocol):
    def __call__(self, name: str, *, source: Path | None = None) -> Awaitable[Page]: ...


class RunAll(Protocol):
    def __call__(
        self, page: Page, *, wait: bool = True, timeout_ms: float = ...
    ) -> Awaitable[None]: ...


Screenshot = Callable[[Page, str], Awaitable[Path]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    session_loop = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.browser)
            if pytest_asyncio.is_async_test(item):
                item.add_marker(session_loop, append=False)


_failed = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        item.stash[_failed] = True
    return report


@dataclass(frozen=True)
class JupyterLab:
    """A running JupyterLab server: its base URL, token and root directory."""

    url: str
    token: str
    root_dir: Path
    log: Path

    def api(self, method: str, path: str) -> bytes:
        """Call the server's REST API and return the body (raises `urllib.error.URLError`)."""
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body: bytes = response.read()
            return body

    def shutdown_kernels(self) -> None:
        """Shut down every running kernel (and with it each notebook's session)."""
        for kernel in json.loads(self.api("GET", "/api/kernels")):
            self.api("DELETE", f"/api/kernels/{kernel['id']}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(lab: JupyterLab, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        try:
            lab.api("GET", "/api/status")
            return
        except urllib.error.HTTPError as error:
            error.close()  # else a ResourceWarning, an error under filterwarnings
            time.sleep(0.2)
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    state = f"exited with {process.returncode}" if process.poll() is not None else "timed out"
    pytest.fail(
        f"JupyterLab {state} before /api/status answered; its log:\n"
        f"{lab.log.read_text(errors='replace')}"
    )


@pytest.fixture(scope="session")
def jupyterlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    """Start JupyterLab on 127.0.0.1 from this venv, with config and home in a temp dir."""
    base = tmp_path_factory.mktemp("jupyterlab")
    root = base / "root"
    labconfig = base / "config" / "labconfig"
    for folder in (root, labconfig, base / "home", base / "runtime", base / "data"):
        folder.mkdir(parents=True)
    # The announcements plugin shows a toast over the page.
    (labconfig / "page_config.json").write_text(
        '{"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": true}}'
    )
    # A notebook without kernelspec metadata would open a "Select Kernel" dialog.
    tracker = base / "config/lab/user-settings/@jupyterlab/notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"autoStartDefaultKernel": true}')
    # Only the user-level dirs move: sys.prefix/share/jupyter (the kernel spec, the ipywidgets
    # labextension) and sys.prefix/etc/jupyter stay on Jupyter's search paths.
    env = {
        **os.environ,
        "HOME": str(base / "home"),
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTER_DATA_DIR": str(base / "data"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    port, token = _free_port(), secrets.token_hex(16)
    lab = JupyterLab(f"http://127.0.0.1:{port}", token, root, base / "jupyterlab.log")
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}",
        "--LabApp.expose_app_in_browser=True",
    ]  # fmt: skip
    with lab.log.open("wb") as log:
        process = subprocess.Popen(command, env=env, cwd=root, stdout=log, stderr=log)
    try:
        _wait_ready(lab, process)
        yield lab
    finally:
        process.terminate()  # SIGTERM: the server shuts its kernels down, then exits
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    """Launch Debian's Chromium headless (never `playwright install`'s download)."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.skip(
            "Chromium is not installed: `bash scripts/ensure-chromium.sh` (needs root "
            "and apt-get) installs it"
        )
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        expect.set_options(timeout=WAIT_MS)  # every expect(...) of the suite: the one wait
        yield chromium
        await chromium.close()


async def new_context(
    browser: Browser, width: int, height: int, *, offline: bool = False
) -> BrowserContext:
    """A browser context of that viewport whose actions and waits all wait `WAIT_MS`."""
    context = await browser.new_context(viewport={"width": width, "height": height},
                                        offline=offline)
    context.set_default_timeout(WAIT_MS)
    context.set_default_navigation_timeout(WAIT_MS)
    return context


@pytest_asyncio.fixture(loop_scope="session")
async def open_notebook(
    browser: Browser, jupyterlab: JupyterLab, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[OpenNotebook]:
    """Open notebooks in a fresh browser context; shut their kernels down at the end."""
    context = await new_context(browser, 1400, 900)
    pages: list[Page] = []

    async def open_(name: str, *, source: Path | None = None) -> Page:
        folder = Path(tempfile.mkdtemp(prefix="nb-", dir=jupyterlab.root_dir))
        if source is None:
            shutil.copytree(
                NOTEBOOKS,
                folder,
                dirs_exist_ok=True,
                # not a store a local nbmake run left, nor the nbmake conftest
                ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.db",
                                              "*.db-wal", "*.db-shm", "conftest.py"),
            )
        else:
            shutil.copyfile(source, folder / name)
        path = f"{folder.name}/{name}"
        page = await context.new_page()
        pages.append(page)
        await page.goto(f"{jupyterlab.url}/doc/tree/{quote(path)}?token={jupyterlab.token}&reset")
        await page.wait_for_function(
            """(path) => {
                const panel = window.jupyterapp?.shell?.currentWidget;
                const kernel = panel?.sessionContext?.session?.kernel;
                return panel?.context?.path === path && kernel?.status === 'idle';
            }""",
            arg=path,
        )
        return page

    yield open_
    if request.node.stash.get(_failed, False) and pages:
        await pages[-1].screenshot(path=tmp_path / "failure.png")
    await context.close()
    jupyterlab.shutdown_kernels()


@pytest.fixture
def run_all() -> RunAll:
    """Run every cell of the notebook open in a page."""

    async def run(page: Page, *, wait: bool = True, timeout_ms: float = WAIT_MS) -> None:
        # Braces: `evaluate` must not wait on the command's promise (a cell may wait for a click).
        await page.evaluate("""() => {
            window.__runAll = 'running';
            window.jupyterapp.commands.execute('notebook:run-all-cells').then(
                (ok) => { window.__runAll = ok ? 'ok' : 'failed'; },
                (error) => { window.__runAll = 'error: ' + error; });
        }""")
        if not wait:
            return
        handle = await page.wait_for_function(
            "() => window.__runAll !== 'running' && window.__runAll", timeout=timeout_ms
        )
        outcome = await handle.json_value()
        if outcome != "ok":
            errors = await page.locator(
                ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
            ).all_inner_texts()
            raise AssertionError(f"run all cells: {outcome}\n" + "\n".join(errors)[-4000:])

    return run


@pytest.fixture
def screenshot(tmp_path: Path) -> Screenshot:
    """Save a screenshot of a page as `tmp_path / f"{name}.png"` and return its path."""

    async def shoot(page: Page, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        await page.screenshot(path=path)
        return path

    return shoot
