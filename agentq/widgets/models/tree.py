"""A run as a tree: workflow → steps → calls (model requests, tool calls, waits). Pure.

`build_tree` folds one workflow's rows (its projection row, step rows and durable call rows, the
reads `agentq.widgets.models.detail.load_detail` makes; no I/O here) into `TreeNode` s:

- the root is the workflow; its children are its steps, in step order;
- a step's children are the calls and waits it recorded (the step of each call's latest
  start), in first-recorded order; a workflow read without step rows (an agent run's calls
  alone) hangs its calls on the root;
- an agent run's model request (a call labelled ``{"kind": "model"}``) is a node of its own:
  the tool calls, approvals and other calls after it, up to the next model request, are its
  children (the calls its response asked for);
- a child run (its wait ``child:<key>``, kind ``child``) started by a durable call (a
  sub-agent run in a tool call: key ``child:<call key>`` or ``child:<call key>#<n>``) is a
  child of that call's node; one started by the step itself stays among the step's calls.

Every workflow gets the same tree: plain steps, durable calls, agent runs. Nodes carry plain
strings (escaped by the renderer, `agentq.widgets.html.tree`), a stable `TreeNode.node` id
(``"w"``, ``"s:3"``, ``"c:<key>"``: what the live view remembers as open) and the `item` that
the detail view (`agentq.widgets.detail.DetailPane`) opens for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentq.markup import fmt_seconds, isolate
from agentq.store import (
    CHILD_WAIT_PREFIX,
    CallKind,
    CallRow,
    CallState,
    StepRow,
    WorkflowRow,
    WorkflowState,
    child_of,
    shown_call,
)
from agentq.widgets.models.detail import shown_step

__all__ = ["Item", "TreeNode", "build_tree", "node_item"]

Item = tuple[str, Any]
"""What a detail view opens: ``("workflow", None)``, ``("step", index)`` or ``("call", key)``."""


@dataclass(slots=True)
class TreeNode:
    """One node of a run's tree.

    Attributes:
        node: Stable id within the workflow: ``"w"``, ``"s:<index>"`` or ``"c:<key>"``.
        kind: ``workflow``, ``step``, ``model`` (a model request), ``call``, ``wait`` or
            ``child`` (the wait on a child run).
        title: What it is (a workflow id, ``step 0 · fetch``, ``tool search``…), unescaped;
            each user value in it isolated on its own (`agentq.markup.isolate`).
        state: Its status (a `WorkflowState`, `StepState` or `CallState` value).
        facts: Short unescaped extras: duration, attempt, runs, tokens, the error (user
            values isolated like the title's).
        failed: Whether it failed (its error is among `facts`).
        children: Its children, in order.
    """

    node: str
    kind: str
    title: str
    state: str
    facts: tuple[str, ...] = ()
    failed: bool = False
    children: list[TreeNode] = field(default_factory=list)

    @property
    def item(self) -> Item:
        """The detail this node opens (see `node_item`)."""
        return node_item(self.node)

    def walk(self) -> Iterable[TreeNode]:
        """Yield this node and every node below it, depth first, in order."""
        yield self
        for child in self.children:
            yield from child.walk()


def node_item(node: str) -> Item:
    """Return the detail item of a node id (``"s:3"`` → ``("step", 3)``).

    Raises:
        TypeError: `node` is not a str.
        ValueError: `node` is not a node id (the message names it).
    """
    if not isinstance(node, str):
        raise TypeError(f"a run tree node id must be a str, got {type(node).__name__}: "
                        f"{node!r:.80}")
    if node == "w":
        return ("workflow", None)
    kind, _, ref = node.partition(":")
    if kind == "c" and ref:
        return ("call", ref)
    if kind == "s" and ref.isascii() and ref.isdigit() and str(int(ref)) == ref:
        return ("step", int(ref))  # "s:3" only: not "s:03", not another script's digits
    raise ValueError(f"not a run tree node id: {node!r}")


def _error_text(error: Any) -> str:
    if error is None:
        return ""
    kind = getattr(error, "type", None) or (error.get("type") if isinstance(error, dict) else "")
    message = getattr(error, "message", None)
    if message is None and isinstance(error, dict):
        message = error.get("message", "")
    return f"{isolate(kind or 'error')}: {isolate(message or '')}"


def _step_node(step: StepRow, workflow: WorkflowRow | str) -> TreeNode:
    facts = []
    if step.attempt > 1:
        facts.append(f"attempt {step.attempt}")
    if step.started_at is not None and step.finished_at is not None:
        facts.append(fmt_seconds(step.finished_at - step.started_at))
    error = _error_text(step.error)
    if step.wait_key:
        facts.append(f"waits on {isolate(step.wait_key)}")
    elif step.reason and (step.state.value == "waiting" or (step.state.value == "failed"
                                                             and not error)):
        facts.append(step.reason)  # a failed step's reason repeats its error: said once
    state = shown_step(step, workflow)
    failed = bool(error) and state == "failed"
    if error:  # an earlier attempt's error, on a step that was retried since, is history
        facts.append(error if failed else f"retried after: {error}")
    title = f"step {step.step_index} · {isolate(step.step_name)}"
    return TreeNode(f"s:{step.step_index}", "step", title, state, tuple(facts),
                    failed=failed)


def _tokens(usage: dict[str, Any] | None) -> str:
    usage = usage or {}
    i, o = usage.get("input_tokens"), usage.get("output_tokens")
    if not isinstance(i, int) and not isinstance(o, int):
        return ""
    model = usage.get("model")
    head = f"{isolate(model)} " if isinstance(model, str) and model else ""
    i, o = (i if isinstance(i, int) else 0), (o if isinstance(o, int) else 0)
    return f"{head}{i} in / {o} out tokens"


def _call_node(call: CallRow, workflow: WorkflowRow | str) -> TreeNode:
    label = call.label or {}
    facts: list[str] = []
    if call.kind is CallKind.WAIT:
        details = call.details or {}
        tool = details.get("tool")
        approval = call.key.startswith("approval:") and tool
        child = child_of(call)
        title = f"approval of {isolate(tool)}" if approval else "wait"
        kind = "wait"
        if child is not None:
            title, kind = f"child run {isolate(child)}", "child"
        if call.reason:
            facts.append(str(call.reason))
    else:
        kind = "model" if label.get("kind") == "model" else "call"
        name = label.get("tool") or label.get("kind") or "call"
        title = ("model request" if kind == "model" else f"tool {isolate(name)}" if "tool" in label
                 else isolate(name))
        if call.runs > 1:
            facts.append(f"ran {call.runs} times")
        tokens = _tokens(call.usage)
        if tokens:
            facts.append(tokens)
    if call.duration is not None:
        facts.append(fmt_seconds(call.duration))
    error = _error_text(call.error)
    if error:
        facts.append(error)
    if isinstance(workflow, WorkflowRow):
        state = shown_call(workflow, call).state
    else:  # only the run's state: the same rule (a wait left waiting in a closed run)
        closed = workflow in _CLOSED and call.state is CallState.WAITING
        state = workflow if closed else call.state.value
    return TreeNode(f"c:{call.key}", kind, f"{title} · {isolate(call.key)}", state,
                    tuple(facts), failed=bool(error))


def build_tree(
    workflow: WorkflowRow | str,
    steps: Sequence[StepRow] = (),
    calls: Sequence[CallRow] = (),
    *,
    state: str = "",
) -> TreeNode:
    """Fold one workflow's rows into its tree.

    Args:
        workflow: Its projection row, or its id alone (then `state` is the root's status).
        steps: Its step rows (any order; drawn in step order). Empty: the calls hang on the
            root (an agent run's calls read alone).
        calls: Its call and wait rows, in first-recorded order (as `DurableStore.calls`
            returns them).
        state: The root's status when `workflow` is an id; a closed one (completed, failed,
            cancelled) is also shown for the waits still ``waiting`` (`shown_call`'s rule).

    Returns:
        The root `TreeNode` (kind ``workflow``), uncapped: the renderer caps children.
    """
    if isinstance(workflow, WorkflowRow):
        facts: tuple[str, ...] = (workflow.reason,) if workflow.reason else ()
        root = TreeNode("w", "workflow", workflow.workflow_id, workflow.state.value, facts,
                        failed=workflow.state.value == "failed")
    else:
        root = TreeNode("w", "workflow", workflow, state)
    by_index: dict[int, TreeNode] = {}
    for step in sorted(steps, key=lambda s: s.step_index):
        by_index[step.step_index] = node = _step_node(step, workflow if isinstance(
            workflow, WorkflowRow) else state)
        root.children.append(node)
    model: dict[int, TreeNode] = {}  # the latest model request under each step (-1: the root)
    by_key: dict[str, TreeNode] = {}
    for call in calls:
        node = _call_node(call, workflow if isinstance(workflow, WorkflowRow) else state)
        by_key[call.key] = node
        parent_key = call.step_index if call.step_index in by_index else -1
        parent = by_index.get(parent_key, root)
        made_by = _made_by(call.key, by_key) if node.kind == "child" else None
        if made_by is not None:
            made_by.children.append(node)
        elif node.kind == "model":
            model[parent_key] = node
            parent.children.append(node)
        else:
            model.get(parent_key, parent).children.append(node)
    return root


_CLOSED = frozenset(s.value for s in WorkflowState if s.closed)


def _made_by(key: str, nodes: dict[str, TreeNode]) -> TreeNode | None:
    """The node of the call that started the child run waited on under `key`
    (``child:<call key>`` or ``child:<call key>#<n>``), or None (the step started it)."""
    call_key = key[len(CHILD_WAIT_PREFIX):].rpartition("#")
    for candidate in (key[len(CHILD_WAIT_PREFIX):], call_key[0]):
        node = nodes.get(candidate)
        if candidate and node is not None and node.kind in ("call", "model"):
            return node
    return None
