"""`export_html`: the dashboard's views of a store as one static HTML file.

The page is made of the same pure renderers the live widgets show (`agentq.widgets.html`):
the waiting steps (`approval_html`, without buttons: a static page cannot resume), the step
table with its durable call counts (`steps_html`), the call totals (`call_totals_html`), each
recent workflow's run tree (`tree_html`; an agent run's conversation above it,
`conversation_html`) and the timeline (`timeline_html`). There are no
lanes: a store has no queue. Needs no ipywidgets and no pandas, so the command line's
``agentq export --html`` works with the ``cli`` extra only.

Offline: the file loads nothing (no script, no stylesheet, no image, no font: inline styles
only) and needs no kernel. Each tree node is a ``<details>`` that a click expands; the detail
view of each node (the live dashboard's: input, output, error and traceback, attempts, usage)
is folded inside it. Size is bounded: the trees of the latest `workflows` workflows, at most
`TREE_CHILDREN` children per node (the latest) and `nodes` nodes in all; each cut is counted
on a "… n more" line, and the page says so at the top of the Runs section.

Safe to write: `export_html` refuses a path that is the store's own file (or its ``-wal``,
``-shm`` or ``-journal`` file), compared by resolved path and by `os.path.samefile`, before
reading anything (`check_export_path`), and writes the page to a temporary file beside the
target that replaces it in one step (`os.replace`): a failed export leaves no half-written file
and the earlier one intact.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

from agentq.markup import FONT, MUTED, check_count, clock_text, esc_text, more_html
from agentq.store import DurableStore, StepState
from agentq.widgets.html.calls import call_totals_html
from agentq.widgets.html.conversation import conversation_html
from agentq.widgets.html.detail import call_detail_html, step_detail_html, workflow_detail_html
from agentq.widgets.html.results import approval_html
from agentq.widgets.html.tables import steps_html
from agentq.widgets.html.timeline import timeline_html
from agentq.widgets.html.tree import TREE_CHILDREN, tree_html
from agentq.widgets.models.calls import CallTally
from agentq.widgets.models.conversation import is_agent_run
from agentq.widgets.models.detail import DetailSnapshot, load_detail, shown_step
from agentq.widgets.models.folding import fold_conversation
from agentq.widgets.models.prices import Price, PriceTable, price_table
from agentq.widgets.models.runs import lineage_in
from agentq.widgets.models.timeline import Timeline
from agentq.widgets.models.tree import TreeNode, build_tree

__all__ = ["TREE_NODES", "check_export_path", "dashboard_html", "export_html"]

TREE_NODES = 1_000
"""Tree nodes (each with its detail view) in one exported file, over all its trees."""


_LAST_SECOND = 253_402_300_799  # 9999-12-31 23:59:59 UTC: the last instant a page can show


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _check_page_args(now: object, limit: object, workflows: object, nodes: object,
                     title: object) -> None:
    """Raise the error naming the first bad argument of `dashboard_html`."""
    if isinstance(now, bool) or not isinstance(now, int | float):
        raise TypeError(f"now must be Unix seconds (an int or float), got {now!r}")
    if not (math.isfinite(now) and 0 <= now <= _LAST_SECOND):
        raise ValueError(f"now must be finite Unix seconds in 0..{_LAST_SECOND}, got {now!r}")
    for value, name in ((limit, "limit"), (workflows, "workflows"), (nodes, "nodes")):
        check_count(value, name)
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, got {type(title).__name__}: {title!r:.80}")


def check_export_path(store: DurableStore, path: object) -> Path:
    """Return `path` as a `Path` if an export may write it; refuse the store's own files.

    A store kept in a file (`SqliteStore`: its ``path``) is compared with `path` by resolved
    path and, when both exist, by `os.path.samefile` (a link, another spelling); its ``-wal``,
    ``-shm`` and ``-journal`` files are refused too.

    Raises:
        TypeError: `path` is not a str or a path-like object.
        ValueError: `path` is empty, or it is one of the store's files (the message names
            both paths).
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or a path, got {type(path).__name__}: {path!r:.80}")
    text = os.fspath(path)
    if not isinstance(text, str) or not text:
        raise ValueError(f"path must name a file, got {text!r}")
    out = Path(text)
    db = getattr(store, "path", None)
    if isinstance(db, str) and db and db != ":memory:" and not db.startswith("file:"):
        target = out.resolve()
        for suffix in ("", "-wal", "-shm", "-journal"):
            own = Path(db + suffix)
            same = own.resolve() == target
            if not same and out.exists() and own.exists():
                same = os.path.samefile(out, own)
            if same:
                raise ValueError(
                    f"refusing to write the export over the store: {text!r} is the store's "
                    f"file {str(own)!r}"
                )
    return out


