"""Shared fixtures of the BFCL replay tests: the tasks and their direct run, built once."""

from __future__ import annotations

import pytest

from examples.bfcl_replay.dataset import Task, load_tasks
from examples.bfcl_replay.direct import TaskRun, run_tasks


@pytest.fixture(scope="session")
def bfcl_tasks() -> list[Task]:
    """The 200 multi-turn base tasks (read-only)."""
    return load_tasks()


@pytest.fixture(scope="session")
def bfcl_direct(bfcl_tasks: list[Task]) -> dict[str, TaskRun]:
    """The ground truth of every task run directly (read-only)."""
    return run_tasks(bfcl_tasks)
