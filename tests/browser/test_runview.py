"""The conversation view (`RunView`) in a real JupyterLab page: an approval answered inline
(Edit, then Approve), a fork from a tool result with an edited value, shown in the same view
with its lineage and approved there too, and a comparison of the run and its fork.

Screenshots at 1600 and 1000 px wide go to ``out/screenshots/runview/`` (``/out/`` is
ignored by git): ``waiting-*.png``, ``approved-*.png``, ``fork-*.png``, ``compare-*.png``.
Each width also checks that nothing in the view is wider than the view (cut off) and that
no label of the toolbar and the buttons wraps.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from playwright.async_api import Locator, Page, expect

from .conftest import OpenNotebook, RunAll

SHOTS = Path(__file__).resolve().parents[2] / "out" / "screenshots" / "runview"

SETUP = '''
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

from agentq import Queue, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.store import MemoryStore
from agentq.widgets import RunView


def respond(messages, info):
    n = sum(isinstance(m, ModelResponse) for m in messages)
    returns = {p.tool_name: p.content for m in messages for p in m.parts
               if isinstance(p, ToolReturnPart)}
    if n == 0:
        return ModelResponse(parts=[
            TextPart("Let me look up the order and the refund policy first."),
            ToolCallPart("lookup_order", {"order_id": 42}, "c1"),
            ToolCallPart("policy", {"topic": "refunds"}, "c2"),
        ])
    if n == 1:
        total = returns["lookup_order"]["total"]
        return ModelResponse(parts=[
            TextPart(f"The order totals {total} EUR; refunds under 200 EUR need no manager."),
            ToolCallPart("refund", {"order_id": 42, "amount": total}, "c3"),
        ])
    return ModelResponse(parts=[TextPart(f"Done: {returns['refund']}. ‮RLO in a reply")])


agent = Agent(FunctionModel(respond), name="support")


@agent.tool_plain
def lookup_order(order_id: int) -> dict:
    return {"order_id": order_id, "total": 120, "customer": "Ada <script>x</script>"}


@agent.tool_plain
def policy(topic: str) -> str:
    return "Refunds up to 200 EUR need no manager's approval; above that, they do."


@agent.tool_plain(requires_approval=True)
def refund(order_id: int, amount: int) -> str:
    return f"refunded {amount} EUR on order {order_id}"


engine = WorkflowEngine(Queue(), MemoryStore())
durable = DurableAgent(agent, engine)
run = await durable.run("Please refund order 42: the parcel arrived broken.", run_id="ticket-42")
print(run.status)
'''

VIEW = '''
view = RunView(engine, "ticket-42", agent=durable,
               prices={"function:respond:": (2.5, 10.0)}).start()
view
'''


def notebook(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(VIEW)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path = folder / "runview.ipynb"
    nbformat.write(nb, path)
    return path


def card(view: Locator, tool: str, state: str | None = None) -> Locator:
    where = f"[data-agentq='tool-card'][data-tool='{tool}']"
    return view.locator(where + (f"[data-state='{state}']" if state else "")).last


async def shoot(page: Page, view: Locator, name: str, part: Locator | None = None) -> None:
    """Screenshot the view (or `part` of it) at 1600 and 1000 px wide; check that nothing
    in the view is cut off and that no button's label is clipped."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1600, 1000):
        await page.set_viewport_size({"width": width, "height": 2400})
        await view.scroll_into_view_if_needed()
        overflow = await view.evaluate("""(root) => {
            const box = root.getBoundingClientRect();
            const out = [];
            for (const el of root.querySelectorAll('*')) {
                const r = el.getBoundingClientRect();
                if (r.width && r.right > box.right + 1) out.push(el.outerHTML.slice(0, 120));
            }
            for (const b of root.querySelectorAll('button')) {
                if (b.offsetParent && b.scrollWidth > b.clientWidth + 1)
                    out.push('clipped: ' + b.textContent);
            }
            return out;
        }""")
        assert overflow == [], f"{name} at {width} px: {overflow[:5]}"
        await (part or view).screenshot(path=SHOTS / f"{name}-{width}.png")


