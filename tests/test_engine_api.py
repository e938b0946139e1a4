"""Issue 9 item 15, engine parts: the API refuses misuse early and says what it means.

`resume` needs its input (and `ctx.resumed` tells "resumed with None" from "not resumed");
`recover(None)` and a step function with the wrong parameters are `TypeError`s naming the
value; closing the engine from inside its own step is refused; the README's taste runs again
on the same database.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import DeadlockError
from agentq.queue import Queue
from agentq.store import DurableStore
from agentq.workflows import (
    RunStatus,
    StepContext,
    StepDef,
    WaitForInput,
    Workflow,
    WorkflowEngine,
    recover,
)
from agentq.workflows.model import _plainly_takes_one

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
async def engine(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    async with Queue(clock=clock) as queue, WorkflowEngine(
        queue, store, worker_id="w1", clock=clock
    ) as eng:
        yield eng


# ------------------------------------------------------------------ resume and ctx.resumed


def test_resume_requires_its_input() -> None:
    parameter = inspect.signature(WorkflowEngine.resume).parameters["input"]
    assert parameter.default is inspect.Parameter.empty


async def test_resume_without_input_is_a_type_error_and_changes_nothing(
    engine: WorkflowEngine,
) -> None:
    async def gate(ctx: StepContext) -> Any:
        if not ctx.resumed:
            raise WaitForInput("approve?")
        return ctx.resume_input

    await engine.run(Workflow("wf-no-input", [StepDef("gate", gate)]))
    n = len(await engine.store.load_events("wf-no-input"))
    with pytest.raises(TypeError, match="input"):
        await engine.resume("wf-no-input", "gate")  # type: ignore[call-arg]
    assert len(await engine.store.load_events("wf-no-input")) == n


async def test_a_step_tells_resumed_with_none_from_not_resumed(engine: WorkflowEngine) -> None:
    """Field report: `resume(id, step)` with the default None put the step back to waiting."""
    seen: list[tuple[bool, Any]] = []

    async def gate(ctx: StepContext) -> str:
        seen.append((ctx.resumed, ctx.resume_input))
        if not ctx.resumed:
            raise WaitForInput("acknowledge?")
        return "acknowledged"

    first = await engine.run(Workflow("wf-none", [StepDef("gate", gate)]))
    assert first.status is RunStatus.WAITING
    result = await engine.resume("wf-none", "gate", None)
    assert result.status is RunStatus.COMPLETED and result.output == "acknowledged"
    assert seen == [(False, None), (True, None)]


# ------------------------------------------------------------------ arguments checked early


async def test_recover_of_something_else_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="WorkflowEngine, got None"):
        await recover(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'engine'"):
        await recover("engine")  # type: ignore[arg-type]


class Tool:
    def __call__(self, ctx: StepContext) -> str:
        return "called"


def two(ctx: StepContext, extra: int) -> int:
    return extra


def keyword_only(*, ctx: StepContext) -> None:
    return None


@pytest.mark.parametrize(
    ("fn", "shown"),
    [
        (lambda: 1, "<lambda>()"),
        (two, "two(ctx: 'StepContext', extra: 'int')"),
        (keyword_only, "keyword_only(*, ctx: 'StepContext')"),
        (functools.partial(two, extra=1, ctx=None), "functools.partial(two)(*, ctx: "),
    ],
    ids=["no-parameter", "two-parameters", "keyword-only", "partial-filled"],
)
def test_a_step_function_that_cannot_take_ctx_is_refused_at_construction(
    fn: Any, shown: str
) -> None:
    with pytest.raises(TypeError) as refused:
        StepDef("fetch", fn)
    message = str(refused.value)
    assert message.startswith("step 'fetch': fn ") and shown in message
    assert "exactly one positional argument" in message


@pytest.mark.parametrize(
    "fn",
    [
        lambda ctx: 1,
        lambda *args: 1,
        lambda ctx, retries=3: 1,
        functools.partial(two, extra=1),
        Tool(),
        len,  # a builtin with a signature: (obj, /)
        max,  # a builtin without one: not checked
    ],
    ids=["one", "varargs", "default", "partial", "callable-object", "len", "max"],
)
def test_step_functions_that_take_ctx_are_accepted(fn: Any) -> None:
    assert StepDef("fetch", fn).fn is fn


@pytest.mark.parametrize(
    "params",
    ["", "a", "a, b", "a, b=1", "a=1, b=2", "*a", "a, *b", "*, a", "*, a=1", "a, *, b",
     "a, *, b=1", "a, /", "a, b, /", "a, /, b=1", "**k", "a, **k", "*a, **k", "a=1",
     "a, b=1, /, c=2, *d, e=3, **f"],
)
def test_the_code_reading_of_a_step_function_agrees_with_inspect(params: str) -> None:
    """`StepDef` reads a plain function's parameters off its code (issue 25: `inspect.
    signature` cost ~15 µs a step built); it must accept exactly what `inspect` binds."""
    scope: dict[str, Any] = {}
    exec(f"def fn({params}): return None", scope)
    fn = scope["fn"]
    try:
        inspect.signature(fn).bind(None)
        binds = True
    except TypeError:
        binds = False
    assert _plainly_takes_one(fn) == binds
    if binds:
        assert StepDef("s", fn).fn is fn
    else:
        with pytest.raises(TypeError, match="exactly one positional argument"):
            StepDef("s", fn)


def test_a_wrapper_is_judged_by_the_function_it_wraps_as_inspect_does() -> None:
    @functools.wraps(two)
    def wrapper(*args: Any) -> Any:
        return two(*args)

    assert not _plainly_takes_one(wrapper)  # asks inspect, which follows __wrapped__
    with pytest.raises(TypeError, match="exactly one positional argument"):
        StepDef("s", wrapper)


# ------------------------------------------------------------------ closing from inside


async def test_closing_the_engine_from_inside_its_own_step_is_refused(
    engine: WorkflowEngine,
) -> None:
    async def closer(ctx: StepContext) -> str:
        await engine.close()
        return "closed"

    result = await asyncio.wait_for(
        engine.run(Workflow("wf-close-inside", [StepDef("closer", closer)])), 10
    )
    assert result.status is RunStatus.FAILED
    assert "DeadlockError" in (result.reason or "") and "wf-close-inside" in (result.reason or "")
    assert DeadlockError.__name__ in (result.reason or "")


# ------------------------------------------------------------------ the README's taste


def readme_taste() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"## A taste\n\n```python\n(.*?)```", text, re.DOTALL)
    assert match, "the README has its taste"
    return match.group(1)


def test_the_readme_taste_runs_again_on_the_same_database(tmp_path: Path) -> None:
    """Field report: with a fixed database path, the second run raised NotWaitingError."""
    outputs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", readme_taste()],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
            env={"PYTHONPATH": str(ROOT), "PATH": ""},
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == "84\ncompleted ({'hits': 3}, 'sent')\n"
    assert (tmp_path / "agentq.db").exists()


def test_the_workflows_guides_first_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "workflows.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert match
    exec(compile(match.group(1), "workflows.md", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out == "completed Paris: 21 °C\n"
