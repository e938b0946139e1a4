"""Store reads behind the conversation view: a run's conversation, its forks, a comparison of
two runs, and a page of its event history. No ipywidgets, no HTML.

- `load_conversation` reads one agent run (workflow row, step rows, call rows, the first
  events for its lineage) and its agent child runs, and folds them
  (`agentq.widgets.models.conversation.fold_conversation`);
- `lineage_in` / `lineage_of`: where a fork came from (its `WorkflowForked` event);
- `Comparison` / `compare_conversations`: two runs side by side, with the first point where
  they differ (pure);
- `event_page`: a page of a workflow's events by sequence number (what ``agentq events``
  prints).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentq.errors import UnknownWorkflowError
from agentq.events import Event, EventKind
from agentq.store import DurableStore, child_of
from agentq.widgets.models.conversation import Conversation, Lineage, Turn, is_agent_run
from agentq.widgets.models.folding import fold_conversation
from agentq.widgets.models.prices import PriceTable

__all__ = [
    "Comparison",
    "EventPage",
    "compare_conversations",
    "event_data",
    "event_page",
    "lineage_in",
    "lineage_of",
    "load_conversation",
]

_LINEAGE_EVENTS = 4
"""A fork's `WorkflowForked` is among its first events (right after `WorkflowStarted`)."""


def lineage_in(events: Sequence[Event]) -> Lineage | None:
    """Return the `Lineage` of the `WorkflowForked` among a workflow's first events (the
    parent, the call key it was forked at, or its step's name for a fork at a step, and the
    keys it replaced), else None. Pure."""
    for event in events[:_LINEAGE_EVENTS]:
        if event.kind is EventKind.WORKFLOW_FORKED:
            at = event.data.get("at")
            key = (at.get("key") or at.get("step_name")) if isinstance(at, dict) else at
            edited = event.data.get("replaced")
            keys = tuple(str(k) for k in edited) if isinstance(edited, list) else ()
            return Lineage(str(event.data.get("parent", "")), str(key or ""), keys)
    return None


async def lineage_of(store: DurableStore, run_id: str) -> Lineage | None:
    """Return the `Lineage` when `run_id` is a fork, else None (reads its first events)."""
    return lineage_in(await store.load_events(run_id, limit=_LINEAGE_EVENTS))


async def load_conversation(
    store: DurableStore,
    run_id: str,
    *,
    prices: PriceTable | None = None,
    partial: Mapping[str, str] | None = None,
    depth: int = 2,
) -> Conversation:
    """Read agent run `run_id` and fold it into a `Conversation`.

    Args:
        store: The store.
        run_id: The run (its workflow id).
        prices: Model name -> `Price`, for the costs.
        partial: Call key -> text streamed so far (requests running in this process).
        depth: How many levels of agent child runs are read and nested (0: none; the child
            runs' states are read at every depth).

    Raises:
        UnknownWorkflowError: `run_id` is not stored.
        StoreError: A read failed.
    """
    workflow = await store.get_workflow(run_id)
    if workflow is None:
        raise UnknownWorkflowError(f"run {run_id!r} is not in the store")
    steps = await store.step_rows(run_id)
    calls = await store.calls(run_id)
    children: dict[str, Conversation] = {}
    states: dict[str, str] = {}
    for row in calls:
        child = child_of(row)
        child_row = None if child is None else await store.get_workflow(child)
        if child is None or child_row is None:
            continue
        states[child] = child_row.state.value
        if depth > 0 and is_agent_run(child_row):
            children[child] = await load_conversation(
                store, child, prices=prices, partial=partial, depth=depth - 1)
    return fold_conversation(
        workflow, steps, calls, prices=prices, partial=partial,
        forked_from=await lineage_of(store, run_id), children=children, child_states=states,
    )


def _turn_sig(turn: Turn) -> str:
    calls = [(c.tool, c.args, c.result, c.state) for c in turn.tools]
    return json.dumps([turn.text, calls], sort_keys=True, default=str)


_NO_DIFFERENCE = "the runs do not differ (the same requests, tool calls and answer)"
"""`Comparison.why` of two runs with the same requests, tool calls and answer."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two runs side by side (`compare_conversations`).

    Attributes:
        a, b: The two conversations.
        diverged_at: The index of the first model turn that differs (its response's text,
            its tool calls' arguments or results), None when all shared turns are equal.
        why: What differs there, in words (``"the runs do not differ ..."`` when nothing does).
    """

    a: Conversation
    b: Conversation
    diverged_at: int | None
    why: str


def compare_conversations(a: Conversation, b: Conversation) -> Comparison:
    """Return the comparison of `a` and `b`: the first model turn whose response text, tool
    calls (tool, arguments) or tool results differ, or where one run has a turn the other
    has not."""
    for i, (ta, tb) in enumerate(zip(a.turns, b.turns, strict=False)):
        if _turn_sig(ta) == _turn_sig(tb):
            continue
        if ta.text != tb.text:
            why = "the model's text differs"
        elif [(c.tool, c.args) for c in ta.tools] != [(c.tool, c.args) for c in tb.tools]:
            why = "the model asked for other tool calls"
        else:
            why = "a tool result differs"
        return Comparison(a, b, i, f"request {i}: {why}")
    if len(a.turns) != len(b.turns):
        i = min(len(a.turns), len(b.turns))
        longer = a if len(a.turns) > len(b.turns) else b
        return Comparison(a, b, i, f"request {i}: only {longer.run_id} made it")
    if a.output != b.output:
        return Comparison(a, b, None, "the same requests; the answers differ")
    return Comparison(a, b, None, _NO_DIFFERENCE)


@dataclass(frozen=True, slots=True)
class EventPage:
    """One page of a workflow's events.

    Attributes:
        events: The events, by sequence number.
        after: The page starts after this ``seq``.
        more: Whether events follow the page.
    """

    events: tuple[Event, ...]
    after: int
    more: bool


async def event_page(store: DurableStore, workflow_id: str, *, after: int = 0,
                     limit: int = 20) -> EventPage:
    """Read the events of `workflow_id` with ``seq > after``, at most `limit` of them.

    Raises:
        ValueError: `limit` < 1 or `after` < 0.
        StoreError: The read failed.
    """
    if limit < 1 or after < 0:
        raise ValueError(f"event_page: limit must be >= 1 and after >= 0, got {limit}, {after}")
    rows = await store.load_events(workflow_id, after_seq=after, limit=limit + 1)
    return EventPage(tuple(rows[:limit]), after, len(rows) > limit)


def event_data(event: Event) -> dict[str, Any]:
    """An event's data as the events table shows it (without the step list and trace)."""
    data = dict(event.data)
    data.pop("steps", None)
    data.pop("trace", None)
    return data
