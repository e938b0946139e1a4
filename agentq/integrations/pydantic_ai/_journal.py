"""One attempt of an agent run: its step context, its place in the run, and the log it replays.

A `RunJournal` is made for each attempt of the agent step (a first run, a resume after an
approval, a recovery in another process). It reads the run's recorded calls and waits once,
then hands out the key, label and fingerprint of each operation the run makes, checking each
against the log.

**A call's identity is its place in the run.** A tool call is keyed by the model response it
came from (its model request's number ``n``), its position ``i`` among that response's parts
and the model's ``tool_call_id``: ``tool:<n>.<i>:<tool_call_id>`` (an approval
``approval:<n>.<i>:<tool_call_id>``). A model that reuses a ``tool_call_id`` in a later
response therefore makes another call, never answered with the first one's result. Logs
written before (``tool:<tool_call_id>``, ``approval:<tool_call_id>``) still replay: an
operation whose new key the log does not hold but whose old key it holds, not yet replayed in
this attempt, takes the old key; every other operation takes the new one.

**The divergence check** follows the log: the replay must make the recorded operations in
their recorded order (same kind, same tool, same arguments where the log recorded their
digest), except that the tool calls of one model response (a *batch*, run concurrently) may
come in any order, and a call of the batch the log is in that the log does not hold (the
process died before it started) is new. The first difference fails the run with
`ReplayDivergenceError` naming what the log has (expected) and what the replay made (got). The
content of the messages a model request sends is never compared: a recorded request answers
from the log even when its instructions changed (today's date). Nothing here imports
pydantic-ai.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
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
    "args_digest",
    "label_of",
    "model_usage",
]

MODEL = "model"
TOOL = "tool"
APPROVAL = "approval"
EVENT = "event"
OTHER = "op"
_KINDS = frozenset({MODEL, TOOL, OTHER})
_WAIT_PREFIXES = (f"{APPROVAL}:", f"{EVENT}:")


class ReplayDivergenceError(NonRetryable):
    """A resumed or recovered agent run no longer makes the calls its log recorded.

    Raised inside the run at the first operation that differs from the log (another kind,
    another tool or place, other arguments); the workflow fails at once with this message as its
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
        key: Its key in the workflow (``model:2``, ``tool:<n>.<i>:<tool_call_id>``, ...).
        tool: The tool's name (tool calls and approvals), else None.
        digest: A model request's digest of its messages as logs before 2026-12 recorded it
            in the label (``"request"``), else None (no longer computed: it cost a dump of
            the whole history at every request and nothing compared it); never compared.
        args: The digest of a tool call's or an approval's arguments (`args_digest`), else
            None; compared when the log recorded it.
        batch: The tool calls that run concurrently share a batch (``"<n>"``: the calls of
            model response ``n``; ``"<n>:approved"``: its approved calls); None otherwise.
    """

    kind: str
    key: str
    tool: str | None = None
    digest: str | None = None
    args: str | None = None
    batch: str | None = None

    def describe(self) -> str:
        """Say what the operation is, for an error message: ``tool call `add` (tool:c1)``."""
        if self.kind == MODEL:
            return f"model request ({self.key})"
        noun = {TOOL: "tool call", APPROVAL: "approval of", EVENT: "wait for event"}.get(
            self.kind, "operation"
        )
        name = f" `{self.tool}`" if self.tool else ""
        return f"{noun}{name} ({self.key})"


def _type_name(value: object) -> str:
    return type(value).__qualname__


_ARGS_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_type_name)
"""The arguments' JSON text as ``json.dumps`` with these options gives it (it holds no state;
``json.dumps`` would build an encoder like it at each call)."""


def args_digest(args: object) -> str:
    """Return a short digest of a tool call's arguments (JSON; non-JSON values by type)."""
    return hashlib.sha256(_ARGS_JSON.encode(args).encode()).hexdigest()[:16]


def _recorded(row: CallRow) -> Operation | None:
    """The operation a stored call or wait row stands for, or None (not the agent's)."""
    if row.kind is CallKind.WAIT:
        if not row.key.startswith(_WAIT_PREFIXES):
            return None
        details = row.details or {}
        tool = details.get("tool", details.get("event"))  # an approval's tool, an event's name
        wait_kind = row.key.split(":", 1)[0]
        args = args_digest(details["args"]) if wait_kind == APPROVAL and "args" in details else None
        return Operation(wait_kind, row.key, tool if isinstance(tool, str) else None, args=args)
    label = row.label or {}
    kind = label.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        return None
    tool, digest, args = label.get("tool"), label.get("request"), label.get("args")
    return Operation(
        kind,
        row.key,
        tool if isinstance(tool, str) else None,
        digest if isinstance(digest, str) else None,
        args if isinstance(args, str) else None,
    )


def _batched(ops: list[Operation]) -> list[Operation]:
    """The recorded operations with each tool call's batch: the model response it follows."""
    out: list[Operation] = []
    response = -1
    for op in ops:
        if op.kind == MODEL:
            response += 1
        elif op.kind == TOOL:
            approved = ":approved" if op.key.endswith(":approved") else ""
            op = replace(op, batch=f"{response}{approved}")
        out.append(op)
    return out


