"""Snapshots of service state: JSON, deterministic, and faithful on restore."""

from __future__ import annotations

import collections
import datetime
import decimal
import json
import math
import random

import pytest

from examples.bfcl_replay.dataset import Task, parse_call
from examples.bfcl_replay.direct import TaskRun, compare_runs, format_mismatches
from examples.bfcl_replay.errors import SnapshotError
from examples.bfcl_replay.jsontypes import JsonObject, JsonValue
from examples.bfcl_replay.services import SERVICE_MODULES, Services, service_class
from examples.bfcl_replay.snapshot import canonical_json, restore, snapshot, to_json_result


def _roundtrip(services: Services) -> Services:
    states: dict[str, JsonObject] = json.loads(json.dumps(services.states()))
    return Services({name: restore(service_class(name), state) for name, state in states.items()})


def test_all_eight_classes_snapshot_to_strict_json_and_restore_identically(
    bfcl_tasks: list[Task], bfcl_direct: dict[str, TaskRun]
) -> None:
    seen: set[str] = set()
    for task in bfcl_tasks:
        states = bfcl_direct[task.id].final_states
        text = json.dumps(states, allow_nan=False)
        restored: dict[str, object] = {
            name: restore(service_class(name), state) for name, state in states.items()
        }
        again = {name: snapshot(instance) for name, instance in restored.items()}
        assert json.dumps(again, allow_nan=False) == text, task.id
        seen.update(states.keys())
    assert seen == set(SERVICE_MODULES)


def test_restoring_after_every_call_behaves_exactly_like_the_direct_run(
    bfcl_tasks: list[Task], bfcl_direct: dict[str, TaskRun]
) -> None:
    runs: dict[str, TaskRun] = {}
    for task in bfcl_tasks:
        services = Services.fresh(task)
        results: list[tuple[JsonValue, ...]] = []
        for turn in task.calls:
            turn_results: list[JsonValue] = []
            for call in turn:
                services = _roundtrip(services)
                turn_results.append(services.invoke(call))
            results.append(tuple(turn_results))
        runs[task.id] = TaskRun(task.id, tuple(results), _roundtrip(services).states())
    assert format_mismatches(compare_runs(bfcl_direct, runs)) == "no mismatches"


FILE_SYSTEM: JsonObject = {
    "GorillaFileSystem": {
        "root": {
            "home": {
                "type": "directory",
                "contents": {
                    "a": {
                        "type": "directory",
                        "contents": {
                            "b": {"type": "directory", "contents": {}},
                            "f.txt": {"type": "file", "content": "one"},
                        },
                    },
                    "dest": {"type": "directory", "contents": {}},
                },
            }
        }
    }
}

# mv of a directory shares its contents dict with the detached original, still the children's
# parent; cp of a directory shares the children themselves.
ALIASING = [
    "cp(source='a', destination='copy')",
    "mv(source='a', destination='moved')",
    "cd(folder='moved')",
    "cd(folder='b')",
]
PROBES = [
    "pwd()",
    "cd(folder='..')",
    "pwd()",
    "ls()",
    "echo(content='two', file_name='f.txt')",
    "cd(folder='..')",
    "pwd()",
    "ls()",
    "cd(folder='copy')",
    "cat(file_name='f.txt')",
    "mkdir(dir_name='new')",
    "cd(folder='..')",
    "cd(folder='moved')",
    "ls()",
]


def test_shared_references_of_the_file_system_survive_a_restore() -> None:
    task = Task("fs", ("go",), FILE_SYSTEM, ("GorillaFileSystem",), ((),))
    original = Services.fresh(task)
    for text in ALIASING:
        original.invoke(parse_call(text))
    state = original.state("GorillaFileSystem")
    assert '"$ref"' in canonical_json(state)
    restored = Services.for_task(task, {"GorillaFileSystem": json.loads(json.dumps(state))})
    for text in PROBES:
        call = parse_call(text)
        assert restored.invoke(call) == original.invoke(call), text
    assert canonical_json(restored.states()) == canonical_json(original.states())


def test_the_seeded_generator_continues_where_it_stopped() -> None:
    task = Task(
        "car", ("go",), {"VehicleControlAPI": {"random_seed": 7}}, ("VehicleControlAPI",), ((),)
    )
    speed = parse_call("get_current_speed()")
    original = Services.fresh(task)
    original.invoke(speed)
    restored = _roundtrip(original)
    assert [restored.invoke(speed) for _ in range(3)] == [original.invoke(speed) for _ in range(3)]


def test_snapshot_encodes_python_values_json_lacks() -> None:
    class Holder:
        pass

    holder = Holder()
    shared = [1]
    vars(holder).update(
        {
            "int_keys": {1: "a", "$b": shared},
            "tuple": (1, "x"),
            "set": {"b", "a", "c"},
            "frozen": frozenset({3, 1}),
            "nan": math.nan,
            "when": datetime.datetime(2024, 9, 1, 10, 30),
            "alias": shared,
            "rng": random.Random(3),
        }
    )
    state = snapshot(holder)
    assert state["int_keys"] == {"$dict": [[1, "a"], ["$b", [1]]]}
    assert state["set"] == {"$set": ["a", "b", "c"]}
    assert state["alias"] == {"$ref": "/int_keys/$dict/1/1"}
    restored: Holder = restore(Holder, json.loads(canonical_json(state)))
    assert restored.int_keys == {1: "a", "$b": [1]}  # type: ignore[attr-defined]
    assert restored.alias is restored.int_keys["$b"]  # type: ignore[attr-defined]
    assert restored.tuple == (1, "x")  # type: ignore[attr-defined]
    assert restored.set == {"a", "b", "c"}  # type: ignore[attr-defined]
    assert restored.frozen == frozenset({1, 3})  # type: ignore[attr-defined]
    assert math.isnan(restored.nan)  # type: ignore[attr-defined]
    assert restored.when == datetime.datetime(2024, 9, 1, 10, 30)  # type: ignore[attr-defined]
    assert canonical_json(snapshot(restored)) == canonical_json(state)
    assert restored.rng.random() == random.Random(3).random()  # type: ignore[attr-defined]


def test_an_unknown_type_in_a_state_is_refused_with_its_path() -> None:
    class Holder:
        pass

    holder = Holder()
    vars(holder)["deep"] = {"list": [decimal.Decimal(1)]}
    with pytest.raises(SnapshotError, match=r"cannot snapshot /deep/list/0: unknown type Decimal"):
        snapshot(holder)
    vars(holder)["deep"] = collections.OrderedDict()
    with pytest.raises(SnapshotError, match="unknown type OrderedDict"):
        snapshot(holder)


@pytest.mark.parametrize(
    "state",
    [
        {"x": {"$ref": "/nowhere"}},
        {"x": {"$object": "Popen", "state": {}}},
        {"x": {"$random": [3]}},
        {"x": {"$what": 1}},
    ],
)
def test_a_corrupt_snapshot_raises_snapshot_error(state: JsonObject) -> None:
    class Holder:
        pass

    with pytest.raises(SnapshotError, match="corrupt snapshot at /x"):
        restore(Holder, state)


def test_results_are_converted_to_plain_json_deterministically() -> None:
    class Thing:
        pass

    value = {1: (1.5, None), None: {"b", "a"}, "nan": math.inf, "obj": Thing()}
    assert to_json_result(value) == {
        "1": [1.5, None],
        "null": ["a", "b"],
        "nan": "inf",
        "obj": f"<{Thing.__module__}.{Thing.__qualname__} object>",
    }
    loop: list[object] = []
    loop.append(loop)
    assert to_json_result(loop) == ["<cycle>"]
