"""An agent run as a tree: workflow → model requests → tool calls, with tokens (pure HTML).

`run_tree_html` is a pure function of the run's stored call and wait rows (one
``store.calls(run_id)``); `run_tree` reads them and renders. Each model request is a node with
its tokens; the tool calls and approvals that follow it (those its response asked for) are its
children. Every user string is HTML-escaped. Display it in a notebook with
``IPython.display.HTML(await run_tree(store, run_id))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.markup import badge, esc, fmt_seconds, json_text, short
from agentq.store import CallKind, CallRow, DurableStore

__all__ = ["run_tree", "run_tree_html"]

_MUTED = "color:var(--jp-ui-font-color2,#6b7280)"


def _tokens(usage: dict[str, Any] | None) -> tuple[int, int]:
    if not usage:
        return 0, 0
    i, o = usage.get("input_tokens"), usage.get("output_tokens")
    return (i if isinstance(i, int) else 0), (o if isinstance(o, int) else 0)


def _leaf(row: CallRow) -> str:
    if row.kind is CallKind.WAIT:
        details = row.details or {}
        what = f"approval of <b>{esc(details.get('tool', ''))}</b>"
        if not row.key.startswith("approval:"):
            what = f"wait <b>{esc(row.key)}</b>"
        answer = "" if row.output is None else f" → <code>{json_text(row.output, 80)}</code>"
        return f"{what} {badge(str(row.state))}{answer}"
    label = row.label or {}
    name = label.get("tool") or label.get("kind") or row.key
    duration = "" if row.duration is None else f" {fmt_seconds(row.duration)}"
    rerun = f' <span style="{_MUTED}">ran {row.runs} times</span>' if row.runs > 1 else ""
    out = "" if row.output is None else f" → <code>{json_text(_result(row.output), 80)}</code>"
    return (
        f"tool <b>{esc(name)}</b> <code>{esc(short(row.key, 60))}</code> "
        f"{badge(str(row.state))}{duration}{rerun}{out}"
    )


def _result(output: Any) -> Any:
    return output.get("result", output) if isinstance(output, dict) else output


def run_tree_html(run_id: str, rows: Sequence[CallRow]) -> str:
    """Render an agent run's calls and waits as a nested list.

    Args:
        run_id: The run (its workflow id), the root of the tree.
        rows: Its rows as ``store.calls(run_id)`` returns them (first-recorded order).

    Returns:
        An HTML fragment (``<div data-agentq="agent-tree">``) with the total tokens at the
        root, one node per model request (its tokens and state) and its tool calls and
        approvals below it; rows recorded before the first model request sit at the root.
    """
    total_in = total_out = 0
    nodes: list[tuple[str, list[str]]] = []  # (the node's own HTML, its children's <li>)
    for row in rows:
        label = row.label or {}
        if row.kind is CallKind.CALL and label.get("kind") == "model":
            i, o = _tokens(row.usage)
            total_in, total_out = total_in + i, total_out + o
            model = (row.usage or {}).get("model", "")
            head = (
                f"model request <code>{esc(row.key)}</code> {badge(str(row.state))} "
                f"<span style='{_MUTED}'>{esc(model)} {i} in / {o} out tokens</span>"
            )
            nodes.append((head, []))
        elif not (row.kind is CallKind.CALL and label.get("kind") == "ask"):
            leaf = f"<li data-agentq='agent-leaf'>{_leaf(row)}</li>"
            if nodes:
                nodes[-1][1].append(leaf)
            else:
                nodes.append(("", [leaf]))
    body = "".join(
        f"<li data-agentq='agent-model'>{head}<ul>{''.join(kids)}</ul></li>"
        if head
        else "".join(kids)
        for head, kids in nodes
    )
    return (
        f'<div data-agentq="agent-tree" data-run="{esc(run_id)}" style="font-size:12px">'
        f"<b>{esc(run_id)}</b> <span style='{_MUTED}'>{total_in} in / {total_out} out "
        f"tokens</span><ul>{body}</ul></div>"
    )


async def run_tree(store: DurableStore, run_id: str) -> str:
    """Read `run_id`'s calls from `store` and return `run_tree_html` of them.

    Raises:
        StoreError: The store failed.
    """
    return run_tree_html(run_id, await store.calls(run_id))
