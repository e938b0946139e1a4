"""Shared fixtures of the BFCL replay tests: the tasks and their direct run, built once."""

from __future__ import annotations

import pytest

from examples.bfcl_replay.dataset import Task, categories, load_category, load_tasks
from examples.bfcl_replay.direct import TaskRun, run_tasks


@pytest.fixture(scope="session")
def bfcl_tasks() -> list[Task]:
    """The 200 multi-turn base tasks (read-only)."""
    return load_tasks()


@pytest.fixture(scope="session")
def bfcl_direct(bfcl_tasks: list[Task]) -> dict[str, TaskRun]:
    """The ground truth of every task run directly (read-only)."""
    return run_tasks(bfcl_tasks)


@pytest.fixture(scope="session")
def bfcl_categories() -> dict[str, list[Task]]:
    """The tasks of every multi-turn category bfcl-eval ships, by category (read-only)."""
    return {name: load_category(name) for name in categories()}


@pytest.fixture(scope="session")
def bfcl_category_direct(bfcl_categories: dict[str, list[Task]]) -> dict[str, TaskRun]:
    """The ground truth of every task of every category run directly, by task id."""
    return run_tasks(task for tasks in bfcl_categories.values() for task in tasks)
