"""``agentq show`` of a `DurableAgent` run prints its messages: the prompt, each model
request's text, the tool calls with their arguments, their returns and approvals, the answer;
every stored string literally (never markup, never a terminal control); ``show --json`` holds
them whole, as stored, in ``messages``. Other workflows show no messages section."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import agent_crash_child as child
import agent_delegates
import pytest
from click.testing import CliRunner, Result
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq.cli import cli
from agentq.cli.commands import Settings
from agentq.cli.conversation import messages_view
from agentq.clock import FakeClock
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.queue import Queue
from agentq.store import SqliteStore
from agentq.widgets import load_conversation
from agentq.workflows import StepDef, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)

LINK = "[link=https://evil.example]click[/link]"
CONTROLS = "\x1b[2J\x1b]0;pwned\x07\x9b31m\x7f\u202e\u2066\u2069\u200b\u2028\x00"
HOSTILE = f"{LINK}{CONTROLS}[bold]b[/bold]"
"""What a model or a tool may write: Rich markup, ESC/OSC/CSI, DEL, C1, bidi, NUL."""


def hostile_agent() -> Agent[None, str]:
    """One request asks for ``echo(text=HOSTILE)``, the next answers in two lines."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            return ModelResponse(parts=[TextPart(f"calling {HOSTILE}"),
                                        ToolCallPart("echo", {"text": HOSTILE}, "e1")])
        return ModelResponse(parts=[TextPart(f"first line\nsecond {HOSTILE}")])

    agent = Agent(FunctionModel(respond), name="hostile")

    @agent.tool_plain
    def echo(text: str) -> str:
        return f"echoed {text}"

    return agent


def big_agent() -> Agent[None, str]:
    """One request asks for ``big`` (a 5,000-character return of two lines) and ``retry`` (a
    `ModelRetry` of 5,000 characters), the next answers with 100,000 characters."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            return ModelResponse(parts=[ToolCallPart("big", {"s": "A" * 1000}, "b1"),
                                        ToolCallPart("retry", {}, "b2")])
        return ModelResponse(parts=[TextPart("Z" * 100_000)])

    agent = Agent(FunctionModel(respond), name="big", retries=0)

    @agent.tool_plain
    def big(s: str) -> str:
        return "R" * 5000 + "\nsecond line"

    @agent.tool_plain(retries=2)
    def retry() -> str:
        raise ModelRetry("E" * 5000)

    return agent


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file with a waiting agent run, a completed one, a hostile one and a plain workflow."""
    path = tmp_path_factory.mktemp("messages") / "agents.db"

    async def make() -> None:
        async with Queue() as queue, SqliteStore(path) as store, WorkflowEngine(
            queue, store
        ) as engine:
            side = path.parent / "side"
            waiting = DurableAgent(child.build_agent(side, approval=True), engine)
            assert (await waiting.run(child.PROMPT, run_id="r-wait")).status.value == "waiting"
            done = DurableAgent(child.build_agent(side), engine)
            assert (await done.run(child.PROMPT, run_id="r-done")).status.value == "completed"
            bad = DurableAgent(hostile_agent(), engine)
            assert (await bad.run(f"user {HOSTILE}", run_id="r-bad")).status.value == "completed"
            await engine.run(Workflow("plain", [StepDef("s", lambda ctx: "out")]))
            boss, helper = agent_delegates.build(engine)
            assert (await boss.run("go", run_id="dw")).status.value == "waiting"
            assert (await boss.run("go", run_id="dc")).status.value == "waiting"
            assert (await helper.approve("dc/tool:0.1:d2")).status.value == "completed"
            assert (await boss.run("go", run_id="dc")).status.value == "completed"
            big = DurableAgent(big_agent(), engine)
            assert (await big.run("B" * 3000, run_id="big")).status.value == "completed"

    asyncio.run(make())
    return path


def show(db: Path, workflow_id: str, *options: str) -> str:
    """``agentq show DB WORKFLOW_ID [options]``'s output (400 columns wide); exit code 0."""
    result: Result = CliRunner().invoke(
        cli, ["show", str(db), workflow_id, *options],
        obj=Settings(clock=FakeClock(), width=400))
    assert result.exit_code == 0, result.output
    return result.output


def messages(output: str) -> list[str]:
    """The lines of the messages section, right-stripped."""
    lines = output.splitlines()
    return [line.rstrip() for line in lines[lines.index("messages"):]]


def test_a_waiting_run_shows_its_prompt_tool_calls_returns_and_the_approval(db: Path) -> None:
    got = messages(show(db, "r-wait"))
    assert got[1] == "  user: add 1+2 and 3+4, then multiply 3 by 7"
    assert got[2].startswith("  model #0 (function:respond:, ")
    assert got[3:7] == [
        '    tool call add [a1] {"a": 1, "b": 2}',
        "      returned: 3",
        '    tool call add [a2] {"a": 3, "b": 4}',
        "      returned: 7",
    ]
    assert got[8:10] == ['    tool call mul [m1] {"a": 3, "b": 7}', "      returned: 21"]
    assert got[-2:] == ['    tool call send [s1] {"to": "bob"}',
                        "      approval approval:2.0:s1: waiting"]
    assert not any(line.startswith("  answer") for line in got)


