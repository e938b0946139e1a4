"""The replay's exports: the event log as a file pandas reads, and a static dashboard page.

- `export_events`: agentq's event log (`agentq.frames.events_frame`) as Parquet when pyarrow
  is installed, else CSV; the JSON payload columns (``output``, ``input``) are written as JSON
  text. Without pandas at all it writes the same columns as CSV from the store's rows.
  Read it back with ``pd.read_parquet(path)`` or ``pd.read_csv(path, parse_dates=["at"])``.
- `write_dashboard`: one self-contained HTML page built with agentq's pure renderers
  (`agentq.widgets.html`): the summary, the lanes, the steps worth a look, the timeline.
"""

from __future__ import annotations

import csv
import html
import importlib.util
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentq import DurableStore, EventKind, Queue, StepRow, StepState
from agentq.store import EVENT_COLUMNS
from agentq.widgets._timeline import Timeline, WorkflowTrack
from agentq.widgets.html import lanes_html, steps_html, timeline_html

from .approval import read_decision
from .plan import WORKFLOW_PREFIX

_JSON_COLUMNS = ("output", "input")


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


async def export_events(store: DurableStore, stem: Path) -> tuple[Path, int]:
    """Write the event log next to `stem`: ``<stem>-events.parquet`` (or ``.csv``).

    Args:
        store: The store whose log is exported.
        stem: Path prefix, e.g. ``out/bfcl`` gives ``out/bfcl-events.parquet``.

    Returns:
        The file written and its number of rows (events).
    """
    stem.parent.mkdir(parents=True, exist_ok=True)
    if not _has("pandas"):
        rows = await store.event_rows()
        path = stem.with_name(f"{stem.name}-events.csv")
        with path.open("w", newline="", encoding="utf-8") as file:
            writer = csv.writer(file)
            writer.writerow(EVENT_COLUMNS)
            writer.writerows(rows)
        return path, len(rows)
    from agentq.frames import events_frame

    frame = await events_frame(store)
    for column in _JSON_COLUMNS:
        frame[column] = [None if v is None else json.dumps(v) for v in frame[column]]
    if _has("pyarrow"):
        path = stem.with_name(f"{stem.name}-events.parquet")
        frame.to_parquet(path, index=False)
    else:
        path = stem.with_name(f"{stem.name}-events.csv")
        frame.to_csv(path, index=False)
    return path, len(frame)


def _interesting(rows: list[StepRow]) -> list[StepRow]:
    # Failed and waiting steps first, then steps that needed more than one attempt or an
    # approval, then the rest, each group in workflow order.
    def rank(row: StepRow) -> int:
        if row.state in (StepState.FAILED, StepState.WAITING, StepState.LEASED):
            return 0
        if row.attempt > 1 or row.resumed:
            return 1
        return 2

    return sorted(rows, key=rank)


def _tracks(timeline: Timeline, limit: int) -> list[WorkflowTrack]:
    # The workflows with something to see (a failure, a wait, a lost worker, a retry), then
    # the most recent ones.
    every = timeline.recent(len(timeline))

    def notable(track: WorkflowTrack) -> bool:
        return track.state != "completed" or any(
            span.outcome != "completed" for step in track.steps.values() for span in step.spans
        )

    chosen = [track for track in every if notable(track)][:limit]
    chosen += [track for track in every if track not in chosen][: limit - len(chosen)]
    return chosen


async def write_dashboard(
    store: DurableStore, queue: Queue, path: Path, summary: str, *, now: float | None = None
) -> Path:
    """Write a static HTML snapshot of the dashboard.

    Args:
        store: The replay's store.
        queue: The replay's queue (its lanes' counters).
        path: The page to write.
        summary: The text summary, shown at the top.
        now: Unix seconds for open spans; default the current time.

    Returns:
        `path`.
    """
    now = time.time() if now is None else now
    rows = [r for r in await store.step_rows() if r.workflow_id.startswith(WORKFLOW_PREFIX)]
    counts = Counter(row.state.value for row in rows)
    timeline = Timeline()
    timeline.apply(await store.event_rows())
    sections: list[tuple[str, str]] = [
        ("Summary", f"<pre>{html.escape(summary)}</pre>"),
        ("Lanes", lanes_html(queue.stats().lanes)),
        (
            "Steps (failed, waiting and retried first)",
            steps_html(_interesting(rows), now=now, limit=80, counts=dict(counts)),
        ),
        ("Timeline", timeline_html(_tracks(timeline, 16), now=now, limit=16, total=len(timeline))),
    ]
    body = "".join(
        f"<section><h2>{html.escape(title)}</h2>{content}</section>" for title, content in sections
    )
    page = (
        '<!doctype html><html><head><meta charset="utf-8">'
        "<title>agentq · BFCL replay dashboard</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px}"
        "h2{font-size:15px;margin:22px 0 6px}pre{background:#f9fafb;padding:10px;"
        "border:1px solid #e5e7eb;font-size:12px;white-space:pre-wrap}</style></head>"
        f"<body><h1>agentq · BFCL multi-turn replay</h1>{body}</body></html>"
    )
    _write(path, page)
    return path


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def count_events(rows: list[tuple[Any, ...]], after_seq: int = 0) -> Counter[str]:
    """Count replay events by kind (only those with ``seq > after_seq``).

    Resumes are also counted by decision: ``approved`` and ``rejected`` (see
    `approval.read_decision`).
    """
    kind = EVENT_COLUMNS.index("kind")
    workflow = EVENT_COLUMNS.index("workflow_id")
    given = EVENT_COLUMNS.index("input")
    counts: Counter[str] = Counter()
    for row in rows:
        if row[0] <= after_seq or not str(row[workflow]).startswith(WORKFLOW_PREFIX):
            continue
        counts[str(row[kind])] += 1
        if row[kind] == EventKind.STEP_RESUMED:
            decision = read_decision(None if row[given] is None else json.loads(row[given]))
            counts["approved" if decision.approved else "rejected"] += 1
    return counts