async def test_approve_inline_fork_a_tool_result_and_compare(
    open_notebook: OpenNotebook, run_all: RunAll, tmp_path: Path
) -> None:
    page = await open_notebook("runview.ipynb", source=notebook(tmp_path))
    await page.set_viewport_size({"width": 1600, "height": 1400})
    await run_all(page)
    view = page.locator(".agentq-runview").first
    refund = card(view, "refund", "waiting")
    await expect(refund).to_be_visible()
    await expect(view.locator("[data-agentq='turn'][data-key='model:0']")).to_contain_text(
        "Let me look up the order")
    await expect(card(view, "lookup_order")).to_contain_text('"Ada <script>x</script>"')
    assert await view.locator("script").count() == 0
    await shoot(page, view, "waiting")

    # The approval, inline under the refund card: Edit, change the amount, Approve.
    slot = view.locator(".agentq-inline-approval")
    await expect(slot).to_be_visible()
    await slot.get_by_role("button", name="Edit").click()
    editor = slot.locator(".agentq-approval-args textarea")
    await expect(editor).to_be_visible()
    await editor.fill('{"order_id": 42, "amount": 100}')
    await slot.get_by_role("button", name="Approve").click()
    await expect(card(view, "refund", "completed")).to_contain_text("refunded 100 EUR")
    answer = view.locator("[data-agentq='final-answer']").first
    await expect(answer).to_contain_text("Done: refunded 100 EUR on order 42")
    await expect(view.locator("[data-agentq='run-totals']")).not_to_have_attribute(
        "data-cost", "")
    await shoot(page, view, "approved")

    # Fork from the lookup's result, with another total: the fork runs in the same view.
    block = view.locator(".widget-hbox").filter(
        has=page.locator("[data-agentq='tool-card'][data-tool='lookup_order']")).last
    await block.get_by_role("button", name="Fork from here").click()
    form = view.locator(".agentq-fork")
    await expect(form).to_be_visible()
    await form.locator(".agentq-fork-value textarea").fill(
        '{"order_id": 42, "total": 80, "customer": "Ada"}')
    await form.locator(".agentq-fork-submit").click()
    lineage = view.locator("[data-agentq='lineage'][data-parent='ticket-42']")
    await expect(lineage).to_be_visible()
    await expect(card(view, "refund", "waiting")).to_be_visible()  # the fork asks again
    await expect(card(view, "lookup_order")).to_contain_text('"total": 80')
    slot = view.locator(".agentq-inline-approval")
    await slot.get_by_role("button", name="Approve").click()
    await expect(view.locator("[data-agentq='final-answer']").first).to_contain_text(
        "refunded 80 EUR")
    await shoot(page, view, "fork")

    # Compare the fork with its parent: the first request differs (a tool result).
    await view.get_by_role("button", name="Compare with parent").click()
    compare = view.locator("[data-agentq='compare']")
    await expect(compare).to_have_attribute("data-diverged", "0")
    await expect(compare.locator("[data-agentq='compare-side']")).to_have_count(2)
    await shoot(page, view, "compare", compare)


DASHBOARD = '''
from agentq.widgets import Dashboard

dash = Dashboard(engine, agent=durable, prices={"function:respond:": (2.5, 10.0)}).start()
dash
'''


async def test_the_dashboard_shows_a_selected_agent_run_as_its_conversation(
    open_notebook: OpenNotebook, run_all: RunAll, tmp_path: Path
) -> None:
    path = notebook(tmp_path)
    nb = nbformat.read(path, as_version=4)
    nb.cells[1] = nbformat.v4.new_code_cell(DASHBOARD)
    nbformat.write(nb, path)
    page = await open_notebook("runview.ipynb", source=path)
    await page.set_viewport_size({"width": 1600, "height": 2400})
    await run_all(page)
    dash = page.locator(".agentq-dashboard")
    await dash.locator(".agentq-detail select").nth(0).select_option(label="ticket-42")
    view = dash.locator(".agentq-runview")
    await expect(card(view, "refund", "waiting")).to_be_visible()
    await expect(view.locator("[data-agentq='run-totals']")).to_contain_text("cost 0.0010")
    await shoot(page, view, "dashboard")
    slot = view.locator(".agentq-inline-approval")
    await slot.get_by_role("button", name="Approve").click()
    await expect(view.locator("[data-agentq='final-answer']").first).to_contain_text(
        "refunded 120 EUR")
    await expect(dash.locator(
        "[data-agentq='step-row'][data-workflow='ticket-42'][data-status='completed']"
    )).to_have_count(1)
    await shoot(page, view, "dashboard-approved")
