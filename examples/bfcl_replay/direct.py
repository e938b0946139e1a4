"""Run the ground truth directly, in a plain loop: the raw floor the replay is checked against.

For each task: fresh services (see `services.Services.fresh`), every call of every turn in
order, each call's result kept as JSON, then the final snapshot of every service. No queue, no
store, no retries. A call that cannot be made or that raises stops its task: the run records
the error and the states as they were before that call.

Example:
    >>> runs = run_tasks(load_tasks())
    >>> format_mismatches(compare_runs(runs, run_tasks(load_tasks())))
    'no mismatches'
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .dataset import Task
from .errors import CallError, CallParseError, ToolCallError
from .jsontypes import JsonObject, JsonValue
from .services import Services
from .snapshot import canonical_json


@dataclass(frozen=True)
class TaskRun:
    """What running one task's ground truth produced.

    Attributes:
        task_id: The task's id.
        results: The JSON result of each call, per turn (a failed task's list stops short).
        final_states: The snapshot of each involved service at the end, by class name.
        error: Why the task stopped early, or `None` when every call ran.
    """

    task_id: str
    results: tuple[tuple[JsonValue, ...], ...]
    final_states: Mapping[str, JsonObject]
    error: str | None = None

    def to_json(self) -> JsonObject:
        """Return the run as one JSON object (`results`, `final_states`, `error`)."""
        return {
            "task_id": self.task_id,
            "results": [list(turn) for turn in self.results],
            "final_states": dict(self.final_states),
            "error": self.error,
        }


@dataclass(frozen=True)
class Mismatch:
    """One difference between two runs of the same task.

    Attributes:
        task_id: The task's id.
        where: What differs, e.g. `"result of turn 2 call 0"` or `"final state of TradingBot"`.
        expected: The value in the reference run (`None` when absent).
        actual: The value in the run checked (`None` when absent).
    """

    task_id: str
    where: str
    expected: JsonValue
    actual: JsonValue

    def diff(self) -> str:
        """Return a unified diff of the two values, pretty-printed as JSON."""
        diff = difflib.unified_diff(
            _pretty(self.expected).splitlines(),
            _pretty(self.actual).splitlines(),
            "expected",
            "actual",
            lineterm="",
            n=2,
        )
        return "\n".join(diff)


def run_task(task: Task) -> TaskRun:
    """Run one task's ground-truth calls directly on fresh services.

    Returns:
        The results and final states; `error` names the first call that failed, if any.
    """
    services = Services.fresh(task)
    results: list[tuple[JsonValue, ...]] = []
    for turn in range(len(task.call_texts)):
        try:
            calls = task.turn_calls(turn)
        except CallParseError as error:
            return TaskRun(task.id, tuple(results), services.states(), str(error))
        turn_results: list[JsonValue] = []
        results.append(())
        for index, call in enumerate(calls):
            try:
                turn_results.append(services.invoke(call))
            except (CallError, ToolCallError) as error:
                results[-1] = tuple(turn_results)
                states = _states_before(task, results)
                return TaskRun(
                    task.id, tuple(results), states, f"turn {turn} call {index}: {error}"
                )
        results[-1] = tuple(turn_results)
    return TaskRun(task.id, tuple(results), services.states())


def run_tasks(tasks: Iterable[Task]) -> dict[str, TaskRun]:
    """Run every task's ground truth directly, in order.

    Returns:
        The run of each task, by task id, in the tasks' order.
    """
    return {task.id: run_task(task) for task in tasks}


def compare_runs(expected: Mapping[str, TaskRun], actual: Mapping[str, TaskRun]) -> list[Mismatch]:
    """List every difference between two sets of runs.

    Values are compared as canonical JSON text, so a difference in dict key order (which
    changes what `ls` lists, for instance) counts.

    Args:
        expected: The reference runs, by task id (usually `run_tasks`).
        actual: The runs to check, by task id.

    Returns:
        The mismatches, in `expected`'s task order; empty when the runs agree.
    """
    mismatches: list[Mismatch] = []
    for task_id, reference in expected.items():
        run = actual.get(task_id)
        if run is None:
            mismatches.append(Mismatch(task_id, "task missing", "present", None))
            continue
        if run.error != reference.error:
            mismatches.append(Mismatch(task_id, "error", reference.error, run.error))
        for turn in range(max(len(reference.results), len(run.results))):
            left = reference.results[turn] if turn < len(reference.results) else ()
            right = run.results[turn] if turn < len(run.results) else ()
            for index in range(max(len(left), len(right))):
                _check(
                    mismatches,
                    task_id,
                    f"result of turn {turn} call {index}",
                    left[index] if index < len(left) else None,
                    right[index] if index < len(right) else None,
                )
        names = list(reference.final_states) + [
            name for name in run.final_states if name not in reference.final_states
        ]
        for name in names:
            _check(
                mismatches,
                task_id,
                f"final state of {name}",
                reference.final_states.get(name),
                run.final_states.get(name),
            )
    for task_id in actual:
        if task_id not in expected:
            mismatches.append(Mismatch(task_id, "unexpected task", None, "present"))
    return mismatches


def format_mismatches(mismatches: list[Mismatch], limit: int = 10) -> str:
    """Render mismatches for a person: one header per mismatch, then its diff.

    Args:
        mismatches: What `compare_runs` returned.
        limit: Show at most this many in full; the rest are counted.

    Returns:
        `"no mismatches"`, or the report.
    """
    if not mismatches:
        return "no mismatches"
    tasks = len({m.task_id for m in mismatches})
    parts = [f"{len(mismatches)} mismatches in {tasks} tasks"]
    for mismatch in mismatches[:limit]:
        parts.append(f"--- {mismatch.task_id}: {mismatch.where}\n{mismatch.diff()}")
    if len(mismatches) > limit:
        parts.append(f"... and {len(mismatches) - limit} more")
    return "\n".join(parts)


def _states_before(task: Task, results: list[tuple[JsonValue, ...]]) -> dict[str, JsonObject]:
    # The failing call may have changed its service before raising: replay the calls that
    # succeeded on fresh services (deterministic, and free for tasks that do not fail).
    services = Services.fresh(task)
    for turn, turn_results in enumerate(results):
        for call in task.turn_calls(turn)[: len(turn_results)]:
            services.invoke(call)
    return services.states()


def _check(
    mismatches: list[Mismatch], task_id: str, where: str, left: JsonValue, right: JsonValue
) -> None:
    if canonical_json(left) != canonical_json(right):
        mismatches.append(Mismatch(task_id, where, left, right))


def _pretty(value: JsonValue) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False)
