"""`make demo` installs what the demo needs and nothing of the test toolchain; `make test` adds
the rest; the demo runs without pandas, pyarrow, ipywidgets, matplotlib or Jupyter."""

from __future__ import annotations

import csv
import datetime
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

TOOLCHAIN = (
    "pandas",
    "pyarrow",
    "numpy",
    "ipywidgets",
    "matplotlib",
    "IPython",
    "jupyterlab",
    "playwright",
    "nest_asyncio2",
    "mypy",
)
"""Top-level modules of the test toolchain that the demo must not need."""


def _recipe(target: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout.splitlines()


def _installs(lines: list[str]) -> list[str]:
    return [line for line in lines if " -m pip install " in line and "--upgrade pip" not in line]


def test_make_demo_installs_only_what_the_demo_needs() -> None:
    lines = _recipe("demo")
    installs = _installs(lines)
    assert installs, lines
    assert all("-c constraints.txt" in line for line in installs), installs
    assert not any(re.search(r"\[[^]]*test[^]]*\]", line) for line in installs), installs
    assert any("-e '.[bfcl]'" in line for line in installs), installs
    bfcl = [line for line in installs if "bfcl-eval==" in line]
    assert len(bfcl) == 1 and "--no-deps" in bfcl[0], installs
    assert lines[-1].endswith("-m examples.bfcl_replay")


def test_make_test_adds_the_toolchain_on_top_of_the_demo() -> None:
    lines = _recipe("test")
    installs = _installs(lines)
    assert installs[: len(_installs(_recipe("demo")))] == _installs(_recipe("demo"))
    assert any("-e '.[bfcl,test]'" in line for line in installs), installs
    assert all("-c constraints.txt" in line for line in installs), installs
    assert any(line.endswith("-m pytest tests") for line in lines)


def test_the_pinned_bfcl_eval_is_the_installed_one() -> None:
    version = importlib.metadata.version("bfcl-eval")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    constraints = (ROOT / "constraints.txt").read_text(encoding="utf-8")
    assert f"'bfcl-eval=={version}'" in makefile
    assert f"bfcl_eval=={version}" in constraints


def test_the_readme_shows_how_to_add_agentq_to_a_project() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install 'agentq[sqlite,notebook]'" in readme


_WITHOUT_TOOLCHAIN = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # import fails; importlib.util.find_spec says it is missing
from examples.bfcl_replay.__main__ import main
status = main(sys.argv[1:])
loaded = sorted({{m.split(".")[0] for m, mod in sys.modules.items() if mod is not None}})
print("LOADED", " ".join(name for name in loaded if name in {blocked!r}))
sys.exit(status)
"""


def test_the_demo_runs_without_the_test_toolchain(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    script = _WITHOUT_TOOLCHAIN.format(blocked=TOOLCHAIN)
    done = subprocess.run(
        [sys.executable, "-c", script, "--db", str(tmp_path / "bfcl.db"), "--tasks", "4"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "LOADED \n" in done.stdout
    assert "✔ 4/4 tasks match the ground truth" in done.stdout
    export = tmp_path / "bfcl-base-first4-events.csv"
    assert f"{export} (CSV: pyarrow is not installed" in done.stdout
    assert (tmp_path / "bfcl-base-first4-dashboard.html").is_file()
    with export.open(encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows and rows[0]["kind"] == "WorkflowStarted"
    assert datetime.datetime.fromisoformat(rows[0]["at"]).tzinfo is not None
