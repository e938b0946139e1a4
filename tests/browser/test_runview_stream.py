"""A streamed agent run appears live in the conversation view (`RunView` with the agent):
the text of the request in flight is drawn while the model streams, before the log has the
response, and the view shows the recorded answer once the request ends.

Screenshot: ``out/screenshots/runview/streaming-1000.png`` (``/out/`` is ignored by git).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from playwright.async_api import expect

from .conftest import OpenNotebook, RunAll

SHOTS = Path(__file__).resolve().parents[2] / "out" / "screenshots" / "runview"

SETUP = '''
import asyncio

from pydantic_ai import Agent
from pydantic_ai.models.function import FunctionModel

from agentq import Queue, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.store import MemoryStore
from agentq.widgets import RunView

gate = asyncio.Event()


async def stream(messages, info):
    yield "The parcel was broken, "
    yield "so I am checking the refund policy"
    await gate.wait()  # the request is held here until the next cell opens the gate
    yield " and a refund of 120 EUR is on its way."


agent = Agent(FunctionModel(stream_function=stream), name="streamer")
engine = WorkflowEngine(Queue(), MemoryStore())
durable = DurableAgent(agent, engine)
pieces = []


async def listen():
    async with durable.run_stream("Order 42 arrived broken", run_id="live-1") as s:
        async for text in s.stream_text(delta=True):
            pieces.append(text)
        return await s.result()

listening = asyncio.ensure_future(listen())
while not durable.partial("live-1"):
    await asyncio.sleep(0.01)
view = RunView(engine, "live-1", agent=durable).start()
view
'''

OPEN = '''
gate.set()
run = await listening
print(run.status, len(pieces))
'''


def notebook(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path = folder / "runview_stream.ipynb"
    nbformat.write(nb, path)
    return path


async def test_a_streamed_request_is_drawn_live_then_its_recorded_answer(
    open_notebook: OpenNotebook, run_all: RunAll, tmp_path: Path
) -> None:
    page = await open_notebook("runview_stream.ipynb", source=notebook(tmp_path))
    await page.set_viewport_size({"width": 1000, "height": 1400})
    await run_all(page)
    view = page.locator(".agentq-runview").first
    turn = view.locator("[data-agentq='turn'][data-key='model:0']")
    await expect(turn).to_contain_text("so I am checking the refund policy")
    await expect(view.locator("[data-agentq='final-answer']")).not_to_contain_text(
        "on its way")
    SHOTS.mkdir(parents=True, exist_ok=True)
    await view.screenshot(path=SHOTS / "streaming-1000.png")

    # Open the gate from the kernel (a new cell): the request ends, the log has it, the
    # view draws the recorded answer.
    await page.keyboard.press("Escape")
    await page.keyboard.press("b")  # a cell below, in command mode
    await page.keyboard.press("Enter")
    await page.keyboard.insert_text(OPEN)
    await page.keyboard.press("Shift+Enter")
    await expect(view.locator("[data-agentq='final-answer']").first).to_contain_text(
        "a refund of 120 EUR is on its way.")
