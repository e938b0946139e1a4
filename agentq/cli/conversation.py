"""``agentq show``'s messages section: an agent run's conversation as terminal text, and as
the ``messages`` list of ``show --json`` (`messages_json`). Pure.

A `DurableAgent` run records its conversation as durable calls (a model request ``model:<n>``,
a tool call ``tool:<n>.<i>:<id>``, an approval wait); `agentq.widgets.load_conversation`, the
reader the notebook's conversation view uses, folds them into a `Conversation` (no
pydantic-ai needed: the rows are JSON). `messages_view` prints it as a transcript: the user's
prompt, each model request with its text, the tool calls its response asked for with their
arguments, their returns or errors and approvals, child runs, the answer or the error.

Every stored string goes through `agentq.cli.literal.visible` (a model's text line by line:
the line breaks are ours, any other control shows as its escape) inside a `rich.text.Text`,
so nothing a model or a tool wrote is parsed as markup or acted on by the terminal.
`messages_json` holds the same values whole, strings as stored (``json_line`` escapes them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from agentq.cli.views import short
from agentq.literal import visible

if TYPE_CHECKING:
    from agentq.widgets import ChildRun, Conversation, ToolCard, Turn

__all__ = ["TEXT_CHARS", "VALUE_CHARS", "messages_json", "messages_view"]

VALUE_CHARS = 300
"""Tool arguments, tool returns, approval notes and JSON prompts or answers longer than this
are shortened with '…' (``show --json`` and ``agentq events --json`` give the whole values)."""

TEXT_CHARS = 2000
"""The prompt, a model's text and the answer are shortened with '…' past this many characters
(their line breaks kept)."""

_STYLES = {"completed": "green", "answered": "green", "failed": "red", "denied": "red",
           "waiting": "yellow", "started": "cyan", "timed_out": "red"}


def _lines(out: Text, label: str, value: Any, indent: str, style: str = "",
           limit: int = VALUE_CHARS) -> None:
    """``indent label: value``: a str line by line (each line `visible`), else short JSON;
    either shortened with '…' past `limit` characters."""
    out.append(f"\n{indent}{label}: ", style="bold")
    if not isinstance(value, str):
        out.append(short(value, limit, as_json=True), style=style)
        return
    if len(value) > limit:
        value = value[:limit - 1] + "…"
    for n, line in enumerate(value.split("\n")):
        out.append(("" if n == 0 else f"\n{indent}  ") + visible(line), style=style)


def _turn_head(turn: Turn) -> str:
    facts = [visible(turn.model)] if turn.model else []
    if turn.state != "completed":
        facts.append(turn.state)
    if turn.input_tokens or turn.output_tokens:
        facts.append(f"{turn.input_tokens} in / {turn.output_tokens} out tokens")
    if turn.duration is not None:
        facts.append(f"{turn.duration * 1000:.0f} ms" if turn.duration < 1
                     else f"{turn.duration:.1f} s")
    return f"model #{turn.number}" + (f" ({', '.join(facts)})" if facts else "")


def _child(out: Text, child: ChildRun, indent: str) -> None:
    out.append(f"\n{indent}child run {visible(child.workflow_id)}: ")
    out.append(visible(child.state), style=_STYLES.get(child.state, ""))
    if child.output is not None:
        out.append(f" {short(child.output, VALUE_CHARS, as_json=True)}")


def _tool(out: Text, card: ToolCard, indent: str) -> None:
    out.append(f"\n{indent}tool call ", style="bold")
    out.append(visible(card.tool), style="bold")
    out.append(f" [{visible(card.tool_call_id)}] ")
    out.append(short(card.args, VALUE_CHARS, as_json=True))
    inner = indent + "  "
    for ask in card.approvals:
        decision = "" if ask.approved is None else (" approved" if ask.approved else " denied")
        out.append(f"\n{inner}approval {visible(ask.key)}: ")
        out.append(visible(ask.state) + decision, style=_STYLES.get(ask.state, ""))
        if ask.note:
            out.append(f" (note: {short(ask.note, VALUE_CHARS)})")
        if ask.override_args is not None:
            out.append(f" with args {short(ask.override_args, VALUE_CHARS, as_json=True)}")
    if card.state == "completed":
        _lines(out, "returned", card.result, inner, "green")
    elif card.waiting_on is not None:
        out.append(f"\n{inner}waiting for {visible(card.waiting_on)}", style="yellow")
    elif card.state == "retry" and card.error is not None:
        _lines(out, "asked the model to retry", card.error, inner, "yellow")
    elif card.error is not None:
        _lines(out, card.state, card.error, inner, "red")
    elif card.state != "waiting":
        out.append(f"\n{inner}{visible(card.state)}", style=_STYLES.get(card.state, "dim"))
    for child in card.children:
        _child(out, child, inner)


def messages_view(conv: Conversation) -> Text:
    """The conversation of an agent run as a transcript (see the module docstring).

    Args:
        conv: The run folded by `agentq.widgets.load_conversation`.

    Returns:
        A `rich.text.Text` starting with the line ``messages``; every stored string in it
        printed literally.
    """
    out = Text("messages", style="bold")
    _lines(out, "user", conv.prompt, "  ", limit=TEXT_CHARS)
    if conv.options:
        out.append(f"\n  options: {short(dict(conv.options), VALUE_CHARS, as_json=True)}")
    for turn in conv.turns:
        out.append(f"\n  {_turn_head(turn)}", style="bold cyan")
        if turn.text:
            _lines(out, "text", turn.text, "    ", limit=TEXT_CHARS)
        if turn.error is not None:
            _lines(out, "error", turn.error, "    ", "red")
        for card in turn.tools:
            _tool(out, card, "    ")
    for child in conv.children:
        _child(out, child, "  ")
    if conv.output is not None:
        _lines(out, "answer", conv.output, "  ", "green", TEXT_CHARS)
    if conv.error is not None:
        _lines(out, "error", conv.error, "  ", "red")
    if not conv.turns and conv.output is None and conv.error is None:
        out.append("\n  (no model request recorded yet)", style="dim")
    return out


def _child_json(child: ChildRun) -> dict[str, Any]:
    conv = child.conversation
    return {"workflow_id": child.workflow_id, "state": child.state, "output": child.output,
            "messages": None if conv is None else messages_json(conv)}


def _tool_json(card: ToolCard) -> dict[str, Any]:
    return {
        "tool": card.tool, "tool_call_id": card.tool_call_id, "key": card.key,
        "state": card.state, "args": card.args, "result": card.result, "error": card.error,
        "duration": card.duration, "waiting_on": card.waiting_on,
        "approvals": [
            {"key": a.key, "state": a.state, "approved": a.approved, "note": a.note,
             "override_args": a.override_args, "reason": a.reason}
            for a in card.approvals
        ],
        "child_runs": [_child_json(child) for child in card.children],
    }


def messages_json(conv: Conversation) -> list[dict[str, Any]]:
    """The conversation of an agent run as JSON values, in the transcript's order, nothing
    shortened and every string as stored (``show --json``'s ``messages``).

    Args:
        conv: The run folded by `agentq.widgets.load_conversation`.

    Returns:
        A list of objects, each with a ``role``: first ``{"role": "user", "prompt",
        "options"}`` (the prompt as stored: a str or a list of user content); then one
        ``{"role": "model", "key", "number", "state", "model", "text", "error",
        "input_tokens", "output_tokens", "cost", "duration", "tool_calls"}`` per model
        request, each tool call ``{"tool", "tool_call_id", "key", "state", "args",
        "result", "error", "duration", "waiting_on", "approvals", "child_runs"}`` (an
        approval ``{"key", "state", "approved", "note", "override_args", "reason"}``, a
        child run ``{"workflow_id", "state", "output", "messages"}``: its own list when its
        conversation was read, else null); then ``{"role": "child_run", ...}`` for each
        child run started outside a tool call; last ``{"role": "answer", "output"}`` or
        ``{"role": "error", "error"}`` once the run has one.
    """
    out: list[dict[str, Any]] = [
        {"role": "user", "prompt": conv.prompt, "options": dict(conv.options)}
    ]
    for turn in conv.turns:
        out.append({
            "role": "model", "key": turn.key, "number": turn.number, "state": turn.state,
            "model": turn.model, "text": turn.text, "error": turn.error,
            "input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens,
            "cost": turn.cost, "duration": turn.duration,
            "tool_calls": [_tool_json(card) for card in turn.tools],
        })
    out.extend({"role": "child_run", **_child_json(child)} for child in conv.children)
    if conv.output is not None:
        out.append({"role": "answer", "output": conv.output})
    if conv.error is not None:
        out.append({"role": "error", "error": conv.error})
    return out
