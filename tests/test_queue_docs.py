"""The queue guides' examples run as written (docs/idempotency, lanes, errors, internals)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
GUIDES = ["idempotency.md", "lanes.md", "errors.md", "queue-internals.md"]


def first_python_block(path: Path) -> str:
    match = re.search(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)
    assert match, f"{path.name} has no python example"
    return match.group(1)


@pytest.mark.parametrize("guide", GUIDES)
def test_the_guides_example_runs(guide: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = compile(first_python_block(DOCS / guide), guide, "exec")
    exec(code, {"__name__": "__main__"})
    assert capsys.readouterr().out.strip(), "the example prints what it shows"


def test_the_persistent_keys_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = (DOCS / "idempotency.md").read_text(encoding="utf-8")
    section = text.split("## Keys that survive a restart", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the section has an example"
    exec(compile(match.group(1), "idempotency.md", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert "{'sent_to': 'alice'}" in out
    assert "refused: idempotency key 'mail-42' completed at " in out
    assert out.strip().endswith("['alice', 'alice']")


def test_the_queue_tour_runs_and_tells_its_story() -> None:
    import subprocess
    import sys

    root = DOCS.parent
    done = subprocess.run(
        [sys.executable, "-m", "examples.queue_tour"],
        cwd=root, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "the tool ran 1 time(s)" in done.stdout
    assert "raised QueueFull" in done.stdout
    assert "every job finished on its own: True" in done.stdout
