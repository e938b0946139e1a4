"""One attempt of an agent run: its step context, its place in the run, and the log it replays.

A `RunJournal` is made for each attempt of the agent step (a first run, a resume after an
approval, a recovery in another process). It reads the run's recorded calls and waits once,
then hands out the key, label and fingerprint of each operation in the order the run makes
them, checking each against the log: the operation at position ``p`` of a replay must be the
one recorded at position ``p`` (same kind, same tool, same key: a tool call's key holds its
``tool_call_id``), else the run fails with `ReplayDivergenceError` naming the first difference
(expected vs. got). The check compares the *sequence* only, never the content of the messages
sent: a recorded model request answers from the log even when the messages a replay would send
differ (instructions holding today's date, a reworded system prompt). A model request's digest
is still recorded in its label, for reading only. Nothing here imports pydantic-ai.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentq.errors import NonRetryable
from agentq.queue import Job
from agentq.store import CallKind, CallRow

__all__ = [
    "CURRENT",
    "JournalContext",
    "Operation",
    "ReplayDivergenceError",
    "RunJournal",
    "request_digest",
]

MODEL = "model"
TOOL = "tool"
APPROVAL = "approval"
EVENT = "event"
OTHER = "op"
_KINDS = frozenset({MODEL, TOOL, OTHER})
_WAIT_PREFIXES = (f"{APPROVAL}:", f"{EVENT}:")
_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id", "history_digest"})


class ReplayDivergenceError(NonRetryable):
    """A resumed or recovered agent run no longer makes the calls its log recorded.

    Raised inside the run at the first operation that differs from the log (another kind,
    another tool, another tool call id); the workflow fails at once with this message as its
    reason, naming what the log has and what the replay made (never a silent wrong replay).
    The messages a model request sends are not compared: instructions that change on their
    own (the current time) do not make a run diverge. Typical causes: the agent's tools,
    approval rules or model script changed between the first run and the resume.
    """


class JournalContext(Protocol):
    """What a journal needs of its step context: an agent step's `StepContext`, or the
    read-only `LogReader` that rebuilds a completed run's messages."""

    @property
    def workflow_id(self) -> str:
        """The run's id."""

    async def call(
        self,
        job: Job,
        *,
        label: Mapping[str, Any] | None = None,
        usage: Mapping[str, Any] | Callable[[Any], Mapping[str, Any] | None] | None = None,
    ) -> Any:
        """Run `job` once per key (or answer it from the log)."""

    async def wait_for_input(
        self,
        key: str,
        reason: object,
        *,
        details: Mapping[str, Any] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (StepContext's signature)
    ) -> Any:
        """Wait durably for input under `key` (or answer it from the log)."""


@dataclass(frozen=True, slots=True)
class Operation:
    """One durable operation of a run as the journal compares it.

    Attributes:
        kind: ``"model"``, ``"tool"``, ``"approval"``, ``"event"`` or ``"op"``.
        key: Its key in the workflow (``model:2``, ``tool:<tool_call_id>``, ...).
        tool: The tool's name (tool calls and approvals), else None.
        digest: A model request's digest of its messages, else None (recorded in the label
            for reading; never compared).
    """

    kind: str
    key: str
    tool: str | None = None
    digest: str | None = None

    def describe(self) -> str:
        """Say what the operation is, for an error message: ``tool call `add` (tool:c1)``."""
        if self.kind == MODEL:
            return f"model request ({self.key})"
        noun = {TOOL: "tool call", APPROVAL: "approval of", EVENT: "wait for event"}.get(
            self.kind, "operation"
        )
        name = f" `{self.tool}`" if self.tool else ""
        return f"{noun}{name} ({self.key})"


def request_digest(messages: object) -> str:
    """Return a short digest of a model request's messages (JSON), without volatile fields.

    Timestamps, run ids and conversation ids change on every replay and are left out, so
    the digest says only whether the model is asked the same thing. It is recorded in the
    request's label for reading; the replay check does not compare it.
    """
    text = json.dumps(_strip(messages), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _strip(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: _strip(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list | tuple):
        return [_strip(v) for v in value]
    return value


def _recorded(row: CallRow) -> Operation | None:
    """The operation a stored call or wait row stands for, or None (not the agent's)."""
    if row.kind is CallKind.WAIT:
        if not row.key.startswith(_WAIT_PREFIXES):
            return None
        details = row.details or {}
        tool = details.get("tool", details.get("event"))  # an approval's tool, an event's name
        wait_kind = row.key.split(":", 1)[0]
        return Operation(wait_kind, row.key, tool if isinstance(tool, str) else None)
    label = row.label or {}
    kind = label.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        return None
    tool = label.get("tool")
    digest = label.get("request")
    return Operation(
        kind,
        row.key,
        tool if isinstance(tool, str) else None,
        digest if isinstance(digest, str) else None,
    )


@dataclass(slots=True)
class RunJournal:
    """The state of one attempt of an agent run (see the module docstring).

    Attributes:
        ctx: The agent step's context (its ``ctx.call`` and ``ctx.wait_for_input``).
        agent_name: The `DurableAgent`'s name (put in approval details).
        recorded: The run's recorded operations, in the order they were first recorded.
        position: How many operations this attempt has made so far.
        model_requests: How many model requests this attempt has made so far.
        events: How many external-event waits this attempt has made so far, by name.
        ops: How many other operations this attempt has made so far, by name.
    """

    ctx: JournalContext
    agent_name: str
    recorded: list[Operation]
    position: int = 0
    model_requests: int = 0
    events: dict[str, int] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, ctx: JournalContext, agent_name: str, rows: list[CallRow]) -> RunJournal:
        """Build the journal of an attempt from the run's stored call and wait rows."""
        recorded = [op for op in map(_recorded, rows) if op is not None]
        return cls(ctx, agent_name, recorded)

    def next_model(self, digest: str) -> Operation:
        """Return the next model request (key ``model:<n>``), checked against the log."""
        op = Operation(MODEL, f"{MODEL}:{self.model_requests}", None, digest)
        self.model_requests += 1
        return self._check(op)

    def tool(self, name: str, tool_call_id: str, *, approved: bool = False) -> Operation:
        """Return the tool call `tool_call_id` (key ``tool:<id>``), checked against the log.

        A tool that raised `ApprovalRequired` runs again once approved, under the key
        ``tool:<id>:approved`` (the first run's outcome is recorded under ``tool:<id>``).
        """
        key = f"{TOOL}:{tool_call_id}" + (":approved" if approved else "")
        return self._check(Operation(TOOL, key, name))

    def approval(self, name: str, tool_call_id: str, asked: int = 0) -> Operation:
        """Return the approval wait of `tool_call_id`, checked against the log.

        Its key is ``approval:<tool_call_id>``; asked again after an invalid answer,
        ``approval:<tool_call_id>#<asked>``.
        """
        key = f"{APPROVAL}:{tool_call_id}" + (f"#{asked}" if asked else "")
        return self._check(Operation(APPROVAL, key, name))

    def event(self, name: str) -> Operation:
        """Return the next external-event wait named `name` (``event:<name>:<n>``), checked."""
        n = self.events.get(name, 0)
        self.events[name] = n + 1
        return self._check(Operation(EVENT, f"{EVENT}:{name}:{n}", name))

    def event_again(self, first: Operation, asked: int) -> Operation:
        """Return the wait asking `first` (an event wait) again: ``<first.key>#<asked>``."""
        return self._check(Operation(EVENT, f"{first.key}#{asked}", first.tool))

    def other(self, name: str) -> Operation:
        """Return the next other operation named `name` (``op:<name>:<n>``), checked."""
        n = self.ops.get(name, 0)
        self.ops[name] = n + 1
        return self._check(Operation(OTHER, f"{OTHER}:{name}:{n}"))

    def _check(self, op: Operation) -> Operation:
        position = self.position
        self.position += 1
        if position >= len(self.recorded):
            return op
        logged = self.recorded[position]
        # The sequence only (kind, key, tool); a model request's messages are not compared.
        if (logged.kind, logged.key, logged.tool) != (op.kind, op.key, op.tool):
            raise ReplayDivergenceError(
                f"agent run {self.ctx.workflow_id!r} diverged from its log at position "
                f"{position}: the log has {logged.describe()}, the replay made {op.describe()}"
            )
        return op


CURRENT: ContextVar[RunJournal | None] = ContextVar("agentq_pydantic_ai_journal", default=None)
"""The journal of the agent step attempt running in this task (None outside one)."""


def label_of(op: Operation, **extra: Any) -> dict[str, Any]:
    """Return the label stored with `op`'s call: its kind, position data and `extra`."""
    label: dict[str, Any] = {"kind": op.kind}
    if op.tool is not None:
        label["tool"] = op.tool
    if op.digest is not None:
        label["request"] = op.digest
    label.update(extra)
    return label
