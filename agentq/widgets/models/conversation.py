"""An agent run as the conversation it was: the values the conversation view draws. Pure.

`Conversation` (one run: prompt, options, model `Turn` s, final answer, error, lineage),
`Turn` (a model request: text, tokens, cost, latency), `ToolCard` (a tool call: arguments,
result, `ApprovalAsk` s, nested `ChildRun` s) and `Detail` (the keys only the "details"
toggle shows). `agentq.widgets.models.folding.fold_conversation` makes them from a run's rows;
strings are raw: the renderer (`agentq.widgets.html.conversation`) escapes and isolates every
one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agentq.store import WorkflowRow

__all__ = [
    "ApprovalAsk",
    "ChildRun",
    "Conversation",
    "Detail",
    "Lineage",
    "ToolCard",
    "Turn",
    "is_agent_run",
]


class Lineage(NamedTuple):
    """Where a fork came from (its `WorkflowForked` event).

    Attributes:
        parent: The run it was forked from.
        at: The key of the call it was forked at (a step's name for a fork at a step).
        edited: The keys whose recorded values the fork replaced (``replace=``).
    """

    parent: str
    at: str
    edited: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Detail:
    """What only the "details" toggle shows of a call or wait: its key and bookkeeping."""

    key: str
    fingerprint: str | None = None
    lane: str | None = None
    attempt: int = 0
    runs: int = 0
    state: str = ""


@dataclass(frozen=True, slots=True)
class ApprovalAsk:
    """One approval asked for a tool call.

    Attributes:
        key: The wait's key (``approval:<n>.<i>:<id>``, ``…#1`` when asked again).
        state: ``waiting``, ``answered`` or ``timed_out``; ``cancelled`` / ``failed`` when the
            run closed while it waited (`agentq.store.shown_call`).
        approved: The answer (True / False), None while waiting or when not a decision.
        note: The answer's note ('' for none).
        override_args: The edited arguments of an approval, else None.
        reason: The question (the wait's reason).
    """

    key: str
    state: str
    approved: bool | None = None
    note: str = ""
    override_args: dict[str, Any] | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ChildRun:
    """A child run started where it sits (``ctx.child``).

    Attributes:
        workflow_id: The child's id.
        state: The child run's own state (``running``, ``waiting``, ``completed``...) when it
            was read, else its wait's (``waiting`` while the child runs, ``answered`` once
            ended).
        output: Its outcome as the parent received it (JSON), else None.
        conversation: The child's own conversation when it is an agent run and was read.
    """

    workflow_id: str
    state: str
    output: Any = None
    conversation: Conversation | None = None


@dataclass(frozen=True, slots=True)
class ToolCard:
    """One tool call of a model response.

    Attributes:
        tool: The tool's name.
        tool_call_id: The model's id for the call.
        args: The arguments the model gave (JSON), else None.
        state: ``asked`` (not started), ``started``, ``completed``, ``failed``, ``waiting``
            (an approval, or a wait inside the call: `waiting_on`), ``denied``, ``retry``
            (the tool asked the model to try again: `error` is its message).
        key: The key of the call as the log records it (the run of an approved call when
            there is one): the fork point of "Fork from here"; None before it ran.
        result: The tool's return value (JSON), when completed.
        error: The failure's message, when failed.
        duration: Seconds the call took, when ended.
        approvals: The approvals asked for it, in order.
        children: Child runs it started.
        details: The keys of its rows (for the "details" toggle).
        edited: Whether this run is a fork that replaced the call's recorded result.
        waiting_on: What the call is parked on, in words (``child run 'x' (helper)``), when
            a wait inside it (not its own approval) holds it; it runs again once answered.
    """

    tool: str
    tool_call_id: str
    args: Any = None
    state: str = "asked"
    key: str | None = None
    result: Any = None
    error: str | None = None
    duration: float | None = None
    approvals: tuple[ApprovalAsk, ...] = ()
    children: tuple[ChildRun, ...] = ()
    details: tuple[Detail, ...] = ()
    edited: bool = False
    waiting_on: str | None = None

    @property
    def waiting(self) -> ApprovalAsk | None:
        """The approval this call waits for now, or None."""
        last = self.approvals[-1] if self.approvals else None
        return last if last is not None and last.state == "waiting" else None


@dataclass(frozen=True, slots=True)
class Turn:
    """One model request and its response.

    Attributes:
        key: ``model:<n>`` (the fork point of "Fork from here").
        number: ``n``.
        state: ``started``, ``completed`` or ``failed``.
        model: The model's name as recorded, else None.
        text: The response's text parts, joined; '' for none.
        partial: While it runs, the text streamed so far (when the caller has it), else None.
        response: The recorded response (JSON), when completed.
        input_tokens, output_tokens: Its tokens (0 when not recorded).
        cost: Its cost by the price table, None when its model has no price.
        duration: Seconds the request took, when ended.
        started_at: Unix seconds it started.
        error: The failure's message, when failed.
        tools: The tool calls its response asked for, in order.
        details: Its row's keys (for the "details" toggle).
        edited: Whether this run is a fork that replaced the recorded response.
    """

    key: str
    number: int
    state: str
    model: str | None = None
    text: str = ""
    partial: str | None = None
    response: Any = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    duration: float | None = None
    started_at: float | None = None
    error: str | None = None
    tools: tuple[ToolCard, ...] = ()
    details: tuple[Detail, ...] = ()
    edited: bool = False


@dataclass(frozen=True, slots=True)
class Conversation:
    """One agent run as a conversation (see the module docstring).

    Attributes:
        run_id: The run.
        state: The run's state (a `WorkflowState` value).
        prompt: The prompt as stored (a str, or a list of user content as JSON).
        options: The run options stored with it (``instructions``, ``model``...), else {}.
        turns: The model requests, in order.
        output: The final answer, when completed.
        error: Why the run failed or was cancelled, else None.
        forked_from: A fork's `Lineage` (parent, at, edited keys), else None.
        children: Child runs started outside any tool call.
        started_at, updated_at: Unix seconds.
        details: The run's steps' bookkeeping (worker, lease token) for the toggle.
    """

    run_id: str
    state: str
    prompt: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)
    turns: tuple[Turn, ...] = ()
    output: Any = None
    error: str | None = None
    forked_from: Lineage | None = None
    children: tuple[ChildRun, ...] = ()
    started_at: float | None = None
    updated_at: float | None = None
    details: tuple[tuple[str, str], ...] = ()

    @property
    def tokens(self) -> tuple[int, int]:
        """``(input, output)`` tokens of every model request."""
        return (sum(t.input_tokens for t in self.turns),
                sum(t.output_tokens for t in self.turns))

    @property
    def cost(self) -> float | None:
        """The cost of the completed model requests; None when one of them has no price, or
        none completed yet (a request that failed or runs has no recorded usage)."""
        costs = [t.cost for t in self.turns if t.state == "completed"]
        if not costs or any(c is None for c in costs):
            return None
        return sum(c for c in costs if c is not None)

    @property
    def seconds(self) -> float | None:
        """Seconds from the run's start to its latest event."""
        if self.started_at is None or self.updated_at is None:
            return None
        return max(0.0, self.updated_at - self.started_at)

    def waiting(self) -> list[tuple[ToolCard, ApprovalAsk]]:
        """The tool calls that wait for an approval now, with the approval."""
        return [(card, card.waiting) for turn in self.turns for card in turn.tools
                if card.waiting is not None]


def is_agent_run(workflow: WorkflowRow) -> bool:
    """Whether `workflow` is a `DurableAgent` run (its input names an agent and a prompt)."""
    data = workflow.input
    return isinstance(data, dict) and "agent" in data and "prompt" in data