def _write_atomically(out: Path, page: str) -> None:
    """Write `page` to a temporary file beside `out`, then replace `out` with it."""
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(page)
        try:
            os.chmod(tmp, out.stat().st_mode & 0o777)  # keep a replaced file's mode
        except FileNotFoundError:
            os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _section(title: str, body: str) -> str:
    return (
        f'<section style="margin:14px 0"><h2 style="{FONT};font-size:15px;margin:0 0 6px">'
        f"{title}</h2>{body}</section>"
    )


def _node_detail(snap: DetailSnapshot, now: float) -> Callable[[TreeNode], str]:
    def detail(node: TreeNode) -> str:
        kind, ref = node.item
        if kind == "step":
            return step_detail_html(snap, ref, now=now)
        if kind == "call":
            return call_detail_html(snap, ref, now=now)
        return workflow_detail_html(snap, now=now)

    return detail


def _conversation(snap: DetailSnapshot, prices: PriceTable) -> str:
    conv = fold_conversation(snap.workflow, snap.steps, snap.calls, prices=prices,
                             forked_from=lineage_in(snap.events))
    return (f'<details open data-agentq="export-conversation" style="margin:4px 0">'
            f'<summary style="cursor:pointer;{MUTED}">conversation of {esc_text(conv.run_id)}'
            f"</summary>{conversation_html(conv)}</details>")


async def _trees_html(store: DurableStore, *, now: float, workflows: int, nodes: int,
                      prices: PriceTable) -> str:
    """The run trees of the latest `workflows` workflows, `nodes` nodes in all, with details
    (an agent run's conversation above its tree)."""
    rows = sorted(await store.workflows(), key=lambda r: -r.last_seq)
    parts: list[str] = []
    left, drawn = nodes, 0
    for row in rows[:workflows]:
        if left <= 0:
            break
        snap = await load_detail(store, row.workflow_id)
        if snap is None:  # deleted meanwhile
            continue
        if is_agent_run(snap.workflow):  # an agent run: its conversation, then its tree
            parts.append(_conversation(snap, prices))
        root = build_tree(snap.workflow, snap.steps, snap.calls)
        tree = tree_html(root, open_nodes=("w",), nodes=left, detail=_node_detail(snap, now))
        left -= tree.count('data-agentq="tree-node"')
        drawn += 1
        parts.append(f'<div style="margin:4px 0">{tree}</div>')
    parts.append(more_html(len(rows) - drawn, "workflows"))
    caps = (
        f'<div data-agentq="tree-caps" style="{MUTED};margin-bottom:4px">Trees of the latest '
        f"{drawn:,} of {_plural(len(rows), 'workflow')} (at most {workflows:,}); at most "
        f"{TREE_CHILDREN} children per node (running, waiting and failed ones first, then the "
        f"latest) and {_plural(nodes, 'node')} in all. Click a node to expand it; "
        "<i>detail</i> opens its detail view.</div>"
    )
    return caps + "".join(parts)


