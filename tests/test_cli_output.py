"""What the `agentq` command line prints: stored strings literally (never markup, never a
terminal control), listings in pages, clear usage errors, and the console script without the
``cli`` extra (issue 20, faults 9-12)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tomllib
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agentq import Job, NonRetryable
from agentq.cli import cli
from agentq.cli.commands import Settings
from agentq.clock import FakeClock
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import SqliteStore
from agentq.workflows import RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

ROOT = Path(__file__).resolve().parents[1]

LINK = "[link=https://evil.example]click[/link]"
CONTROLS = "\x1b[2J\x1b]0;pwned\x07\x9b31m\x7f\u202e\u2066\u2069\u200b\u2028\u2029\x00"
HOSTILE = f"{LINK}{CONTROLS}[bold]b[/bold]:smile:"
"""A stored string from a model or a tool: Rich markup, ESC/OSC/CSI, DEL, C1, bidi overrides
and isolates, zero-width and line/paragraph separators, NUL."""


def run(*args: str, clock: FakeClock | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), obj=Settings(clock=clock or FakeClock(),
                                                            width=400))


def raw_controls(text: str) -> list[str]:
    """The characters of `text` a terminal would act on or reorder (newlines aside)."""
    return [c for c in text if c != "\n"
            and unicodedata.category(c) in {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}]


async def _hostile_call(ctx: StepContext) -> Any:
    return await ctx.call(Job(f"call {HOSTILE}", lambda: _echo(), Priority.HIGH),
                          label={"tool": HOSTILE})


async def _echo() -> str:
    return HOSTILE


async def _hostile_wait(ctx: StepContext) -> Any:
    return await ctx.wait_for_input(f"wait {HOSTILE}", f"question {HOSTILE}",
                                    details={"args": HOSTILE})


def _hostile_fail(ctx: StepContext) -> Any:
    raise NonRetryable(f"reason {HOSTILE}")


WAITING = f"w-{HOSTILE}"
FAILED = f"f-{HOSTILE}"


@pytest.fixture
def hostile(tmp_path: Path, clock: FakeClock) -> Path:
    """A store whose ids, step names, keys, labels, outputs, questions and reasons are hostile."""
    path = tmp_path / "hostile.db"

    async def make() -> list[Any]:
        async with (
            SqliteStore(path) as store,
            Queue({Priority.MEDIUM: LaneConfig(capacity=10, permits=2),
                   Priority.HIGH: LaneConfig(capacity=10, permits=2)}, clock=clock) as queue,
            WorkflowEngine(queue, store, worker_id=f"worker {HOSTILE}", clock=clock) as engine,
        ):
            return [
                await engine.run(Workflow(WAITING, [StepDef(f"s1 {HOSTILE}", _hostile_call),
                                                    StepDef(f"s2 {HOSTILE}", _hostile_wait)],
                                          input={"in": HOSTILE})),
                await engine.run(Workflow(FAILED, [StepDef(f"s {HOSTILE}", _hostile_fail)])),
            ]

    results = asyncio.run(make())
    assert [r.status for r in results] == [RunStatus.WAITING, RunStatus.FAILED]
    return path


def test_every_command_prints_hostile_strings_literally(hostile: Path, tmp_path: Path) -> None:
    """Fault 9: every view, message and error of every command; no markup is interpreted
    (the link's text is there, as typed) and no control character reaches the output."""
    db = str(hostile)
    page = tmp_path / f"page {CONTROLS.replace(chr(0), '')}.html"  # (argv holds no NUL)
    commands: list[tuple[tuple[str, ...], int, bool]] = [
        # (arguments, exit code, whether the output shows LINK as typed)
        (("ls", db), 0, True),
        (("ls", db, "--json"), 0, True),
        (("ls", db, "--limit", "1"), 0, True),
        (("ls", db, "--after", HOSTILE), 1, True),
        (("show", db, WAITING), 0, True),
        (("show", db, FAILED), 0, True),
        (("show", db, WAITING, "--json"), 0, True),
        (("show", db, HOSTILE), 1, True),
        (("events", db), 0, True),
        (("events", db, "--json"), 0, True),
        (("events", db, WAITING), 0, True),
        (("events", db, "--after", HOSTILE), 2, True),
        (("events", db, "--limit", HOSTILE), 2, True),
        (("ls", db, "--state", HOSTILE), 2, True),
        (("ls", db, f"--x{CONTROLS}"), 2, False),
        ((HOSTILE,), 2, True),
        (("ls", db, HOSTILE), 2, True),
        (("approve", db, WAITING, "--input", HOSTILE), 2, True),
        (("approve", db, FAILED), 1, True),
        (("approve", db, WAITING, "--step", HOSTILE), 1, True),
        (("retry", db, FAILED, "--from-step", HOSTILE), 1, True),
        (("export", db, "--html", str(page)), 0, False),
        (("approve", db, WAITING, "--note", HOSTILE), 0, True),
        (("cancel", db, FAILED, "--reason", HOSTILE), 1, True),
        (("retry", db, FAILED), 0, True),
        (("cancel", db, FAILED, "--reason", HOSTILE), 0, True),
        (("show", db, FAILED), 0, True),
        (("ls", db, "--state", "cancelled"), 0, True),
    ]
    for args, code, shows_link in commands:
        result = run(*args)
        out = result.stdout + result.stderr
        assert result.exit_code == code, (args, out)
        assert raw_controls(out) == [], (args, out)
        assert "\x1b" not in out and "\x07" not in out
        if shows_link:
            assert LINK in out, (args, out)
        assert result.exception is None or isinstance(result.exception, SystemExit), args
    assert page.exists()


def test_json_output_escapes_controls_and_still_decodes(hostile: Path) -> None:
    result = run("show", str(hostile), WAITING, "--json")
    assert raw_controls(result.stdout) == []
    assert json.loads(result.stdout)["workflow"]["workflow_id"] == WAITING
    (line, _) = run("ls", str(hostile), "--json").stdout.splitlines()
    assert json.loads(line)["workflow_id"] == WAITING


def test_the_table_shows_controls_as_escapes(hostile: Path) -> None:
    out = run("show", str(hostile), FAILED).stdout
    assert f"f-{LINK}\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\x7f\\u202e" in out


# ------------------------------------------------------------------ pages


@pytest.fixture
def many(tmp_path: Path) -> Path:
    """A store of 53 one-step workflows wf-00 ... wf-52; every third one cancelled."""
    path = tmp_path / "many.db"

    async def make() -> None:
        async with SqliteStore(path) as store:
            for i in range(53):
                await store.start_workflow(f"wf-{i:02d}", ["only"], {"i": i}, 1000.0 + i)
                if i % 3 == 0:
                    await store.cancel_workflow(f"wf-{i:02d}", "enough", 1000.5 + i)

    asyncio.run(make())
    return path


def _ids(result: Result) -> list[str]:
    return [json.loads(line)["workflow_id"] for line in result.stdout.splitlines()]


def test_ls_pages_by_default_and_says_how_to_get_the_next_page(many: Path) -> None:
    """Fault 11: 50 workflows a page, oldest first; the last line names the cursor."""
    first = run("ls", str(many))
    assert first.exit_code == 0
    assert "wf-49" in first.stdout and "wf-50" not in first.stdout
    assert first.stdout.rstrip().splitlines()[-1] == (
        "50 of 53 workflows shown; the next page: --after wf-49 (all at once: --all)")
    rest = run("ls", str(many), "--after", "wf-49")
    assert "wf-50" in rest.stdout and "wf-52" in rest.stdout and "wf-49" not in rest.stdout
    assert "next page" not in rest.stdout
    assert len(_ids(run("ls", str(many), "--all", "--json"))) == 53


def test_ls_json_pages_with_the_hint_on_stderr(many: Path) -> None:
    pages: list[list[str]] = []
    args = ["ls", str(many), "--json", "--limit", "20", "--state", "cancelled"]
    result = run(*args)
    pages.append(_ids(result))
    while "--after" in result.stderr:
        cursor = result.stderr.split("--after ")[1].split()[0]
        result = run(*args, "--after", cursor)
        pages.append(_ids(result))
    assert [len(p) for p in pages] == [18]
    assert pages[0] == [f"wf-{i:02d}" for i in range(0, 53, 3)]
    two = ["ls", str(many), "--json", "--limit", "10"]
    first = run(*two)
    assert _ids(first) == [f"wf-{i:02d}" for i in range(10)]
    assert first.stderr == (
        "10 of 53 workflows shown; the next page: --after wf-09 (all at once: --all)\n")
    assert _ids(run(*two, "--after", "wf-09")) == [f"wf-{i:02d}" for i in range(10, 20)]


def test_ls_after_an_unknown_workflow_is_refused(many: Path) -> None:
    result = run("ls", str(many), "--after", "nope")
    assert result.exit_code == 1
    assert result.stderr == "agentq: no workflow 'nope' in this store (--after)\n"


def test_events_page_by_default(many: Path) -> None:
    first = run("events", str(many), "--json")
    seqs = [json.loads(line)["seq"] for line in first.stdout.splitlines()]
    assert len(seqs) == 50
    assert first.stderr == (
        f"50 events shown; the next page: --after {seqs[-1]} (all at once: --all)\n")
    rest = run("events", str(many), "--json", "--after", str(seqs[-1]))
    more = [json.loads(line)["seq"] for line in rest.stdout.splitlines()]
    assert len(more) == 53 + 18 - 50 and more[0] > seqs[-1] and rest.stderr == ""
    assert len(run("events", str(many), "--json", "--all").stdout.splitlines()) == 71
    table = run("events", str(many), "--limit", "3")
    assert table.stdout.rstrip().splitlines()[-1].startswith(
        "3 events shown; the next page: --after ")


def test_all_and_limit_together_are_a_usage_error(many: Path) -> None:
    for verb in ("ls", "events"):
        result = run(verb, str(many), "--all", "--limit", "5")
        assert result.exit_code == 2 and "give --limit or --all, not both" in result.stderr


# ------------------------------------------------------------------ usage errors


def test_pg_schema_with_a_sqlite_file_is_a_usage_error(many: Path) -> None:
    result = run("--pg-schema", "other", "ls", str(many))
    assert result.exit_code == 2
    assert f"--pg-schema applies to a PostgreSQL DSN, not to the SQLite file {str(many)!r}" in (
        result.stderr)


@pytest.mark.parametrize("option", ["--after", "--limit"])
def test_a_number_option_names_the_value(many: Path, option: str) -> None:
    result = run("events", str(many), option, "x")
    assert result.exit_code == 2
    assert "'x' is not a whole number" in result.stderr
    assert "integer range" not in result.stderr


def test_version() -> None:
    from importlib.metadata import version

    result = run("--version")
    assert result.exit_code == 0 and result.stdout == f"agentq {version('agentq')}\n"


# ------------------------------------------------------------------ as programs


def test_the_console_script_without_the_cli_extra_names_it() -> None:
    """Fault 10: the entry point pyproject installs as ``agentq`` says what to install."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["agentq"]
    module, _, function = entry.partition(":")
    code = (
        "import importlib, sys; sys.modules['click'] = None; sys.argv = ['agentq', '--help']; "
        f"sys.exit(importlib.import_module({module!r}).{function}())"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("agentq: the command line needs the 'cli' extra: "
                                  "pip install 'agentq[cli]'")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr


def test_pg_cluster_help_starts_nothing_and_needs_no_terminal() -> None:
    """Fault 12: ``python -m tests.pg_cluster --help`` is argparse's help, exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.pg_cluster", "--help"],
                          capture_output=True, text=True, env=env, timeout=60, check=False,
                          stdin=subprocess.DEVNULL, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m tests.pg_cluster")
    assert "--install" in done.stdout and "postgresql://" not in done.stdout


def test_visible_escapes_every_kind_and_keeps_text() -> None:
    from agentq.cli.literal import json_line, visible

    kept = "café 東京 a\u00a0b 🙂 …"
    assert visible(kept) == kept
    assert visible("a\x1bb\x9bc\x7fd\u202ee\u2066f\u200bg\u2028h\ni\U000e0041") == (
        "a\\x1bb\\x9bc\\x7fd\\u202ee\\u2066f\\u200bg\\u2028h\\ni\\U000e0041")
    value = {"k": f"{kept}\x1b\u202e\U000e0041\ud800"}
    line = json_line(value)
    assert raw_controls(line) == [] and "東京" in line
    assert json.loads(line) == value


@pytest.mark.parametrize(
    ("sep", "shown"),
    [("\u2028", "\\u2028"), ("\n", "\\n"), ("\x1c", "\\x1c"), ("\x1d", "\\x1d"),
     ("\x1e", "\\x1e"), ("\x1f", "\\x1f"), ("\x85", "\\x85")],
)
def test_show_prints_the_inputs_separators_as_escapes_not_spaces(
    tmp_path: Path, sep: str, shown: str
) -> None:
    """Review A #5: `input:` (and the other short cells) collapsed these to plain spaces,
    hiding what the stored string holds; they are escapes like everywhere else (runs of
    plain spaces still print as one)."""
    path = tmp_path / "sep.db"

    async def make() -> None:
        async with SqliteStore(path) as store:
            await store.start_workflow("wf", ["only"], f"a{sep}b   c", 1000.0)

    asyncio.run(make())
    out = run("show", str(path), "wf").stdout
    assert [line for line in out.splitlines() if line.startswith("input:")] == [
        f"input: a{shown}b c"]


@pytest.mark.parametrize("seconds", [1e30, 1e300, float("nan")])
def test_when_shows_an_out_of_range_stored_time_as_the_number(seconds: float) -> None:
    from agentq.cli.views import when

    assert when(seconds) == repr(seconds)
    assert when(0.0) == "1970-01-01 00:00:00"