@dataclass(slots=True)
class RunJournal:
    """The state of one attempt of an agent run (see the module docstring).

    Attributes:
        ctx: The agent step's context (its ``ctx.call`` and ``ctx.wait_for_input``).
        agent_name: The `DurableAgent`'s name (put in approval details).
        recorded: The run's recorded operations, in the order they were first recorded.
        model_requests: How many model requests this attempt has made so far.
        events: How many external-event waits this attempt has made so far, by name.
        ops: How many other operations this attempt has made so far, by name.
    """

    ctx: JournalContext
    agent_name: str
    recorded: list[Operation]
    model_requests: int = 0
    events: dict[str, int] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)
    _index: dict[str, int] = field(default_factory=dict, init=False)
    _replayed: set[int] = field(default_factory=set, init=False)
    _cursor: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._index = {op.key: i for i, op in enumerate(self.recorded)}

    @classmethod
    def of(cls, ctx: JournalContext, agent_name: str, rows: list[CallRow]) -> RunJournal:
        """Build the journal of an attempt from the run's stored call and wait rows."""
        recorded = _batched([op for op in map(_recorded, rows) if op is not None])
        return cls(ctx, agent_name, recorded)

    @property
    def response(self) -> int:
        """The number of the model response whose tool calls run now (-1 before any)."""
        return self.model_requests - 1

    def next_model(self) -> Operation:
        """Return the next model request (key ``model:<n>``), checked against the log."""
        op = Operation(MODEL, f"{MODEL}:{self.model_requests}")
        self.model_requests += 1
        return self._check(op)

    def tool(
        self, name: str, tool_call_id: str, place: int, args: str, *, approved: bool = False
    ) -> Operation:
        """Return the tool call at `place` of the current response, checked against the log.

        Its key is ``tool:<n>.<place>:<tool_call_id>``; a tool that raised `ApprovalRequired`
        runs again once approved under ``...:approved`` (the first run's outcome is recorded
        under the key without it). `args` is the digest of its arguments (`args_digest`).
        """
        suffix = ":approved" if approved else ""
        n = self.response
        op = Operation(
            TOOL, f"{TOOL}:{n}.{place}:{tool_call_id}{suffix}", name, args=args,
            batch=f"{n}{suffix}",
        )
        return self._check(self._legacy(op, f"{TOOL}:{tool_call_id}{suffix}"))

    def approval(
        self, name: str, tool_call_id: str, place: int, args: str, asked: int = 0
    ) -> Operation:
        """Return the approval wait of the tool call at `place` of the current response.

        Its key is ``approval:<n>.<place>:<tool_call_id>``; asked again after an invalid
        answer, ``...#<asked>``. Checked against the log.
        """
        again = f"#{asked}" if asked else ""
        key = f"{APPROVAL}:{self.response}.{place}:{tool_call_id}{again}"
        op = Operation(APPROVAL, key, name, args=args)
        return self._check(self._legacy(op, f"{APPROVAL}:{tool_call_id}{again}"))

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

    def _legacy(self, op: Operation, old_key: str) -> Operation:
        """`op` under the key the log recorded it with before keys held a call's place."""
        if op.key in self._index:
            return op
        at = self._index.get(old_key)
        if at is None or at in self._replayed:
            return op  # new, or a reused id whose old key another call already replayed
        return replace(op, key=old_key)

    def _check(self, op: Operation) -> Operation:
        recorded, replayed = self.recorded, self._replayed
        while self._cursor in replayed:
            self._cursor += 1
        cursor = self._cursor
        at = self._index.get(op.key)
        if at is not None and at in replayed:
            return op  # made twice in this attempt: ctx.call and the store say what it is
        if cursor >= len(recorded):
            return op  # past the log: a new operation
        logged = recorded[cursor]
        in_batch = op.batch is not None and op.batch == logged.batch
        if at is not None and (at == cursor or (in_batch and recorded[at].batch == op.batch)):
            self._same(recorded[at], op, at)
            replayed.add(at)
            return op
        if at is None and in_batch:
            return op  # a call of this batch that never started (the process died first)
        raise self._diverged(cursor, f"the log has {logged.describe()}, the replay made "
                             f"{op.describe()}")

    def _same(self, logged: Operation, op: Operation, position: int) -> None:
        if (logged.kind, logged.tool) != (op.kind, op.tool):
            raise self._diverged(position, f"the log has {logged.describe()}, the replay made "
                                 f"{op.describe()}")
        if logged.args is not None and op.args is not None and logged.args != op.args:
            raise self._diverged(position, f"the log has {logged.describe()} with other "
                                 "arguments than the replay's")

    def _diverged(self, position: int, what: str) -> ReplayDivergenceError:
        return ReplayDivergenceError(
            f"agent run {self.ctx.workflow_id!r} diverged from its log at position "
            f"{position}: {what}"
        )


CURRENT: ContextVar[RunJournal | None] = ContextVar("agentq_pydantic_ai_journal", default=None)
"""The journal of the agent step attempt running in this task (None outside one)."""


def label_of(op: Operation, **extra: Any) -> dict[str, Any]:
    """Return the label stored with `op`'s call: its kind, position data and `extra`."""
    label: dict[str, Any] = {"kind": op.kind}
    if op.tool is not None:
        label["tool"] = op.tool
    if op.digest is not None:
        label["request"] = op.digest
    if op.args is not None:
        label["args"] = op.args
    label.update(extra)
    return label


def model_usage(output: Any) -> dict[str, Any] | None:
    """Return the token usage of a recorded model response (JSON), or None."""
    if not isinstance(output, Mapping):
        return None
    usage = output.get("usage")
    if not isinstance(usage, Mapping):
        return None
    figures = {k: usage.get(k) for k in ("input_tokens", "output_tokens")}
    numbers = {k: v for k, v in figures.items() if isinstance(v, int)}
    numbers["total_tokens"] = sum(numbers.values())
    model = output.get("model_name")
    return {**numbers, "model": model} if isinstance(model, str) else numbers
