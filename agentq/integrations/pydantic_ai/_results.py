"""What an agent run reports: `AgentRun`, its waits (`PendingApproval`), and the choice of
the one wait an approval answers (or the error saying why there is none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.messages import ModelMessage
from pydantic_ai.usage import RunUsage

from agentq.errors import NotWaitingError, UnknownWorkflowError
from agentq.integrations.pydantic_ai._runs import STEP
from agentq.integrations.pydantic_ai.tree import run_tree_html
from agentq.literal import visible
from agentq.store import CallKind, CallRow, CallState, DurableStore, WorkflowRow, child_of
from agentq.workflows import RunResult, RunStatus

__all__ = [
    "USAGE",
    "AgentRun",
    "PendingApproval",
    "pending_of",
    "pending_with_children",
    "waiting_call",
]

USAGE: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)
"""A run's `RunUsage` to and from the JSON of its recorded result."""


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A wait of an agent run: a tool call waiting for a decision, or an external event.

    Attributes:
        run_id: The run (its workflow id).
        tool: The tool's name (an approval), or the event's name (``deferred_tool_calls``
            for ``RequestInput``).
        args: The arguments the model gave (a JSON object); ``{}`` for an event.
        tool_call_id: The model's id of the call; ``""`` for an event.
        key: The wait's key (``approval:<n>.<i>:<tool_call_id>``, ``event:<name>:<n>``);
            give it to `engine.resume`.
        reason: The question shown (``approve tool call <tool>?``; after an invalid
            answer, what was wrong with it first). An event's says its key.
        step: The step to resume: ``"agent"``.
        kind: ``"approval"`` (answer with `approve` / `deny`) or ``"event"`` (answer with
            ``engine.resume(run_id, "agent", payload, key=key)``; for ``RequestInput`` the
            JSON form of pydantic-ai's ``DeferredToolResults``).
    """

    run_id: str
    tool: str
    args: dict[str, Any]
    tool_call_id: str
    key: str
    reason: str
    step: str = STEP
    kind: str = "approval"


@dataclass(frozen=True, slots=True)
class AgentRun:
    """What `DurableAgent.run` (and `approve` / `deny`) return.

    Attributes:
        run_id: The run (its workflow id).
        status: completed, waiting (for an approval or an event), failed or cancelled.
        output: The agent's output when completed, else None: the recorded JSON validated
            again as the output type (the run's ``output_type`` given to the call, else the
            agent's), so a model's output is the model, the same live and read back in
            another process. Left as its JSON (and a warning logged) if it does not validate.
        messages: The run's messages (all of them, the history included) when completed.
            Not stored with the result (it would outgrow the store's per-value limit): the
            ones of the attempt that completed the run when it ran to completion in this
            call (`run`, `approve`, `deny`), else rebuilt from the log by a read-only replay
            (`DurableAgent.messages`; the requests' timestamps are the rebuild's). The same
            parts either way; their pydantic-ai run id is the run's id. Empty (and a warning
            logged) if they cannot be rebuilt.
        usage: pydantic-ai's `RunUsage` of the run (``requests``, ``tool_calls``,
            ``input_tokens``, ``output_tokens``, ...) when completed, else an empty one
            (runs recorded before it was stored whole have their three figures). The JSON
            is ``result.output["usage"]``.
        pending: The waits of the run (status waiting): tool calls waiting for a decision
            (kind ``"approval"``) and external events (kind ``"event"``), then those of its
            open child runs (sub-agents), each with its own `run_id` (answer it there).
        reason: Why it waits, failed or was cancelled, else None.
        result: The workflow's `RunResult`.
        tree_html: The run as a tree (workflow → model requests → tool calls, with tokens),
            HTML (`agentq.integrations.pydantic_ai.tree.run_tree_html`) of its calls as they
            were when the run was reported; what a notebook shows for an `AgentRun` at the
            end of a cell. Built when read, not when the run is reported.
    """

    run_id: str
    status: RunStatus
    output: Any
    messages: list[ModelMessage]
    usage: RunUsage
    pending: list[PendingApproval]
    reason: str | None
    result: RunResult = field(repr=False)
    _calls: Sequence[CallRow] = field(default=(), repr=False, compare=False)

    @property
    def tree_html(self) -> str:
        """The run's tree as HTML (see the class docstring), built on each read."""
        return run_tree_html(self.run_id, self._calls, state=self.status.value)

    def _repr_html_(self) -> str:
        """The run's result card (status, reason, output) above its tree."""
        return f"{self.result._repr_html_()}{self.tree_html}"


async def pending_with_children(
    store: DurableStore,
    agent_name: str,
    run_id: str | None,
    rows: Sequence[CallRow] | None = None,
) -> list[PendingApproval]:
    """The waits of `run_id` (None: of every run of the agent `agent_name`), then those of
    their open child runs (sub-agents, of any agent), down the tree, each with its run id.
    `rows`: the call rows of `run_id` when read already (else they are read here).

    Only the waits of open runs (running, waiting) are listed: a wait a cancelled or failed
    run left ``waiting`` in its log has ended (`agentq.store.shown_call`'s rule); a retry of
    the run re-opens it. The workflow row of a run is read only when it has such a row."""
    if rows is None:
        rows = await store.calls(run_id)
    workflows: dict[str, WorkflowRow | None] = {}

    async def workflow(workflow_id: str) -> WorkflowRow | None:
        if workflow_id not in workflows:
            workflows[workflow_id] = await store.get_workflow(workflow_id)
        return workflows[workflow_id]

    async def open_waits(found: Sequence[CallRow], agent: str | None) -> None:
        for p in (pending_of(r, agent) for r in found):
            if p is None or (p.run_id, p.key) in seen:
                continue
            wf = await workflow(p.run_id)
            if wf is not None and not wf.state.closed:
                seen.add((p.run_id, p.key))
                out.append(p)

    out: list[PendingApproval] = []
    seen: set[tuple[str, str]] = set()
    await open_waits(rows, agent_name)
    todo = [(r, run_id is not None) for r in rows]
    while todo:
        row, ours = todo.pop(0)
        child = child_of(row)
        if child is None or row.state is not CallState.WAITING:
            continue
        if not ours:
            wf = await workflow(row.workflow_id)
            if wf is None or wf.definition != agent_name:
                continue
        child_rows = await store.calls(child)
        await open_waits(child_rows, None)
        todo.extend((r, True) for r in child_rows)
    return out


def pending_of(row: CallRow, agent_name: str | None) -> PendingApproval | None:
    """Return the wait `row` stands for when it is a waiting one of the agent `agent_name`
    (None: of any agent).

    Returns:
        A `PendingApproval` of kind ``"approval"`` (key ``approval:...``) or ``"event"``
        (key ``event:...``), or None (not a waiting wait of this agent).
    """
    details = row.details or {}
    if (
        row.kind is not CallKind.WAIT
        or row.state is not CallState.WAITING
        or not row.key.startswith(("approval:", "event:"))
        or (agent_name is not None and details.get("agent") != agent_name)
        or "agent" not in details
    ):
        return None
    if row.key.startswith("event:"):
        event = str(details.get("event"))
        return PendingApproval(
            row.workflow_id, event, {}, "", row.key, row.reason or "", kind="event"
        )
    args = details.get("args")
    return PendingApproval(
        row.workflow_id,
        str(details.get("tool")),
        args if isinstance(args, dict) else {},
        str(details.get("tool_call_id")),
        row.key,
        row.reason or "",
    )


async def waiting_call(
    store: DurableStore, agent_name: str, run_id: str, tool_call_id: str | None
) -> PendingApproval:
    """Return the one approval of `run_id` an answer is for.

    Raises:
        UnknownWorkflowError: No run `run_id` of the agent in the store.
        NotWaitingError: The run waits for no approval (its state, or its event waits, named;
            when only its child runs wait for approvals, those runs named), e.g. it was
            cancelled or failed while an approval waited (its state and reason named).
        LookupError: It waits for others than `tool_call_id` (or several, and no id given).
    """
    row = await store.get_workflow(run_id)
    if row is None or row.definition != agent_name:
        raise UnknownWorkflowError(
            f"no run {run_id!r} of agent {agent_name!r} in the store"
            + ("" if row is None else f" (it is a run of {row.definition!r})")
        )
    state = getattr(row.state, "value", row.state)
    if row.state.closed:  # its waits ended with it (`pending_with_children`)
        raise NotWaitingError(
            f"run {run_id!r} is {state}"
            + (f" ({visible(row.reason)})" if row.reason else "")  # stored: escaped
            + ": nothing waits for an approval"
        )
    waits = [p for p in (pending_of(r, agent_name) for r in await store.calls(run_id)) if p]
    pending = [p for p in waits if p.kind == "approval"]
    if not pending:
        children = sorted({p.run_id for p in await pending_with_children(
            store, agent_name, run_id) if p.run_id != run_id})
        if children:
            raise NotWaitingError(
                f"run {run_id!r} waits for its child run(s) {children}, not for an approval "
                "of its own: answer those runs (their agent's approve / deny with their run id)"
            )
        events = [p.key for p in waits]
        what = f"waits for {events} (answer with engine.resume)" if events else f"is {state}"
        raise NotWaitingError(f"run {run_id!r} {what}: nothing waits for an approval")
    chosen = [p for p in pending if tool_call_id in (None, p.tool_call_id)]
    if len(chosen) != 1:
        ids = [p.tool_call_id for p in pending]
        raise LookupError(
            f"run {run_id!r} waits for the approval of tool calls {ids}; "
            + ("give tool_call_id" if tool_call_id is None else f"not {tool_call_id!r}")
        )
    return chosen[0]