def test_a_completed_run_shows_the_models_text_and_the_answer(db: Path) -> None:
    got = messages(show(db, "r-done"))
    assert got[-3].startswith("  model #2 (function:respond:, ")
    assert got[-2:] == ["    text: done after 2 requests", "  answer: done after 2 requests"]


def test_stored_strings_print_literally_never_as_markup_or_controls(db: Path) -> None:
    output = show(db, "r-bad")
    assert [c for c in output if c != "\n" and unicodedata.category(c)
            in {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}] == []
    escaped = (f"{LINK}\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\x7f\\u202e\\u2066\\u2069\\u200b"
               "\\u2028\\x00[bold]b[/bold]")
    got = messages(output)
    assert got[1] == f"  user: user {escaped}"
    assert got[3] == f"    text: calling {escaped}"
    args = escaped.replace("\\x1b", "\\u001b").replace("\\x07", "\\u0007").replace(
        "\\x00", "\\u0000")  # JSON spells these C0 controls as \u escapes
    assert got[4] == f'    tool call echo [e1] {{"text": "{args}"}}'
    assert got[5] == f"      returned: echoed {escaped}"
    # a model's text keeps its own line breaks; each line is printed literally
    assert got[-4:] == ["    text: first line", f"      second {escaped}",
                        "  answer: first line", f"    second {escaped}"]


def test_a_workflow_that_is_no_agent_run_has_no_messages_section(db: Path) -> None:
    assert "messages" not in show(db, "plain").splitlines()


def test_the_messages_need_no_pydantic_ai(db: Path) -> None:
    """The messages are read from the stored rows (JSON): ``agentq show`` prints them in a
    process where pydantic-ai cannot be imported (the ``cli`` extra alone)."""
    code = (
        "import sys\n"
        "sys.modules['pydantic_ai'] = None  # import pydantic_ai raises ImportError\n"
        "from agentq.cli import main\n"
        f"sys.argv = ['agentq', 'show', {str(db)!r}, 'r-wait']\n"
        "main()\n"
    )
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    got = messages(done.stdout)
    assert got[1] == "  user: add 1+2 and 3+4, then multiply 3 by 7"
    assert '    tool call mul [m1] {"a": 3, "b": 7}' in got


def test_each_child_run_sits_under_the_call_its_wait_names_with_its_own_state(
    db: Path,
) -> None:
    """Two ``delegate`` calls and a plain one in one response: each child under its own call,
    ``d1``'s completed child as completed (its wait row answered), ``d2``'s as waiting for
    its approval; the call parked on it reads as waiting for it, not failed."""
    out = show(db, "dw")
    got = messages(out)
    # d1's end answered its wait row (ChildEnded): its outcome follows, as for any answered
    # child wait
    assert got[5].startswith('      child run dw/tool:0.0:d1: completed {"child": ')
    got[5] = got[5].split(" {", 1)[0]
    assert got[3:11] == [
        '    tool call delegate [d1] {"task": "A"}',
        "      returned: helper done",
        "      child run dw/tool:0.0:d1: completed",
        '    tool call delegate [d2] {"task": "B approve"}',
        "      waiting for child run 'dw/tool:0.1:d2' (helper)",
        "      child run dw/tool:0.1:d2: waiting",
        "    tool call plain [p1] {}",
        "      returned: plain",
    ]
    assert "InputRequested" not in out and "failed" not in out
    assert "child runs: dw/tool:0.0:d1 (completed), dw/tool:0.1:d2 (waiting)" in out
    [row] = [line for line in out.splitlines() if "│ tool:0.1:d2" in line]
    assert "│ waiting " in row and "waiting for child run 'dw/tool:0.1:d2'" in row
    # d1's end answered its wait row while the run goes on (it read `waiting` before)
    [d1] = [line for line in out.splitlines() if "│ child:tool:0.0:d1 " in line]
    assert "│ answered " in d1 and '{"child": "dw/tool:0.0:d1", "state": "completed"' in d1


def test_after_the_approval_every_child_shows_completed(db: Path) -> None:
    got = messages(show(db, "dc"))
    assert got[8].startswith('      child run dc/tool:0.1:d2: completed {"child": ')  # + outcome
    assert got[5].startswith('      child run dc/tool:0.0:d1: completed {"child": ')
    got[5] = got[5].split(" {", 1)[0]
    assert got[3:8] + got[9:11] == [
        '    tool call delegate [d1] {"task": "A"}',
        "      returned: helper done",
        "      child run dc/tool:0.0:d1: completed",
        '    tool call delegate [d2] {"task": "B approve"}',
        "      returned: helper done",
        "    tool call plain [p1] {}",
        "      returned: plain",
    ]
    assert got[-1] == "  answer: final"