async def dashboard_html(
    store: DurableStore,
    *,
    now: float,
    limit: int = 500,
    workflows: int = 50,
    title: str = "",
    nodes: int = TREE_NODES,
    prices: Mapping[str, Price | tuple[float, float]] | None = None,
) -> str:
    """Render a store's dashboard views as one self-contained HTML page.

    Reads the whole event log and the ``steps`` projection once, and each tree's workflow
    (`load_detail`: four reads) once.

    Args:
        store: Any `DurableStore`.
        now: Unix seconds: the right end of the timeline and of unfinished durations.
        limit: Maximum step rows in the table (the most recently active workflows first).
        workflows: Maximum workflows drawn in the timeline and as trees.
        title: Shown at the top of the page (escaped), e.g. the store's path.
        nodes: Maximum tree nodes (each with its detail view) over all the trees.
        prices: The price table of the agent runs' conversations (as `RunView` takes it).

    An agent run's tree has its conversation above it (`conversation_html`: the answer, the
    prompt, each request's text, tokens, cost and latency, the tool cards), as the live
    `RunView` draws it, without its buttons.

    Returns:
        The page (``<!DOCTYPE html>`` …), every stored string escaped, no script, nothing
        fetched from the network.

    Raises:
        StoreError: The store failed.
        TypeError: `now` is not a number, `limit`, `workflows` or `nodes` not an int, or
            `title` not a str (the message names the argument and its value).
        ValueError: `now` is not finite or outside years 1970..9999, or `limit`,
            `workflows` or `nodes` is less than 1 (the message names it).
    """
    _check_page_args(now, limit, workflows, nodes, title)
    events = await store.event_rows()
    steps = await store.step_rows()
    tally = CallTally()
    tally.apply(events)
    timeline = Timeline()
    timeline.apply(events)
    # the most recently active workflows first, as in the live step table
    recency = {row[2]: row[0] for row in events}
    ordered = sorted(steps, key=lambda r: (-recency.get(r.workflow_id, 0), r.step_index))
    rows = {row.workflow_id: row for row in await store.workflows()}
    counts = Counter(shown_step(row, rows.get(row.workflow_id)) for row in steps)
    waiting = [row for row in steps if row.state is StepState.WAITING]
    approvals = "".join(approval_html(row) for row in waiting) or (
        f'<div style="{FONT};{MUTED}">no step waits for input</div>'
    )
    body = "".join(
        [
            _section(f"Waiting for input ({len(waiting)})", approvals),
            _section("Durable calls", call_totals_html(tally.totals)),
            _section("Runs", await _trees_html(store, now=now, workflows=workflows,
                                               nodes=nodes, prices=price_table(prices))),
            _section(
                "Steps",
                steps_html(ordered[:limit], now=now, limit=limit, total=len(ordered),
                           counts=counts, calls=tally.steps, workflows=rows),
            ),
            _section(
                "Timeline",
                timeline_html(timeline.recent(workflows), now=now, limit=workflows,
                              total=len(timeline)),
            ),
        ]
    )
    heading = html.escape(title or "agentq")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{heading} · agentq</title></head>"
        f'<body style="{FONT};margin:16px">'
        f'<h1 style="font-size:18px;margin:0">{esc_text(title or "agentq")}</h1>'
        f'<div style="{MUTED}">{len(recency)} workflow(s), {len(events)} event(s); '
        f"exported {clock_text(now)}</div>{body}</body></html>\n"
    )


async def export_html(
    store: DurableStore,
    path: str | Path,
    *,
    now: float,
    limit: int = 500,
    workflows: int = 50,
    title: str = "",
    nodes: int = TREE_NODES,
    prices: Mapping[str, Price | tuple[float, float]] | None = None,
) -> Path:
    """Write `dashboard_html` of `store` to `path` (UTF-8), replacing the file atomically.

    The path is checked first (`check_export_path`: never the store's own file); the page is
    written to a temporary file in the same directory, then moved over `path` in one step, so
    a failed export leaves no half-written file. A new file gets mode 0644; a replaced one
    keeps its mode.

    Args:
        store: Any `DurableStore`.
        path: The HTML file to write; its directory must exist.
        now: Unix seconds (see `dashboard_html`).
        limit: Maximum step rows.
        workflows: Maximum workflows in the timeline and as trees.
        title: The page's heading.
        nodes: Maximum tree nodes over all the trees.
        prices: The price table of the agent runs' conversations.

    Returns:
        The path written.

    Raises:
        StoreError: The store failed.
        OSError: The file cannot be written (a directory, no such directory, no permission).
        TypeError: `path` is not a path, or a bad argument type (see `dashboard_html`).
        ValueError: `path` is empty or is one of the store's files (the message names both),
            or a bad `now`, `limit`, `workflows` or `nodes`.

    Example:
        >>> await export_html(store, "dashboard.html", now=time.time(), title="orders.db")
    """
    out = check_export_path(store, path)
    page = await dashboard_html(store, now=now, limit=limit, workflows=workflows, title=title,
                                nodes=nodes, prices=prices)
    check_export_path(store, out)  # again: a link may have appeared meanwhile
    await asyncio.to_thread(_write_atomically, out, page)
    return out
