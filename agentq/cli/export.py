"""``agentq export``: the frames as Parquet files, the dashboard as one static HTML file.

Parquet: ``events.parquet``, ``steps.parquet`` and ``calls.parquet`` (the DataFrames of
`agentq.frames`, same columns); the JSON payload columns (``output``, ``input``, ``label``,
``usage``, ``details``, ``error``), which hold a different Python type from row to row, are
written as JSON text, so any Parquet reader gets one string column. Needs pandas and pyarrow
(``pip install 'agentq[notebook]' pyarrow``). HTML: `agentq.widgets.export_html`, which needs
neither.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agentq.cli.target import Refused
from agentq.errors import MissingExtraError
from agentq.extras import require
from agentq.frames import calls_frame, events_frame, steps_frame
from agentq.store import DurableStore
from agentq.widgets import check_export_path, export_html

__all__ = ["check_html_target", "export_parquet", "export_static_html"]


def _json_text(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, default=str)


async def export_parquet(store: DurableStore, directory: Path) -> list[Path]:
    """Write the events, steps and calls frames of `store` into `directory` (made if missing).

    Returns:
        The three files written.

    Raises:
        Refused: pandas or pyarrow is missing (naming what to install), or the directory
            cannot be made or written.
    """
    try:
        require("pyarrow", "notebook")
        frames = {
            "events": await events_frame(store),
            "steps": await steps_frame(store),
            "calls": await calls_frame(store),
        }
    except MissingExtraError as exc:
        raise Refused(f"{exc} (Parquet export needs pandas and pyarrow)") from exc
    try:
        return await asyncio.to_thread(_write_parquet, frames, directory)
    except OSError as exc:
        raise Refused(f"cannot write Parquet files into {str(directory)!r}: {exc}") from exc


def _write_parquet(frames: dict[str, Any], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in frames.items():
        for column in frame.columns:
            if frame[column].dtype == object:
                frame[column] = frame[column].map(_json_text).astype("string")
        path = directory / f"{name}.parquet"
        frame.to_parquet(path, index=False)
        written.append(path)
    return written


def check_html_target(store: DurableStore, path: Path) -> None:
    """Refuse an HTML target that is the store's own file (`check_export_path`).

    Raises:
        Refused: `path` is empty or one of the store's files (both paths named).
    """
    try:
        check_export_path(store, path)
    except ValueError as exc:
        raise Refused(str(exc)) from exc


async def export_static_html(
    store: DurableStore, path: Path, now: float, title: str, *, workflows: int = 50,
    nodes: int = 1000,
) -> Path:
    """Write the static dashboard page; see `agentq.widgets.export_html`.

    Args:
        store: The store exported.
        path: The HTML file.
        now: Unix seconds ("now" of the page).
        title: The page's heading.
        workflows: The latest workflows drawn as trees and in the timeline.
        nodes: Tree nodes (each with its detail view) in the file, at most.

    Raises:
        Refused: The file cannot be written, or it is the store's own file.
    """
    try:
        return await export_html(store, path, now=now, title=title, workflows=workflows,
                                 nodes=nodes)
    except ValueError as exc:  # the store's own file, or an empty path
        raise Refused(str(exc)) from exc
    except OSError as exc:
        raise Refused(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