def test_long_values_are_shortened_and_a_model_retry_reads_as_one(db: Path) -> None:
    async def read() -> list[str]:
        async with SqliteStore(db) as store:
            return messages_view(await load_conversation(store, "big")).plain.splitlines()

    got = asyncio.run(read())  # unwrapped: `show` wraps at the terminal's width
    assert len(show(db, "big")) < 12_000
    user = "  user: "
    assert got[1] == user + "B" * 1999 + "…"  # a text: TEXT_CHARS
    [returned] = [line for line in got if line.startswith("      returned: ")]
    assert returned == "      returned: " + "R" * 299 + "…"  # the line break past the cut
    [retry] = [line for line in got if "asked the model" in line]
    assert retry == "      asked the model to retry: " + "E" * 299 + "…"
    assert not any(line.startswith("      returned: {") for line in got)
    assert got[-1] == "  answer: " + "Z" * 1999 + "…"
    assert max(len(line) for line in got) < 2100


def test_a_plain_workflow_without_hooks_shows_no_hooks_line(db: Path) -> None:
    assert "on_end hooks" not in show(db, "plain")


def show_json(db: Path, workflow_id: str) -> dict[str, Any]:
    """``agentq show DB WORKFLOW_ID --json``: its one line, decoded."""
    [line] = show(db, workflow_id, "--json").splitlines()
    value: dict[str, Any] = json.loads(line)
    return value


def test_show_json_lists_an_agent_runs_messages(db: Path) -> None:
    got = show_json(db, "r-wait")["messages"]
    assert [m["role"] for m in got] == ["user", "model", "model", "model"]
    assert got[0]["prompt"] == "add 1+2 and 3+4, then multiply 3 by 7"
    assert [m["key"] for m in got[1:]] == ["model:0", "model:1", "model:2"]
    assert got[1]["state"] == "completed" and got[1]["input_tokens"] > 0
    calls = [(c["tool"], c["tool_call_id"], c["args"], c["state"], c["result"])
             for m in got[1:3] for c in m["tool_calls"]]
    assert calls == [("add", "a1", {"a": 1, "b": 2}, "completed", 3),
                     ("add", "a2", {"a": 3, "b": 4}, "completed", 7),
                     ("mul", "m1", {"a": 3, "b": 7}, "completed", 21)]
    [send] = got[3]["tool_calls"]
    assert (send["tool"], send["args"], send["result"]) == ("send", {"to": "bob"}, None)
    [ask] = send["approvals"]
    assert (ask["key"], ask["state"], ask["approved"]) == ("approval:2.0:s1", "waiting", None)
    done = show_json(db, "r-done")["messages"]
    assert done[-1] == {"role": "answer", "output": "done after 2 requests"}
    assert done[-2]["text"] == "done after 2 requests"


def test_show_json_messages_hold_the_strings_as_stored(db: Path) -> None:
    """Nothing shortened, nothing escaped but by JSON: each string decodes to what was
    stored (markup, controls, bidi and NUL included; the line has no raw control)."""
    output = show(db, "r-bad", "--json")
    assert [c for c in output.rstrip("\n") if unicodedata.category(c)
            in {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}] == []
    got = json.loads(output)["messages"]
    assert got[0]["prompt"] == f"user {HOSTILE}"
    assert got[1]["text"] == f"calling {HOSTILE}"
    [echo] = got[1]["tool_calls"]
    assert echo["args"] == {"text": HOSTILE} and echo["result"] == f"echoed {HOSTILE}"
    assert got[-1] == {"role": "answer", "output": f"first line\nsecond {HOSTILE}"}
    big = show_json(db, "big")["messages"]
    assert big[0]["prompt"] == "B" * 3000
    [ret, retry] = big[1]["tool_calls"]
    assert ret["result"] == "R" * 5000 + "\nsecond line"
    assert retry["state"] == "retry" and "E" * 5000 in retry["error"]
    assert big[-1] == {"role": "answer", "output": "Z" * 100_000}


def test_show_json_messages_nest_child_runs_under_their_call(db: Path) -> None:
    got = show_json(db, "dw")
    [d1, d2, plain] = got["messages"][1]["tool_calls"]
    [kid] = d1["child_runs"]
    assert (kid["workflow_id"], kid["state"], kid["messages"]) == (
        "dw/tool:0.0:d1", "completed", None)
    assert kid["output"]["state"] == "completed"  # the outcome its wait was answered with
    assert d2["state"] == "waiting" and d2["waiting_on"] == "child run 'dw/tool:0.1:d2' (helper)"
    assert [(k["workflow_id"], k["state"], k["output"]) for k in d2["child_runs"]] == [
        ("dw/tool:0.1:d2", "waiting", None)]
    assert (plain["tool"], plain["result"], plain["child_runs"]) == ("plain", "plain", [])
    assert {c["key"]: c["state"] for c in got["calls"]}["child:tool:0.0:d1"] == "answered"


def test_show_json_of_a_workflow_that_is_no_agent_run_has_no_messages(db: Path) -> None:
    got = show_json(db, "plain")
    assert got["messages"] is None and got["steps"][0]["output"] == "out"
