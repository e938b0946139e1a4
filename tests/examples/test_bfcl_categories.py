"""Every multi-turn category bfcl-eval ships, with services built as BFCL builds them.

The direct run (`direct.run_tasks`) is the reference every replay is checked against, so it is
itself checked against BFCL's own executor, `execute_multi_turn_func_call`, called the way
BFCL's multi-turn checker calls it, on every task of every category.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest

from examples.bfcl_replay.dataset import Task, categories
from examples.bfcl_replay.direct import TaskRun
from examples.bfcl_replay.jsontypes import JsonValue
from examples.bfcl_replay.services import SERVICE_MODULES, STATELESS_CLASSES, Services, kind_of
from examples.bfcl_replay.snapshot import canonical_json, snapshot

# What the data of bfcl-eval 2026.3.23 holds, per category: tasks, turns, turns without a
# call, calls by kind, long-context tasks, functions held back (miss_func's missed_function).
EXPECTED = {
    "base": (200, 734, 3, {"read": 480, "write": 442, "approval": 220}, 0, 0),
    "miss_func": (200, 934, 203, {"read": 478, "write": 442, "approval": 220}, 0, 222),
    "miss_param": (200, 934, 203, {"read": 478, "write": 442, "approval": 220}, 0, 0),
    "long_context": (200, 734, 3, {"read": 481, "write": 502, "approval": 220}, 200, 0),
}


def _bfcl_long_context(task_id: str) -> bool:
    # BFCL's own rule, copied from its multi-turn checker on purpose (not imported from the
    # code under test): test_category = id.rsplit("_", 1)[0], then this expression.
    test_category = task_id.rsplit("_", 1)[0]
    return "long_context" in test_category or "composite" in test_category


def test_the_categories_are_the_multi_turn_files_bfcl_ships_and_scores() -> None:
    from bfcl_eval.constants.category_mapping import MULTI_TURN_CATEGORY

    assert list(categories()) == ["base", "miss_func", "miss_param", "long_context"]
    assert [f"multi_turn_{name}" for name in categories()] == MULTI_TURN_CATEGORY


def test_every_category_loads_with_its_shape(bfcl_categories: dict[str, list[Task]]) -> None:
    assert list(bfcl_categories) == list(EXPECTED)
    for name, tasks in bfcl_categories.items():
        kinds = Counter(
            kind_of(call.function).value for task in tasks for turn in task.calls for call in turn
        )
        shape = (
            len(tasks),
            sum(len(task.turns) for task in tasks),
            sum(1 for task in tasks for texts in task.call_texts if not texts),
            dict(kinds),
            sum(task.long_context for task in tasks),
            sum(len(names) for task in tasks for names in task.held_back.values()),
        )
        assert shape == EXPECTED[name], name
        assert all(task.category == name for task in tasks)
        assert all(task.long_context is _bfcl_long_context(task.id) for task in tasks)


def test_held_back_turns_have_no_user_message_and_their_functions_are_callable_from_the_start(
    bfcl_categories: dict[str, list[Task]], bfcl_category_direct: dict[str, TaskRun]
) -> None:
    tasks = {task.id: task for task in bfcl_categories["miss_func"]}
    assert all(task.held_back for task in tasks.values())
    for task in tasks.values():
        for turn in task.held_back:
            assert task.turns[turn] == ""  # BFCL asserts this before adding the functions
    # The ground truth calls `tail` two turns before BFCL hands its documentation over: BFCL's
    # executor (and so the services) offers every function from the first turn.
    task = tasks["multi_turn_miss_func_49"]
    assert task.held_back == {3: ("wc", "tail", "cat")}
    assert "tail(file_name='file3.txt')" in task.call_texts[1]
    assert bfcl_category_direct[task.id].error is None


def test_the_service_classes_are_bfcls() -> None:
    from bfcl_eval.constants import executable_backend_config as bfcl

    for name, module in SERVICE_MODULES.items():
        assert bfcl.CLASS_FILE_PATH_MAPPING[name] == module
    assert set(STATELESS_CLASSES) == set(bfcl.STATELESS_CLASSES)


def _bfcl_text(value: JsonValue) -> str:
    # BFCL's executor turns a dict result into json.dumps(dict), anything else into str(result).
    return json.dumps(value) if isinstance(value, dict) else str(value)


@pytest.fixture
def bfcl_executor() -> Iterator[object]:
    """BFCL's multi-turn executor; removes the instances it keeps in its module globals."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    before = set(vars(multi_turn_utils))
    yield multi_turn_utils.execute_multi_turn_func_call
    for name in set(vars(multi_turn_utils)) - before:
        delattr(multi_turn_utils, name)


