"""An agent run's rows folded into the conversation it was (`fold_conversation`). Pure.

`fold_conversation` turns one agent run's rows (its workflow row, step rows and call rows,
as the store returns them; no I/O here) into a `Conversation`:

- the prompt and the run options stored with it (``input["prompt"]``, ``input["options"]``);
- one `Turn` per model request (a call labelled ``{"kind": "model"}``, key ``model:<n>``):
  the text of its response (its ``text`` parts), its model, tokens, cost (from the price
  table, `agentq.widgets.models.prices`), latency, error; while it runs, the text streamed so
  far when the caller has it (``partial``, by call key);
- under each turn one `ToolCard` per tool call its response asked for (in the response's
  order, so parallel calls keep their places): the arguments (from the response's
  ``tool-call`` parts), the result (the recorded ``{"result": ..., "kind": "tool_return"}``),
  the error, and the approvals asked for it (``approval:<n>.<i>:<id>``, ``…#1`` when asked
  again); the run of an approved call (``tool:<n>.<i>:<id>:approved``) is the card's result;
- child runs (a ``child:<key>`` wait) nested under the tool call named by ``<key>``, else at
  the run's level, each with the child run's own state when the caller read it (``child_states``);
  a tool call parked on a wait (its row ended by `InputRequested`, e.g. a child run's approval)
  is ``waiting`` (``waiting_on`` says for what), not failed; a recorded ``ModelRetry`` (or
  argument validation error) is a ``retry`` with its message, a ``ToolFailed`` a failure;
  in a run that closed (cancelled, failed), a card or approval left ``waiting`` shows the
  run's state (`agentq.store.shown_call`'s rule, as the calls table; `Detail` keeps the
  stored state);
- the final answer (the completed step's ``output``) and the run's error.

Keys, fingerprints, lanes, attempts and leases are kept on the values (``key``, `Detail`)
for the "details" toggle; the renderer shows them only there. Strings are raw: the renderer
(`agentq.widgets.html.conversation`) escapes and isolates every one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentq.store import CallKind, CallRow, StepRow, WorkflowRow, child_of, shown_call
from agentq.widgets.models.conversation import (
    ApprovalAsk,
    ChildRun,
    Conversation,
    Detail,
    Lineage,
    ToolCard,
    Turn,
)
from agentq.widgets.models.prices import PriceTable, cost_of, tokens_of
from agentq.workflows.parking import InputRequested

__all__ = ["fold_conversation", "parked_on"]

_PARKED = f"{InputRequested.__module__}.{InputRequested.__qualname__}"

_RETRIES = {"model_retry": "retry", "validation_error": "retry", "tool_failed": "failed"}
"""A recorded tool outcome's ``kind`` -> the card's state (pydantic-ai's control signals)."""


def parked_on(row: CallRow) -> str | None:
    """What a call parked on a wait waits for (``child run 'x' (helper)``), else None.

    A call whose body raised `InputRequested` (a wait inside it, e.g. a child run's approval)
    is stored as failed with that signal as its error; it is not finished: it runs again
    once the wait is answered.
    """
    if row.error is not None and row.error.type == _PARKED:
        return row.error.message
    return None


def _error(row: CallRow) -> str | None:
    if row.error is not None:
        return f"{row.error.type}: {row.error.message}"
    return row.reason


def _detail(row: CallRow) -> Detail:
    return Detail(row.key, row.fingerprint, row.lane, row.attempt, row.runs, row.state.value)


def _response_parts(output: Any) -> tuple[str, list[tuple[str, str, Any]]]:
    """The text and the ``(tool, tool_call_id, args)`` of a recorded model response."""
    parts = output.get("parts") if isinstance(output, dict) else None
    texts: list[str] = []
    calls: list[tuple[str, str, Any]] = []
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        kind = part.get("part_kind")
        if kind == "text" and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif kind in ("tool-call", "builtin-tool-call"):
            calls.append((str(part.get("tool_name", "?")), str(part.get("tool_call_id", "")),
                          part.get("args")))
    return "\n".join(texts), calls


def _tool_result(output: Any) -> tuple[str, Any]:
    """The card's state and result (or error text) of a completed tool call's output."""
    kind = output.get("kind") if isinstance(output, dict) else None
    if kind in ("tool_return", "tool_content_result") and "result" in output:
        return "completed", output["result"]
    if isinstance(kind, str) and kind in _RETRIES:
        said = output.get("message", output.get("errors"))
        return _RETRIES[kind], said if isinstance(said, str) else json.dumps(said, default=str)
    return "completed", output


def _answer(workflow: WorkflowRow, row: CallRow) -> ApprovalAsk:
    value = row.output
    approved: bool | None = None
    note, override = "", None
    if isinstance(value, bool):
        approved = value
    elif isinstance(value, dict):
        got = value.get("approved")
        approved = got if isinstance(got, bool) else None
        said = value.get("note")
        note = said if isinstance(said, str) else ""
        over = value.get("override_args")
        override = over if isinstance(over, dict) else None
    state = shown_call(workflow, row).state
    return ApprovalAsk(row.key, state, approved, note or "", override, row.reason or "")


class _Card:
    """A tool card while it is folded (the frozen `ToolCard` is made at the end)."""

    def __init__(self, tool: str, call_id: str, args: Any) -> None:
        self.tool, self.call_id, self.args = tool, call_id, args
        self.rows: list[CallRow] = []
        self.approvals: list[ApprovalAsk] = []
        self.children: list[ChildRun] = []

    def freeze(self, edited: frozenset[str], ended: str | None) -> ToolCard:
        """The card; `ended`: the state of the closed run (a card left waiting shows it)."""
        runs = [r for r in self.rows if r.kind is CallKind.CALL]
        run = runs[-1] if runs else None
        state, result, error, duration, key = "asked", None, None, None, None
        waiting_on = None
        if run is not None:
            state, key, duration = run.state.value, run.key, run.duration
            waiting_on = parked_on(run)
            if waiting_on is not None:
                state, duration = "waiting", None
            elif state == "completed":
                state, result = _tool_result(run.output)
                if state != "completed":
                    result, error = None, result
            elif state == "failed":
                error = _error(run)
        last = self.approvals[-1] if self.approvals else None
        if last is not None and last.state in ("waiting", ended):  # ended: shown so, was waiting
            state = "waiting"
        elif last is not None and last.approved is False and (run is None or run.first_seq
                                                               < _seq(self.rows, last.key)):
            state = "denied"
        if state == "waiting" and ended is not None:  # `shown_call`'s rule
            state, waiting_on = ended, None
        return ToolCard(self.tool, self.call_id, self.args, state, key, result, error,
                        duration, tuple(self.approvals), tuple(self.children),
                        tuple(_detail(r) for r in self.rows),
                        any(r.key in edited for r in self.rows), waiting_on)


def _seq(rows: Sequence[CallRow], key: str) -> int:
    return next((r.first_seq for r in rows if r.key == key), 0)


def _call_id_of(row: CallRow) -> str | None:
    label = row.label or {}
    if isinstance(label.get("tool_call_id"), str):
        return str(label["tool_call_id"])
    if isinstance(row.details, dict) and isinstance(row.details.get("tool_call_id"), str):
        return str(row.details["tool_call_id"])
    return None


def _place_children(waits: Sequence[tuple[str, ChildRun]],
                    turns: Sequence[tuple[CallRow, list[_Card]]]) -> list[ChildRun]:
    """Put each child run under the tool call its wait key names (``child:tool:<n>.<i>:<id>``);
    return those that name no tool call of the run (they sit at the run's level)."""
    by_key = {r.key: card for _, cards in turns for card in cards for r in card.rows}
    loose: list[ChildRun] = []
    for key, node in waits:
        named = key.split(":", 1)[1]
        card = by_key.get(named)
        if card is None and named.startswith("tool:"):  # the call has no row of its own yet
            place, _, call_id = named[5:].partition(":")
            n, _, i = place.partition(".")
            cards = turns[int(n)][1] if n.isdigit() and int(n) < len(turns) else []
            at = int(i) if i.isdigit() else len(cards)
            card = cards[at] if at < len(cards) and cards[at].call_id == call_id else None
        (card.children if card is not None else loose).append(node)
    return loose


def fold_conversation(
    workflow: WorkflowRow,
    steps: Sequence[StepRow],
    calls: Sequence[CallRow],
    *,
    prices: PriceTable | None = None,
    partial: Mapping[str, str] | None = None,
    forked_from: Lineage | None = None,
    children: Mapping[str, Conversation] | None = None,
    child_states: Mapping[str, str] | None = None,
) -> Conversation:
    """Fold one agent run's rows into a `Conversation` (see the module docstring).

    Args:
        workflow: The run's workflow row.
        steps: Its step rows (the agent's one step; its output is the final answer).
        calls: Its call and wait rows, first-recorded order (``store.calls(run_id)``).
        prices: Model name -> `Price` (`price_table`); None: costs unknown.
        partial: Call key -> text streamed so far, for requests that run now.
        forked_from: The `Lineage` when the run is a fork (read from its log).
        children: Child workflow id -> its conversation (agent children that were read).
        child_states: Child workflow id -> its workflow state (``completed``...); a child
            not in it shows its conversation's state, else its wait's.

    Returns:
        The `Conversation`. Rows it does not know (other durable calls) are skipped.
    """
    table = prices or {}
    turns: list[tuple[CallRow, list[_Card]]] = []
    by_id: dict[str, _Card] = {}
    waits: list[tuple[str, ChildRun]] = []
    for row in calls:
        kind = (row.label or {}).get("kind")
        child = child_of(row)
        if kind == "model" and row.kind is CallKind.CALL:
            _, asked = _response_parts(row.output)
            cards = [_Card(tool, cid, args) for tool, cid, args in asked]
            turns.append((row, cards))
            by_id.update((c.call_id, c) for c in cards)
        elif child is not None:
            conv = (children or {}).get(child)
            output = row.output if row.state.value == "answered" else None
            state = (child_states or {}).get(child) or (
                conv.state if conv else shown_call(workflow, row).state)
            waits.append((row.key, ChildRun(child, state, output, conv)))
        else:
            call_id = _call_id_of(row)
            card = by_id.get(call_id) if call_id is not None else None
            if card is None:
                continue
            card.rows.append(row)
            if row.kind is CallKind.WAIT and row.key.startswith("approval:"):
                card.approvals.append(_answer(workflow, row))
    loose = _place_children(waits, turns)
    edited = frozenset(forked_from.edited if forked_from is not None else ())
    ended = workflow.state.value if workflow.state.closed else None
    frozen: list[Turn] = []
    for row, cards in turns:
        text, _ = _response_parts(row.output)
        usage = row.usage or (row.output.get("usage") if isinstance(row.output, dict) else None)
        named = (row.usage or {}).get("model") or (row.label or {}).get("model")
        model = named if isinstance(named, str) else None
        i, o = tokens_of(usage)
        number = int(row.key.split(":", 1)[1]) if row.key[6:].isdigit() else len(frozen)
        state = row.state.value
        frozen.append(Turn(
            row.key, number, state, model, text,
            (partial or {}).get(row.key) if state == "started" else None,
            row.output if state == "completed" else None, i, o,
            cost_of(model, usage, table) if state == "completed" else None,
            row.duration, row.started_at,
            _error(row) if state == "failed" else None,
            tuple(c.freeze(edited, ended) for c in cards), (_detail(row),), row.key in edited,
        ))
    data = workflow.input if isinstance(workflow.input, dict) else {}
    options = data.get("options")
    done = [s for s in steps if s.state.value == "completed"]
    output = done[-1].output if done and workflow.state.value == "completed" else None
    if isinstance(output, dict) and "output" in output:
        output = output["output"]
    failed = next((s for s in steps if s.error is not None or s.state.value == "failed"), None)
    error = None
    if workflow.state.value in ("failed", "cancelled", "timed_out"):
        error = workflow.reason or (failed.reason if failed is not None else None)
        if failed is not None and failed.error is not None:
            error = f"{failed.error.type}: {failed.error.message}"
    details = tuple(
        (f"step {s.step_index} · {s.step_name}",
         f"attempt {s.attempt}, worker {s.worker_id or '-'}, lease token {s.lease_token}")
        for s in steps
    )
    return Conversation(
        workflow.workflow_id, workflow.state.value, data.get("prompt"),
        options if isinstance(options, dict) else {}, tuple(frozen), output, error,
        forked_from, tuple(loose), workflow.created_at, workflow.updated_at, details,
    )
