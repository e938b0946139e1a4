"""`RunView` as a person uses it, through the widget objects: approvals answered inline
(Approve, Edit + Approve, Deny), Fork from here with an edited tool result and an edited model
text, the details toggle, the event history's pages, streamed text, and the Dashboard showing
the selected agent run as a conversation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import agent_crash_child as child
import pytest

from agentq import Queue, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.store import MemoryStore
from agentq.widgets import Dashboard, RunView

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def durable(tmp_path: Path) -> AsyncIterator[DurableAgent[None]]:
    async with Queue() as queue:
        engine = WorkflowEngine(queue, MemoryStore())
        agent = DurableAgent(child.build_agent(tmp_path / "side", approval=True), engine)
        run = await agent.run(child.PROMPT, run_id="r1")
        assert run.status.value == "waiting"
        yield agent
        await engine.close()


def html_of(view: RunView) -> str:
    return "".join(getattr(c, "value", "") for c in view.body.children
                   if hasattr(c, "value")) + "".join(
        b.html.value for b in view._blocks.values())


async def test_approve_inline_sits_under_the_waiting_tool_card(
    durable: DurableAgent[None],
) -> None:
    view = RunView(durable.engine, "r1", agent=durable)
    assert await view.refresh()
    slot = view.panel.slots[0]
    children = list(view.body.children)
    assert slot.box in children
    card = view._blocks["model:2/s1"]
    assert children.index(slot.box) == children.index(card.box) + 1  # under its card
    assert slot.reject.description == "Deny" and slot.edit is not None
    assert slot.args.layout.display == "none"  # the editor waits for Edit
    slot.approve.click()
    assert slot.approve.disabled  # at once: one resume
    await view.panel.join()
    await view.refresh()
    conv = view.conversation
    assert conv is not None and conv.state == "completed"
    assert conv.turns[2].tools[0].result == "sent to bob"
    assert slot.box not in view.body.children
    assert 'data-outcome="completed"' in view.panel.log.value
    await view.stop()


async def test_edit_then_approve_sends_the_edited_arguments_and_deny_sends_the_note(
    durable: DurableAgent[None],
) -> None:
    view = RunView(durable.engine, "r1", agent=durable)
    await view.refresh()
    slot = view.panel.slots[0]
    assert slot.edit is not None
    slot.edit.click()
    assert slot.args.layout.display is None
    assert json.loads(slot.args.value) == {"to": "bob"}
    slot.args.value = '{"to": "eve"}'
    slot.approve.click()
    await view.panel.join()
    await view.refresh()
    conv = view.conversation
    assert conv is not None and conv.turns[2].tools[0].result == "sent to eve"
    assert conv.turns[2].tools[0].approvals[0].override_args == {"to": "eve"}

    await durable.run(child.PROMPT, run_id="r2")
    view.show("r2")
    await view.refresh()
    slot = next(s for s in view.panel.slots if s.key is not None)
    assert slot.key == ("r2", 0)
    slot.note.value = "not bob"
    slot.reject.click()
    await view.panel.join()
    await view.refresh()
    conv = view.conversation
    assert conv is not None and conv.run_id == "r2"
    [send] = conv.turns[2].tools
    assert send.state == "denied" and send.approvals[0].note == "not bob"
    await view.stop()


async def test_fork_from_a_tool_result_with_an_edited_value_shows_the_fork_here(
    durable: DurableAgent[None],
) -> None:
    await durable.approve("r1")
    view = RunView(durable.engine, "r1", agent=durable)
    await view.refresh()
    block = view._blocks["model:1/m1"]
    assert block.target == ("r1", "tool", "tool:1.0:m1", 21)
    block.button.click()
    form = view.forks
    children = list(view.body.children)
    assert children.index(form.box) == children.index(block.box) + 1  # under the card
    assert json.loads(form.value.value) == 21 and form.new_id.value == "r1-fork-1"
    form.value.value = "100"
    form.fork.click()
    await form.spawner.join()
    await view.spawner.join()
    assert view.run_id == "r1-fork-1", form.status.value
    conv = view.conversation
    assert conv is not None and conv.forked_from == ("r1", "tool:1.0:m1", ("tool:1.0:m1",))
    assert conv.turns[1].tools[0].result == 100
    assert view.compare_parent.layout.display is None
    view.compare_parent.click()
    await view.spawner.join()
    assert view.comparison is not None and view.comparison.diverged_at == 1
    assert 'data-agentq="compare"' in view.compared.value
    view.parent.click()
    await view.spawner.join()
    assert view.run_id == "r1"
    await view.stop()


async def test_fork_from_a_model_request_with_edited_text_and_bad_input_refused(
    durable: DurableAgent[None],
) -> None:
    await durable.approve("r1")
    view = RunView(durable.engine, "r1", agent=durable)
    await view.refresh()
    view._blocks["model:3"].button.click()
    form = view.forks
    assert form.value.value == "done after 3 requests"
    form.value.value = "an edited answer"
    form.new_id.value = "edited"
    form.fork.click()
    await form.spawner.join()
    await view.spawner.join()
    conv = view.conversation
    assert conv is not None and conv.run_id == "edited" and conv.output == "an edited answer"
    # A tool result that is not JSON is refused in the form: nothing is sent.
    view._blocks["model:1/m1"].button.click()
    form.value.value = "{not json"
    form.fork.click()
    assert "not JSON" in form.status.value and 'data-outcome="error"' in form.status.value
    view.forks.agent = None
    form.fork.click()
    assert "needs the agent" in form.status.value
    await view.stop()


async def test_details_toggle_shows_keys_and_the_event_history_pages(
    durable: DurableAgent[None],
) -> None:
    view = RunView(durable.engine, "r1", agent=durable, events=4)
    await view.refresh()
    block = view._blocks["model:0/a1"]
    assert "tool:0.0:a1 ·" not in block.html.value
    view.details.value = True
    assert "tool:0.0:a1 ·" in block.html.value and "fingerprint" in block.html.value
    history = view.history
    history.toggle.value = True
    await history.spawner.join()
    assert history.page is not None and len(history.page.events) == 4 and history.page.more
    assert history.older.disabled and not history.newer.disabled
    history.newer.click()
    await history.spawner.join()
    assert history.page.events[0].seq > 4 and not history.older.disabled
    history.older.click()
    await history.spawner.join()
    assert history.page.events[0].seq == 1
    await view.stop()


class Streaming:
    """An agent stand-in that streams: what `RunView` reads of ``partial``."""

    def __init__(self) -> None:
        self.text: dict[str, str] = {}

    def partial(self, run_id: str) -> Mapping[str, str]:
        return self.text

    async def fork(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("not here")


async def test_streamed_text_of_a_running_request_is_drawn_without_a_read(
    durable: DurableAgent[None],
) -> None:
    store = durable.engine.store
    agent = Streaming()
    view = RunView(durable.engine, "r1", agent=agent)
    await view.refresh()
    conv = view.conversation
    assert conv is not None
    # A request under way: its row says started (as the log has it while the model streams).
    running = conv.turns[0].__class__(key="model:3", number=3, state="started")
    view.conversation = conv.__class__(**{**{f: getattr(conv, f) for f in (
        "run_id", "state", "prompt", "options", "output", "error", "forked_from", "children",
        "started_at", "updated_at", "details")}, "turns": (*conv.turns, running)})
    agent.text = {"model:3": "Hel"}
    seq = await store.last_seq()
    assert await view.update(None)
    assert 'data-agentq="partial" data-chars="3"' in view._blocks["model:3"].html.value
    agent.text = {"model:3": "Hello <b>"}
    assert await view.update(None)
    assert "Hello &lt;b&gt;" in view._blocks["model:3"].html.value
    assert not await view.update(None)  # nothing new: nothing drawn
    assert await store.last_seq() == seq
    await view.stop()


async def test_the_dashboard_shows_a_selected_agent_run_as_a_conversation(
    durable: DurableAgent[None],
) -> None:
    dash = Dashboard(durable.engine, agent=durable, prices={"function:respond:": (1.0, 2.0)})
    await dash.refresh()
    assert dash._conversation_box.layout.display == "none"
    await dash.detail.show("r1")
    await dash.refresh()
    assert dash.conversation.run_id == "r1"
    assert dash._conversation_box.layout.display is None
    conv = dash.conversation.conversation
    assert conv is not None and conv.cost is not None and conv.cost > 0
    dash.events.toggle.value = True  # the Detail's event history (any workflow)
    await dash.events.spawner.join()
    assert dash.events.workflow_id == "r1" and dash.events.page is not None
    assert 'data-kind="WorkflowStarted"' in dash.events.table.value
    assert dash.conversation.history.toggle.layout.display == "none"  # one toggle, not two
    slot = next(s for s in dash.conversation.panel.slots if s.key is not None)
    slot.approve.click()
    await dash.conversation.panel.join()
    await dash.refresh()
    assert dash.conversation.conversation is not None
    assert dash.conversation.conversation.state == "completed"
    assert dash.events.page.more and not dash.events.newer.disabled  # the page filled up
    dash.events.newer.click()
    await dash.events.spawner.join()
    assert 'data-kind="WorkflowCompleted"' in dash.events.table.value
    await dash.stop()


class Recording(Streaming):
    """An agent stand-in that records the fork it is asked for, and refuses a second one."""

    def __init__(self) -> None:
        super().__init__()
        self.forks: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    async def fork(self, *args: Any, **kwargs: Any) -> None:
        self.forks.append((args, kwargs))
        if len(self.forks) > 1:
            raise ValueError("run 'r1' recorded no call 'model:9'")


async def test_fork_passes_the_run_options_and_shows_a_refusal(
    durable: DurableAgent[None],
) -> None:
    agent = Recording()
    view = RunView(durable.engine, "r1", agent=agent)
    await view.refresh()
    view._blocks["model:1"].button.click()
    form = view.forks
    assert form.box in view.body.children
    form.instructions.value = "Answer in French."
    form.model.value = "openai:gpt-4o"
    form.fork.click()
    await form.spawner.join()
    assert agent.forks == [(("r1", "r1-fork-1"), {
        "at": "model:1", "replace": None, "instructions": "Answer in French.",
        "model": "openai:gpt-4o"})]
    await view.spawner.join()  # the view moved to the fork, which this stand-in never stored
    assert view.run_id == "r1-fork-1" and view.error is None
    assert 'data-agentq="run-missing"' in view.head.value and view.conversation is None
    view.show("r1")
    await view.refresh()
    view._blocks["model:1"].button.click()
    form.fork.click()
    await form.spawner.join()
    assert "recorded no call" in form.status.value and view.run_id == "r1"
    assert form.box.layout.display is None  # the form stays open to fix the request
    await view.stop()  # a refusal is shown, not raised
