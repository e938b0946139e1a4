"""Loading the BFCL tasks and parsing their calls with `ast`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.bfcl_replay.dataset import Call, Task, load_tasks, parse_call
from examples.bfcl_replay.errors import CallParseError, DatasetError


def test_all_200_tasks_load_and_parse(bfcl_tasks: list[Task]) -> None:
    assert len(bfcl_tasks) == 200
    assert len({task.id for task in bfcl_tasks}) == 200
    assert sum(len(task.turns) for task in bfcl_tasks) == 734
    calls = [call for task in bfcl_tasks for turn in task.calls for call in turn]
    assert len(calls) == 1142
    assert all(task.parse_errors == () for task in bfcl_tasks)
    assert all(len(task.turns) == len(task.call_texts) for task in bfcl_tasks)


def test_first_task_is_read_as_written(bfcl_tasks: list[Task]) -> None:
    task = bfcl_tasks[0]
    assert task.id == "multi_turn_base_0"
    assert task.involved_classes == ("TwitterAPI", "GorillaFileSystem")
    assert task.turns[0].startswith("Move 'final_report.pdf' within document directory")
    assert task.calls[0][0] == Call("cd(folder='document')", "cd", (), {"folder": "document"})
    assert task.calls[2][0] == Call("sort('final_report.pdf')", "sort", ("final_report.pdf",), {})


def test_arguments_are_literals_of_any_shape() -> None:
    call = parse_call("f(1, -2.5, x=[1, 'a'], y={'k': (None, True)})")
    assert call.function == "f"
    assert call.args == (1, -2.5)
    assert call.kwargs == {"x": [1, "a"], "y": {"k": (None, True)}}
    assert list(call.kwargs) == ["x", "y"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("ls(", "not valid Python syntax"),
        ("1 + 2", "expected a function call, got binop expression"),
        ("ls", "expected a function call, got name expression"),
        ("os.system('rm -rf /')", "the called function must be a plain name, got 'os.system'"),
        ("ls()()", "the called function must be a plain name"),
        ("cat(*names)", "argument 0 unpacks '*names'"),
        ("cat(**options)", "'**options' unpacks a mapping"),
        ("cat(file_name=open('x'))", "argument 'file_name' is not a literal: \"open('x')\""),
        ("cat(__import__('os').getcwd())", "argument 0 is not a literal"),
        ("cat(file_name=name)", "argument 'file_name' is not a literal: 'name'"),
        ("cd(folder='a', folder='b')", "argument 'folder' is given twice"),
        ("ls(); ls()", "not valid Python syntax"),
    ],
)
def test_malformed_call_text_names_task_turn_text_and_reason(text: str, reason: str) -> None:
    with pytest.raises(CallParseError) as caught:
        parse_call(text, task_id="multi_turn_base_7", turn=2, index=1)
    error = caught.value
    assert (error.task_id, error.turn, error.index, error.text) == ("multi_turn_base_7", 2, 1, text)
    assert reason in error.reason
    assert str(error).startswith(f"task multi_turn_base_7 turn 2 call 1: cannot parse {text!r}")


def _write(tmp_path: Path, questions: list[object], answers: list[object]) -> tuple[Path, Path]:
    q, a = tmp_path / "questions.json", tmp_path / "answers.json"
    q.write_text("\n".join(json.dumps(x) for x in questions) + "\n")
    a.write_text("\n".join(json.dumps(x) for x in answers) + "\n")
    return q, a


def _question(task_id: str, turns: int = 2) -> dict[str, object]:
    return {
        "id": task_id,
        "question": [[{"role": "user", "content": f"turn {i}"}] for i in range(turns)],
        "initial_config": {},
        "involved_classes": ["MathAPI"],
    }


def test_a_malformed_call_fails_its_task_only(tmp_path: Path) -> None:
    questions, answers = _write(
        tmp_path,
        [_question("good"), _question("bad")],
        [
            {"id": "good", "ground_truth": [["add(a=1, b=2)"], []]},
            {"id": "bad", "ground_truth": [["add(a=1, b=2)"], ["add(a=1, b="]]},
        ],
    )
    with pytest.raises(
        CallParseError, match=r"task bad turn 1 call 0: cannot parse 'add\(a=1, b='"
    ):
        load_tasks(questions, answers)

    good, bad = load_tasks(questions, answers, strict=False)
    assert good.calls == ((Call("add(a=1, b=2)", "add", (), {"a": 1, "b": 2}),), ())
    assert bad.turn_calls(0) == (Call("add(a=1, b=2)", "add", (), {"a": 1, "b": 2}),)
    with pytest.raises(CallParseError, match="turn 1 call 0"):
        bad.turn_calls(1)
    with pytest.raises(CallParseError):
        _ = bad.calls
    assert [error.turn for error in bad.parse_errors] == [1]


@pytest.mark.parametrize(
    ("questions", "answers", "message"),
    [
        ([_question("a")], [], "task a has no ground truth"),
        ([_question("a")], [{"id": "a", "ground_truth": [[]]}], "2 user turns but 1 ground-truth"),
        ([_question("a")], [{"id": "a", "ground_truth": [["x()"], "y()"]}], "list of lists"),
        ([_question("a"), _question("a")], [{"id": "a", "ground_truth": [[], []]}], "duplicate"),
        ([], [{"id": "z", "ground_truth": []}], "ground truth for unknown task ids: z"),
        ([{"question": []}], [], "'id' must be a non-empty string"),
        ([[1, 2]], [], "expected a JSON object per line"),
    ],
)
def test_misshapen_files_raise_dataset_error(
    tmp_path: Path, questions: list[object], answers: list[object], message: str
) -> None:
    q, a = _write(tmp_path, questions, answers)
    with pytest.raises(DatasetError, match=message):
        load_tasks(q, a)


def test_a_line_that_is_not_json_is_located(tmp_path: Path) -> None:
    q, a = _write(tmp_path, [_question("a")], [{"id": "a", "ground_truth": [[], []]}])
    q.write_text(q.read_text() + "{not json\n")
    with pytest.raises(DatasetError, match=r"questions.json:2: not JSON"):
        load_tasks(q, a)


def test_a_missing_file_raises_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read"):
        load_tasks(tmp_path / "missing.json", tmp_path / "missing.json")