@pytest.mark.parametrize("category", list(EXPECTED))
def test_the_reference_is_bfcls_own_executor_on_every_task(
    category: str,
    bfcl_categories: dict[str, list[Task]],
    bfcl_category_direct: dict[str, TaskRun],
    bfcl_executor: object,
) -> None:
    """Same call results and same final states as BFCL's executor, for every task.

    Two representation differences are counted, not skipped silently: a `logarithm` result
    holds an `mpmath.mpf`, which BFCL prints as ``{'result': mpf('1.3027')}`` and the replay
    as ``{"result": "1.3"}`` (4 per category); long-context `get_watchlist` returns BFCL's
    `WATCH_LIST_EXTENSION`, which ends with a literal ``...``: ``Ellipsis`` in BFCL's text,
    the string ``"Ellipsis"`` in the replay's JSON (20 results).
    """
    execute = bfcl_executor
    assert callable(execute)
    model = f"agentq_crosscheck_{category}"
    mpf = ellipsis = 0
    for task in bfcl_categories[category]:
        run = bfcl_category_direct[task.id]
        assert run.error is None, task.id
        instances: dict[str, object] = {}
        for turn, texts in enumerate(task.call_texts):
            answers, instances = execute(
                list(texts),
                task.initial_config,
                list(task.involved_classes),
                model,
                task.id,
                long_context=_bfcl_long_context(task.id),
                is_evaL_run=True,
            )
            assert len(answers) == len(run.results[turn]), (task.id, turn)
            for ours, theirs in zip(run.results[turn], answers, strict=True):
                if "mpf(" in theirs:
                    mpf += 1
                    continue
                if "Ellipsis" in theirs:
                    ellipsis += 1
                    theirs = theirs.replace("Ellipsis", "'Ellipsis'")
                assert _bfcl_text(ours) == theirs, (task.id, turn)
        assert list(instances) == list(run.final_states), task.id
        for name, instance in instances.items():
            assert canonical_json(snapshot(instance)) == canonical_json(
                run.final_states[name]
            ), (task.id, name)
    assert mpf == 4
    assert ellipsis == (20 if category == "long_context" else 0)


def test_a_reference_built_without_the_long_context_flag_would_not_pass(
    bfcl_categories: dict[str, list[Task]],
    bfcl_category_direct: dict[str, TaskRun],
    bfcl_executor: object,
) -> None:
    # The check above is sensitive to how the services are built: BFCL's executor with the
    # flag off differs from the reference on every long-context task.
    execute = bfcl_executor
    assert callable(execute)
    differ = 0
    for task in bfcl_categories["long_context"]:
        instances: dict[str, object] = {}
        for texts in task.call_texts:
            _, instances = execute(
                list(texts),
                task.initial_config,
                list(task.involved_classes),
                "agentq_flag_off",
                task.id,
                long_context=False,
            )
        reference = bfcl_category_direct[task.id].final_states
        differ += any(
            canonical_json(snapshot(instance)) != canonical_json(reference[name])
            for name, instance in instances.items()
        )
    assert differ == 200


def _mutable(root: object) -> Iterator[object]:
    """Every mutable object reachable from `root` (dicts, lists, sets, instances)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            yield value
            stack += [*value.keys(), *value.values()]
        elif isinstance(value, list | set):
            yield value
            stack += list(value)
        elif isinstance(value, tuple | frozenset):
            stack += list(value)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            yield value
            stack += list(vars(value).values())


def test_long_context_services_share_nothing_with_bfcls_module_tables(
    bfcl_categories: dict[str, list[Task]],
) -> None:
    # BFCL's _load_scenario(long_context=True) puts the extension tables' own dicts into the
    # instance (TravelAPI's credit cards and bookings): a call changing one would change every
    # later task of the process. The services hold copies.
    from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import long_context

    tables = [value for name, value in vars(long_context).items() if name.isupper()]
    shared = {id(value) for table in tables for value in _mutable(table)}
    travel = next(t for t in bfcl_categories["long_context"] if "TravelAPI" in t.involved_classes)
    services = Services.fresh(travel)
    cards = vars(services.instances["TravelAPI"])["credit_card_list"]
    assert set(long_context.CREDIT_CARD_EXTENSION) <= set(cards)  # loaded, as BFCL loads it
    for task in bfcl_categories["long_context"]:
        for instance in Services.fresh(task).instances.values():
            leaks = [value for value in _mutable(instance) if id(value) in shared]
            assert leaks == [], (task.id, type(instance).__name__)
