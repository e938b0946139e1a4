"""The ground truth run directly: deterministic, complete, and comparable."""

from __future__ import annotations

import dataclasses
import json

from examples.bfcl_replay.dataset import Task
from examples.bfcl_replay.direct import (
    Mismatch,
    TaskRun,
    compare_runs,
    format_mismatches,
    run_task,
    run_tasks,
)
from examples.bfcl_replay.jsontypes import JsonObject, JsonValue
from examples.bfcl_replay.services import Services
from examples.bfcl_replay.snapshot import canonical_json


def test_every_task_runs_to_the_end(
    bfcl_tasks: list[Task], bfcl_direct: dict[str, TaskRun]
) -> None:
    assert list(bfcl_direct) == [task.id for task in bfcl_tasks]
    assert [run.error for run in bfcl_direct.values() if run.error] == []
    assert sum(len(turn) for run in bfcl_direct.values() for turn in run.results) == 1142
    for task in bfcl_tasks:
        run = bfcl_direct[task.id]
        assert [len(turn) for turn in run.results] == [len(turn) for turn in task.call_texts]
        assert list(run.final_states) == list(task.involved_classes)
        json.dumps(run.to_json(), allow_nan=False)


def test_two_runs_are_identical(bfcl_tasks: list[Task], bfcl_direct: dict[str, TaskRun]) -> None:
    again = run_tasks(bfcl_tasks)
    assert compare_runs(bfcl_direct, again) == []
    assert canonical_json([r.to_json() for r in again.values()]) == canonical_json(
        [r.to_json() for r in bfcl_direct.values()]
    )


def test_results_are_the_services_answers(
    bfcl_tasks: list[Task], bfcl_direct: dict[str, TaskRun]
) -> None:
    first = bfcl_direct["multi_turn_base_0"]
    assert first.results[0] == (
        {"current_working_directory": "document"},
        None,
        {"result": "'final_report.pdf' moved to 'temp/final_report.pdf'"},
    )
    assert bfcl_direct["multi_turn_base_57"].results[1] == ({"result": "2.7993"},)


def test_compare_reports_each_difference_with_a_readable_diff(
    bfcl_direct: dict[str, TaskRun],
) -> None:
    reference = {key: bfcl_direct[key] for key in ("multi_turn_base_0", "multi_turn_base_1")}
    first = reference["multi_turn_base_0"]
    states = json.loads(json.dumps(first.final_states))
    states["TwitterAPI"]["tweet_counter"] = 99
    turn0: tuple[JsonValue, ...] = (
        {"current_working_directory": "elsewhere"},
        *first.results[0][1:],
    )
    changed = dataclasses.replace(first, results=(turn0, *first.results[1:]), final_states=states)
    mismatches = compare_runs(reference, {"multi_turn_base_0": changed, "extra": changed})
    assert [(m.task_id, m.where) for m in mismatches] == [
        ("multi_turn_base_0", "result of turn 0 call 0"),
        ("multi_turn_base_0", "final state of TwitterAPI"),
        ("multi_turn_base_1", "task missing"),
        ("extra", "unexpected task"),
    ]
    report = format_mismatches(mismatches, limit=2)
    assert report.startswith("4 mismatches in 3 tasks\n--- multi_turn_base_0: result of turn 0")
    assert '- "current_working_directory": "document"' in report
    assert '+ "current_working_directory": "elsewhere"' in report
    assert '+ "tweet_counter": 99' in report
    assert report.endswith("... and 2 more")


def test_key_order_counts_as_a_difference() -> None:
    a = TaskRun("t", (({"x": 1, "y": 2},),), {})
    b = TaskRun("t", (({"y": 2, "x": 1},),), {})
    assert compare_runs({"t": a}, {"t": b}) == [
        Mismatch("t", "result of turn 0 call 0", {"x": 1, "y": 2}, {"y": 2, "x": 1})
    ]


def test_a_failing_call_stops_its_task_with_the_states_before_it() -> None:
    config: JsonObject = {"TradingBot": {"authenticated": True}}
    task = Task(
        "bad",
        ("buy", "sell"),
        config,
        ("TradingBot",),
        (
            ("get_watchlist()", "add_to_watchlist(stock='AAPL')"),
            ("place_order(order_type='Buy', symbol='AAPL', price='cheap', amount=5)", "ls()"),
        ),
    )
    run = run_task(task)
    assert run.error is not None
    assert run.error.startswith(
        "turn 1 call 0: place_order(order_type='Buy', symbol='AAPL', price='cheap', amount=5)"
        " raised TypeError"
    )
    assert run.results[0][1] == {"watchlist": ["NVDA", "AAPL"]}
    assert run.results[1] == ()
    expected = Services.fresh(task)
    for call in task.turn_calls(0):
        expected.invoke(call)
    assert canonical_json(run.final_states) == canonical_json(expected.states())


def test_a_malformed_call_stops_its_task() -> None:
    task = Task("bad", ("a", "b"), {}, ("MathAPI",), (("add(a=1, b=2)",), ("add(a=1,",)))
    run = run_task(task)
    assert run.results == (({"result": 3},),)
    assert run.error is not None
    assert run.error.startswith("task bad turn 1 call 0: cannot parse 'add(a=1,'")
