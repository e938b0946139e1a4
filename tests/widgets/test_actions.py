"""Cancel and Retry from the dashboard, each after a confirmation (issue 14)."""

from __future__ import annotations

from typing import Any

from agentq.clock import FakeClock
from agentq.retry import RetryPolicy
from agentq.store import WorkflowState
from agentq.widgets import Dashboard
from agentq.workflows import StepContext, StepDef, WaitForInput, Workflow, WorkflowEngine

PROBE = "<img src=x onerror=alert(1)>"


def asking(workflow_id: str) -> Workflow:
    async def ask(ctx: StepContext) -> Any:
        if not ctx.resumed:
            raise WaitForInput("ok?")
        return ctx.resume_input

    return Workflow(workflow_id, [StepDef("ask", ask)])


def flaky(workflow_id: str, fail: list[bool]) -> Workflow:
    async def step(ctx: StepContext) -> Any:
        if fail and fail.pop():
            raise RuntimeError("down")
        return "done"

    return Workflow(workflow_id, [StepDef("s", step, retry=RetryPolicy(1))])


async def state(engine: WorkflowEngine, workflow_id: str) -> WorkflowState:
    row = await engine.store.get_workflow(workflow_id)
    assert row is not None
    return row.state


async def test_cancel_asks_first_then_runs_once_and_enables_retry(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    wid = f"wf-{PROBE}"
    await engine.run(asking(wid))
    dash = Dashboard(engine)
    await dash.refresh()
    await dash.detail.show(wid)
    bar = dash.actions
    assert not bar.cancel.disabled and bar.retry.disabled  # waiting: cancellable
    bar.cancel.click()
    assert bar.confirm.layout.display is None and bar.cancel.disabled
    assert PROBE not in bar.question.value and "&lt;img" in bar.question.value
    bar.no.click()  # changed their mind: nothing happened
    assert bar.confirm.layout.display == "none" and not bar.cancel.disabled
    assert await state(engine, wid) is WorkflowState.WAITING
    bar.cancel.click()
    bar.yes.click()
    bar.yes.click()  # a second click: one cancel
    assert bar.busy and bar.cancel.disabled and bar.retry.disabled
    await bar.join()
    assert 'data-outcome="cancelled"' in bar.status.value and PROBE not in bar.status.value
    assert await state(engine, wid) is WorkflowState.CANCELLED
    kinds = [e.kind for e in await engine.store.load_events(wid)]
    assert kinds.count("WorkflowCancelled") == 1
    await dash.refresh()  # the detail re-reads the workflow: now it can be retried
    assert bar.cancel.disabled and not bar.retry.disabled
    await dash.stop()


async def test_retry_a_failed_workflow_with_and_without_its_bodies(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    fail = [False, True]  # the first run fails, the retry succeeds
    wf = flaky("f-1", fail)
    assert (await engine.run(wf)).status == "failed"
    dash = Dashboard(engine)
    await dash.refresh()
    await dash.detail.show("f-1")
    bar = dash.actions
    assert bar.cancel.disabled and not bar.retry.disabled
    # The engine dropped the bodies when the run failed: the error says what to do.
    bar.retry.click()
    bar.yes.click()
    await bar.join()
    assert 'data-outcome="error"' in bar.status.value
    assert "UnknownWorkflowError" in bar.status.value and "pass the Workflow" in bar.status.value
    assert not bar.retry.disabled  # another try is allowed
    # With workflow_for, the widget finds them.
    dash2 = Dashboard(engine, workflow_for={"f-1": wf}.get)
    await dash2.refresh()
    await dash2.detail.show("f-1")
    dash2.actions.retry.click()
    dash2.actions.yes.click()
    await dash2.actions.join()
    assert 'data-outcome="completed"' in dash2.actions.status.value
    assert await state(engine, "f-1") is WorkflowState.COMPLETED
    await dash2.refresh()
    assert dash2.actions.retry.disabled and dash2.actions.cancel.disabled
    await dash.stop()
    await dash2.stop()


async def test_nothing_selected_nothing_enabled(engine: WorkflowEngine) -> None:
    dash = Dashboard(engine)
    await dash.refresh()
    assert dash.actions.cancel.disabled and dash.actions.retry.disabled
    dash.actions.ask("cancel")  # from code, with nothing selected: ignored
    assert dash.actions.confirm.layout.display == "none"
    await dash.stop()


async def test_a_click_from_another_thread_runs_on_the_widgets_loop(
    engine: WorkflowEngine,
) -> None:
    # ipykernel 7 may call a button's callback on another thread and loop than the cells'
    # (seen in JupyterLab: engine.retry ran on the wrong loop and raised WrongLoopError).
    import asyncio

    await engine.run(asking("t-1"))
    dash = Dashboard(engine)
    await dash.refresh()
    await dash.detail.show("t-1")
    bar = dash.actions
    bar.cancel.click()
    await asyncio.to_thread(bar.yes.click)  # no running loop in that thread
    await asyncio.sleep(0)  # the task is created on this loop, from the thread's callback
    await bar.join()
    assert 'data-outcome="cancelled"' in bar.status.value, bar.status.value
    assert await state(engine, "t-1") is WorkflowState.CANCELLED
    # Selecting in the detail pane from another thread reads on this loop too.
    dash.detail.choices(["t-1"])
    await asyncio.to_thread(setattr, dash.detail.items, "value", ("step", 0))
    assert 'data-kind="step"' in dash.detail.html.value
    await dash.stop()


async def test_retry_of_a_definition_this_engine_does_not_hold_is_recorded(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    from agentq.queue import Queue
    from agentq.workflows import WorkflowDef

    async def boom(ctx: StepContext) -> Any:
        raise RuntimeError("down")

    engine.register(WorkflowDef("job", [StepDef("s", boom, retry=RetryPolicy(1))]))
    await engine.start("job", "job-1")
    assert (await engine.run("job-1")).status == "failed"
    async with Queue(clock=clock) as queue:  # a notebook's engine, without the definition
        viewer = WorkflowEngine(queue, engine.store, worker_id="viewer", clock=clock)
        dash = Dashboard(viewer)
        await dash.refresh()
        await dash.detail.show("job-1")
        dash.actions.retry.click()
        dash.actions.yes.click()
        await dash.actions.join()
        status = dash.actions.status.value
        assert 'data-outcome="recorded"' in status and "&#x27;job&#x27;" in status, status
        assert await state(engine, "job-1") is WorkflowState.RUNNING  # a serving engine runs it
        await dash.stop()
