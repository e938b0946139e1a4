"""The replay's exports: its events as a file pandas reads, and a static dashboard page.

Both are built from what the run read of its own workflows (`selection.read_selection`),
never from the whole store, and need nothing beyond the demo's own requirements:

- `export_events`: the run's events, columns `agentq.store.EVENT_COLUMNS`, as Parquet when
  pyarrow is installed (``make test`` installs it; ``pip install pyarrow``), else as CSV with
  the standard library. The fallback is explicit: the summary names the format and why.
  ``at`` is a UTC timestamp (Parquet ``timestamp[us, UTC]``; CSV ISO 8601 with microseconds)
  and the JSON payload columns (``output``, ``input``) are JSON text in both. Read it back
  with ``pd.read_parquet(path)`` or ``pd.read_csv(path, parse_dates=["at"])``. Neither
  pandas nor agentq's notebook extra is needed to write it.
- `write_dashboard`: one self-contained HTML page built with agentq's pure renderers
  (`agentq.widgets.html`, which need neither pandas nor ipywidgets): the summary, the lanes,
  the steps worth a look, the timeline.
"""

from __future__ import annotations

import csv
import datetime
import html
import importlib
import importlib.util
import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentq import EventKind, LaneStats
from agentq.store import EVENT_COLUMNS, StepRow, StepState
from agentq.widgets.html import lanes_html, steps_html, timeline_html
from agentq.widgets.models.timeline import Timeline, WorkflowTrack

from .approval import read_decision
from .plan import WORKFLOW_PREFIX

PARQUET_NEEDS = "pyarrow"
"""The module Parquet output needs; without it the events are written as CSV."""


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def events_format() -> tuple[str, str]:
    """Return the format `export_events` writes here, and why when it is the fallback.

    Returns:
        ``("parquet", "")`` with pyarrow, else ``("csv", "<why and how to get Parquet>")``.
    """
    if _has(PARQUET_NEEDS):
        return "parquet", ""
    return "csv", "CSV: pyarrow is not installed; pip install pyarrow for Parquet"


def export_events(rows: Sequence[tuple[Any, ...]], stem: Path) -> tuple[Path, str]:
    """Write events next to `stem`: ``<stem>-events.parquet``, or ``<stem>-events.csv``.

    The file of the other format from an earlier run of the same stem is removed, so the
    stem never has two disagreeing exports.

    Args:
        rows: Events as `EVENT_COLUMNS` tuples (``store.event_rows(...)``), in order.
        stem: Path prefix, e.g. ``out/bfcl`` gives ``out/bfcl-events.parquet``.

    Returns:
        The file written, and the note of `events_format` ('' for Parquet).
    """
    stem.parent.mkdir(parents=True, exist_ok=True)
    kind, note = events_format()
    path = stem.with_name(f"{stem.name}-events.{kind}")
    other = stem.with_name(f"{stem.name}-events.{'csv' if kind == 'parquet' else 'parquet'}")
    other.unlink(missing_ok=True)
    if kind == "parquet":
        _write_parquet(rows, path)
    else:
        _write_csv(rows, path)
    return path, note


_AT = EVENT_COLUMNS.index("at")
_INTS = frozenset(EVENT_COLUMNS.index(name) for name in ("seq", "step_index", "attempt"))


def _iso(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.isoformat(timespec="microseconds")


def _write_csv(rows: Sequence[tuple[Any, ...]], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(EVENT_COLUMNS)
        for row in rows:
            writer.writerow([_iso(value) if i == _AT else value for i, value in enumerate(row)])


def _write_parquet(rows: Sequence[tuple[Any, ...]], path: Path) -> None:
    pa: Any = importlib.import_module("pyarrow")
    parquet: Any = importlib.import_module("pyarrow.parquet")
    columns: list[Sequence[Any]] = (
        list(zip(*rows, strict=True)) if rows else [() for _ in EVENT_COLUMNS]
    )
    arrays = []
    for index, values in enumerate(columns):
        if index == _AT:
            micros = [round(float(value) * 1_000_000) for value in values]
            arrays.append(pa.array(micros, type=pa.timestamp("us", tz="UTC")))
        elif index in _INTS:
            arrays.append(pa.array(values, type=pa.int64()))
        else:
            arrays.append(pa.array(values, type=pa.string()))
    parquet.write_table(pa.table(arrays, names=list(EVENT_COLUMNS)), path)


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


def write_dashboard(
    path: Path,
    summary: str,
    lanes: Sequence[LaneStats],
    steps: Sequence[StepRow],
    events: Sequence[tuple[Any, ...]],
    *,
    now: float | None = None,
) -> Path:
    """Write a static HTML snapshot of the dashboard.

    Args:
        path: The page to write.
        summary: The text summary, shown at the top.
        lanes: The queue's lanes (``queue.stats().lanes``).
        steps: The run's step rows.
        events: The run's events (`EVENT_COLUMNS` tuples, by sequence number).
        now: Unix seconds for open spans; default the current time.

    Returns:
        `path`.
    """
    now = time.time() if now is None else now
    rows = [r for r in steps if r.workflow_id.startswith(WORKFLOW_PREFIX)]
    counts = Counter(row.state.value for row in rows)
    timeline = Timeline()
    timeline.apply(events)
    sections: list[tuple[str, str]] = [
        ("Summary", f"<pre>{html.escape(summary)}</pre>"),
        ("Lanes", lanes_html(lanes)),
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


def count_events(rows: Sequence[tuple[Any, ...]], after_seq: int = 0) -> Counter[str]:
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
