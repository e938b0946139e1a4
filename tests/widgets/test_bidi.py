"""Bidi isolation of every user string (issue 22 fault 5): an RLO (U+202E) in one value never
reorders the value or the words beside it, in HTML (``<bdi>`` per value) and in plain text
(``<option>`` labels: FSI … PDI per value)."""

from __future__ import annotations

import unicodedata
from typing import Any

from bs4 import BeautifulSoup

from agentq.markup import FSI, PDI, isolate, json_text
from agentq.queue import Job
from agentq.store import StepState
from agentq.widgets.detail import _item_options
from agentq.widgets.html import tree_html
from agentq.widgets.html.detail import json_html
from agentq.widgets.models.detail import load_detail
from agentq.widgets.models.tree import build_tree
from agentq.workflows import StepContext, StepDef, Workflow, WorkflowEngine

RLO = "\u202e"


def balanced(text: str) -> bool:
    """Whether every isolate initiator (LRI, RLI, FSI) in `text` has its PDI, in order."""
    depth = 0
    for c in text:
        kind = unicodedata.bidirectional(c)
        if kind in ("LRI", "RLI", "FSI"):
            depth += 1
        elif kind == "PDI":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def test_isolate_wraps_only_what_can_reorder_and_balances_stray_isolates() -> None:
    assert isolate("order-7") == "order-7"  # plain text stays as it is
    assert isolate(f"refund{RLO}") == f"{FSI}refund{RLO}{PDI}"
    # A stray PDI in the value would close the isolate early and free the RLO after it.
    assert isolate(f"a{PDI}{RLO}b") == f"{FSI}a{RLO}b{PDI}"
    assert isolate("\u2067x") == f"{FSI}\u2067x{PDI}{PDI}"  # an RLI left open is closed
    for raw in (f"a{PDI}{RLO}", f"\u2066\u2066{PDI}", f"{PDI}{PDI}"):
        assert balanced(isolate(raw)), raw


def soup_strings(html: str) -> list[tuple[str, bool]]:
    """Each text node of `html`, and whether it lies inside a ``<bdi>``."""
    soup = BeautifulSoup(html, "html.parser")
    return [(str(s), any(p.name == "bdi" for p in s.parents)) for s in soup.find_all(string=True)]


def test_one_line_json_isolates_each_string_not_the_whole_object() -> None:
    # {"memo":"thanks‮","amount":1900} read as …0091 :"tnuoma" when isolated as one.
    html = json_text({"memo": f"thanks{RLO}", "amount": 1900, "n": [f"x{RLO}", "y"]})
    strings = soup_strings(html)
    assert (f'"thanks{RLO}"', True) in strings and (f'"x{RLO}"', True) in strings
    outside = "".join(s for s, inside in strings if not inside)
    assert '"amount": 1900' in outside and RLO not in outside
    assert html.count("<bdi>") == 2


def test_shortened_json_keeps_each_string_isolated_and_the_full_text_in_its_title() -> None:
    html = json_text({"memo": f"{RLO}" + "m" * 200, "amount": 1}, 40)
    soup = BeautifulSoup(html, "html.parser")
    assert soup.span is not None and '"amount": 1' in str(soup.span["title"])
    strings = soup_strings(html)
    assert all(inside for s, inside in strings if RLO in s)
    assert html.endswith("…</span>")


def test_pretty_json_in_the_detail_isolates_each_string() -> None:
    value: dict[str, Any] = {"memo": f"thanks{RLO}", "amount": 1900}
    strings = soup_strings(json_html(value))
    assert (f'"thanks{RLO}"', True) in strings
    assert all(inside for s, inside in strings if RLO in s)
    assert '"amount": 1900' in "".join(s for s, inside in strings if not inside)


async def rlo_run(engine: WorkflowEngine) -> None:
    async def step(ctx: StepContext) -> Any:
        await ctx.call(Job("lookup", lambda: 1), label={"tool": f"refund{RLO}"})
        raise ValueError("no")

    await engine.run(Workflow(f"order{RLO}", [StepDef(f"pay{RLO}", step)]))


async def test_a_tree_label_isolates_the_tool_name_from_the_key_beside_it(
    engine: WorkflowEngine,
) -> None:
    await rlo_run(engine)
    snap = await load_detail(engine.store, f"order{RLO}")
    assert snap is not None
    root = build_tree(snap.workflow, snap.steps, snap.calls)
    call = root.children[0].children[0]
    assert call.title == f"tool {FSI}refund{RLO}{PDI} · lookup"
    assert root.children[0].title == f"step 0 · {FSI}pay{RLO}{PDI}"
    assert balanced(tree_html(root))


async def test_option_labels_isolate_each_value_with_fsi_and_pdi(
    engine: WorkflowEngine,
) -> None:
    # An <option> cannot hold <bdi>: "(failed)" read "(deliaf)" after an RLO in a step name.
    await rlo_run(engine)
    snap = await load_detail(engine.store, f"order{RLO}")
    assert snap is not None and snap.steps[0].state is StepState.FAILED
    labels = [label for label, _ in _item_options(snap)]
    assert labels[0] == f"workflow {FSI}order{RLO}{PDI}"
    assert labels[1] == f"step 0 · {FSI}pay{RLO}{PDI} (failed)"
    assert labels[2] == f"call lookup · {FSI}refund{RLO}{PDI} (completed)"
    assert all(balanced(label) for label in labels)


async def test_the_workflow_list_isolates_each_id(engine: WorkflowEngine) -> None:
    from agentq.clock import FakeClock
    from agentq.widgets.detail import DetailPane

    await rlo_run(engine)
    pane = DetailPane(engine.store, FakeClock())
    pane.choices([f"order{RLO}", "plain"])
    assert list(pane.workflows.options) == [(f"{FSI}order{RLO}{PDI}", f"order{RLO}"),
                                            ("plain", "plain")]
    await pane.show(f"order{RLO}")
    assert pane.workflows.value == f"order{RLO}"
