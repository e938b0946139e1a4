"""Load BFCL's multi-turn tasks and their ground-truth calls, for every multi-turn category.

The data ships with `bfcl-eval`: one file per category, `data/BFCL_v4_multi_turn_<category>.json`
(one task per line: `id`, `question` — a list of turns, each a list of `{"role", "content"}`
messages —, `initial_config`, `involved_classes`, and for `miss_func` `missed_function`), and
`data/possible_answer/BFCL_v4_multi_turn_<category>.json` (one line per task: `id` and
`ground_truth`, a list per turn of call texts such as `"mv(source='a', destination='b')"`).
`categories()` finds the categories the installed package ships (both files present): `base`,
`miss_func`, `miss_param` and `long_context` in bfcl-eval 2026.3.23, the four BFCL scores
(`multi_turn_composite` lies in `data/unused_datasets/` with 199 tasks for 200 answers, and BFCL
leaves it out of its `multi_turn` collection; so does this loader).

What a category changes, as BFCL's own executor (`execute_multi_turn_func_call`) sees it:

- `long_context`: the services are loaded with `_load_scenario(..., long_context=True)` (BFCL
  passes ``"long_context" in test_category or "composite" in test_category``, the category
  taken from the task id): extra files, cards, bookings and longer answers. `Task.long_context`.
- `miss_func`: `missed_function` maps a turn to functions whose *documentation* BFCL withholds
  from the model until that turn (whose user message is empty). The executor itself offers every
  public method of the involved classes from the first turn, and the ground truth relies on it
  (`multi_turn_miss_func_49` calls `tail` at turn 1, two turns before `tail` is handed over).
  `Task.held_back` keeps the map; the services are built as for `base`.
- `miss_param`: some turns lack a parameter, and their ground truth is empty (the model should
  ask). Nothing changes in the services.

Call texts are parsed with `ast` only, never evaluated: the text must be one call of a plain
name whose arguments are Python literals (`ast.literal_eval` on each argument node).

Example:
    >>> tasks = load_tasks()
    >>> tasks[0].calls[0][0].function
    'cd'
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import bfcl_eval

from .errors import CallParseError, DatasetError
from .jsontypes import JsonObject, JsonValue

DATA_DIR = Path(bfcl_eval.__file__).parent / "data"
"""The data directory of the installed `bfcl-eval` package."""

QUESTIONS_PATH = DATA_DIR / "BFCL_v4_multi_turn_base.json"
"""The 200 multi-turn base tasks."""

ANSWERS_PATH = DATA_DIR / "possible_answer" / "BFCL_v4_multi_turn_base.json"
"""Their ground-truth calls."""

DEFAULT_CATEGORY = "base"
"""The category replayed by default (``make demo``)."""

_CATEGORY_FILE = re.compile(r"BFCL_v\d+_multi_turn_(?P<name>[a-z0-9_]+)\.json")
_ORDER = ("base", "miss_func", "miss_param", "long_context")  # BFCL's MULTI_TURN_CATEGORY order


@dataclass(frozen=True)
class Category:
    """One multi-turn category shipped with bfcl-eval.

    Attributes:
        name: The short name, e.g. ``"base"`` or ``"long_context"`` (BFCL's
            ``multi_turn_<name>``).
        questions: Its tasks file.
        answers: Its ground-truth file.
    """

    name: str
    questions: Path
    answers: Path

    @property
    def long_context(self) -> bool:
        """Whether BFCL loads this category's services with ``long_context=True``."""
        return bfcl_long_context(f"multi_turn_{self.name}_0")


def bfcl_test_category(task_id: str) -> str:
    """Return BFCL's test category of a task id, as its executor's callers compute it.

    ``multi_turn_long_context_12`` → ``multi_turn_long_context`` (``id.rsplit("_", 1)[0]``).
    """
    return task_id.rsplit("_", 1)[0]


def bfcl_long_context(task_id: str) -> bool:
    """Whether BFCL builds this task's services with ``long_context=True``.

    BFCL's multi-turn checker and handlers pass ``long_context=("long_context" in test_category
    or "composite" in test_category)`` to `execute_multi_turn_func_call`.
    """
    category = bfcl_test_category(task_id)
    return "long_context" in category or "composite" in category


def categories(data_dir: Path = DATA_DIR) -> dict[str, Category]:
    """Find the multi-turn categories the installed bfcl-eval ships, by short name.

    A category is a ``BFCL_v<N>_multi_turn_<name>.json`` file in `data_dir` with its namesake
    in ``possible_answer/`` (a file without ground truth cannot be replayed). BFCL's order
    first (base, miss_func, miss_param, long_context), then any other name, sorted.
    """
    found: dict[str, Category] = {}
    for path in sorted(data_dir.glob("BFCL_v*_multi_turn_*.json")):
        match = _CATEGORY_FILE.fullmatch(path.name)
        answers = data_dir / "possible_answer" / path.name
        if match is None or not answers.is_file():
            continue
        found[match["name"]] = Category(match["name"], path, answers)

    def rank(name: str) -> tuple[int, str]:
        return (_ORDER.index(name) if name in _ORDER else len(_ORDER), name)

    return {name: found[name] for name in sorted(found, key=rank)}


@dataclass(frozen=True)
class Call:
    """One tool call, parsed from its text.

    Attributes:
        text: The call's text as found in the data, e.g. `"cd(folder='document')"`.
        function: The called function's name.
        args: The positional arguments (literal values).
        kwargs: The keyword arguments (literal values), in the order written. Treat as
            read-only: the services layer passes deep copies to the service methods.
    """

    text: str
    function: str
    args: tuple[object, ...] = ()
    kwargs: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """One multi-turn task with its ground truth.

    Calls are parsed once, when the task is built; a malformed call does not stop the task
    from loading (unless `load_tasks(strict=True)`), it raises when its turn's calls are asked
    for, so one bad task fails alone.

    Attributes:
        id: The task's id, e.g. `"multi_turn_base_0"`.
        turns: The user's text of each turn (the turn's user messages joined by a newline).
        initial_config: Initial state per service class name (as in the data; never mutate it).
        involved_classes: The service classes the task uses, in the data's order.
        call_texts: The ground-truth call texts of each turn (a turn may have none).
        held_back: For `miss_func` tasks, the functions whose documentation BFCL hands the
            model only at a later turn, by that turn (BFCL's `missed_function`); informative
            only: BFCL's executor, and so `services.Services`, offers every function from the
            start.
    """

    id: str
    turns: tuple[str, ...]
    initial_config: JsonObject = field(repr=False)
    involved_classes: tuple[str, ...]
    call_texts: tuple[tuple[str, ...], ...]
    held_back: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    _parsed: tuple[tuple[Call | CallParseError, ...], ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        parsed = tuple(
            tuple(_parse_or_error(text, self.id, turn, index) for index, text in enumerate(texts))
            for turn, texts in enumerate(self.call_texts)
        )
        object.__setattr__(self, "_parsed", parsed)

    @property
    def category(self) -> str:
        """The short category name from the id: ``multi_turn_miss_func_3`` → ``miss_func``."""
        return bfcl_test_category(self.id).removeprefix("multi_turn_")

    @property
    def long_context(self) -> bool:
        """Whether BFCL builds this task's services with ``long_context=True`` (by its id)."""
        return bfcl_long_context(self.id)

    def turn_calls(self, turn: int) -> tuple[Call, ...]:
        """Return the parsed ground-truth calls of one turn.

        Args:
            turn: 0-based index of the turn.

        Returns:
            The turn's calls in order.

        Raises:
            CallParseError: A call of this turn is malformed (the first one is reported).
            IndexError: There is no such turn.
        """
        calls: list[Call] = []
        for item in self._parsed[turn]:
            if isinstance(item, CallParseError):
                raise item
            calls.append(item)
        return tuple(calls)

    @property
    def calls(self) -> tuple[tuple[Call, ...], ...]:
        """The parsed ground-truth calls of every turn.

        Raises:
            CallParseError: A call is malformed (the first one is reported).
        """
        return tuple(self.turn_calls(turn) for turn in range(len(self._parsed)))

    @property
    def parse_errors(self) -> tuple[CallParseError, ...]:
        """Every malformed call of the task, in order (empty for a well-formed task)."""
        return tuple(
            item for turn in self._parsed for item in turn if isinstance(item, CallParseError)
        )


def parse_call(text: str, *, task_id: str = "?", turn: int = 0, index: int = 0) -> Call:
    """Parse one call text with `ast`, never evaluating it.

    Args:
        text: The call's text, e.g. `"mv(source='a', destination='b')"`.
        task_id: Id of the task, named in the error.
        turn: 0-based turn index, named in the error.
        index: 0-based position of the call in its turn, named in the error.

    Returns:
        The parsed call.

    Raises:
        CallParseError: The text is not one call of a plain name with literal arguments.
    """

    def fail(reason: str) -> CallParseError:
        return CallParseError(task_id, turn, index, text, reason)

    if not isinstance(text, str):
        raise fail(f"expected the call's text as a string, got {type(text).__name__}")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise fail(f"not valid Python syntax ({error.msg})") from None
    if not isinstance(node, ast.Call):
        raise fail(f"expected a function call, got {type(node).__name__.lower()} expression")
    if not isinstance(node.func, ast.Name):
        raise fail(f"the called function must be a plain name, got {ast.unparse(node.func)!r}")
    args: list[object] = []
    for position, arg in enumerate(node.args):
        if isinstance(arg, ast.Starred):
            raise fail(f"argument {position} unpacks {ast.unparse(arg)!r}; write literals only")
        args.append(_literal(arg, f"argument {position}", fail))
    kwargs: dict[str, object] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise fail(f"'**{ast.unparse(keyword.value)}' unpacks a mapping; write literals only")
        if keyword.arg in kwargs:
            raise fail(f"argument {keyword.arg!r} is given twice")
        kwargs[keyword.arg] = _literal(keyword.value, f"argument {keyword.arg!r}", fail)
    return Call(text=text, function=node.func.id, args=tuple(args), kwargs=kwargs)


def load_tasks(
    questions_path: Path | str = QUESTIONS_PATH,
    answers_path: Path | str = ANSWERS_PATH,
    *,
    strict: bool = True,
) -> list[Task]:
    """Load the tasks and their ground truth, in the questions file's order.

    Args:
        questions_path: JSON-lines file of tasks (default: BFCL's multi-turn base tasks).
        answers_path: JSON-lines file of ground truths, one per task id.
        strict: Raise on the first malformed call text. With `False`, such a task loads and
            raises from `Task.turn_calls` for the turn holding the bad call.

    Returns:
        The tasks.

    Raises:
        DatasetError: A file is missing, a line is not a JSON object of the expected shape,
            an id is duplicated or has no counterpart, or the turn counts differ.
        CallParseError: With `strict`, a call text is malformed.
    """
    answers: dict[str, list[list[str]]] = {}
    for line_no, record in _json_lines(Path(answers_path)):
        task_id = _string(record, "id", answers_path, line_no)
        if task_id in answers:
            raise DatasetError(f"{answers_path}:{line_no}: duplicate ground truth for {task_id}")
        answers[task_id] = _ground_truth(record.get("ground_truth"), task_id)
    tasks: list[Task] = []
    seen: set[str] = set()
    for line_no, record in _json_lines(Path(questions_path)):
        task_id = _string(record, "id", questions_path, line_no)
        if task_id in seen:
            raise DatasetError(f"{questions_path}:{line_no}: duplicate task id {task_id}")
        seen.add(task_id)
        if task_id not in answers:
            raise DatasetError(f"task {task_id} has no ground truth in {answers_path}")
        task = _task(record, task_id, answers[task_id])
        if strict:
            for error in task.parse_errors:
                raise error
        tasks.append(task)
    extra = sorted(set(answers) - seen)
    if extra:
        raise DatasetError(f"ground truth for unknown task ids: {', '.join(extra[:5])}")
    return tasks


def load_category(name: str = DEFAULT_CATEGORY, *, strict: bool = True) -> list[Task]:
    """Load one category's tasks (see `categories`), in the file's order.

    Raises:
        DatasetError: No such category in the installed bfcl-eval, or a file is malformed.
        CallParseError: With `strict`, a call text is malformed.
    """
    known = categories()
    if name not in known:
        raise DatasetError(f"unknown BFCL multi-turn category {name!r}; known: {', '.join(known)}")
    return load_tasks(known[name].questions, known[name].answers, strict=strict)


def load_categories(names: Sequence[str], *, strict: bool = True) -> list[Task]:
    """Load several categories' tasks, one category after the other."""
    return [task for name in names for task in load_category(name, strict=strict)]


def _parse_or_error(text: str, task_id: str, turn: int, index: int) -> Call | CallParseError:
    try:
        return parse_call(text, task_id=task_id, turn=turn, index=index)
    except CallParseError as error:
        return error


def _literal(node: ast.expr, what: str, fail: Callable[[str], CallParseError]) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise fail(f"{what} is not a literal: {ast.unparse(node)!r}") from None


def _json_lines(path: Path) -> Iterator[tuple[int, JsonObject]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise DatasetError(f"cannot read {path}: {error}") from error
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record: JsonValue = json.loads(line)
        except json.JSONDecodeError as error:
            raise DatasetError(f"{path}:{line_no}: not JSON ({error.msg})") from None
        if not isinstance(record, dict):
            raise DatasetError(f"{path}:{line_no}: expected a JSON object per line")
        yield line_no, record


def _string(record: JsonObject, key: str, path: Path | str, line_no: int) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise DatasetError(f"{path}:{line_no}: {key!r} must be a non-empty string")
    return value


def _ground_truth(value: JsonValue, task_id: str) -> list[list[str]]:
    if not isinstance(value, list) or not all(
        isinstance(turn, list) and all(isinstance(text, str) for text in turn) for turn in value
    ):
        raise DatasetError(f"task {task_id}: ground_truth must be a list of lists of call texts")
    return [
        [text for text in turn if isinstance(text, str)] for turn in value if isinstance(turn, list)
    ]


def _task(record: JsonObject, task_id: str, ground_truth: list[list[str]]) -> Task:
    question = record.get("question")
    if not isinstance(question, list):
        raise DatasetError(f"task {task_id}: question must be a list of turns")
    turns: list[str] = []
    for turn_index, turn in enumerate(question):
        if not isinstance(turn, list) or not all(isinstance(m, dict) for m in turn):
            raise DatasetError(f"task {task_id} turn {turn_index}: expected a list of messages")
        texts = [
            str(message.get("content", ""))
            for message in turn
            if isinstance(message, dict) and message.get("role") == "user"
        ]
        turns.append("\n".join(texts))
    if len(turns) != len(ground_truth):
        raise DatasetError(
            f"task {task_id}: {len(turns)} user turns but {len(ground_truth)} ground-truth turns"
        )
    config = record.get("initial_config", {})
    classes = record.get("involved_classes")
    if not isinstance(config, dict):
        raise DatasetError(f"task {task_id}: initial_config must be an object")
    if not isinstance(classes, list) or not all(isinstance(name, str) for name in classes):
        raise DatasetError(f"task {task_id}: involved_classes must be a list of class names")
    return Task(
        id=task_id,
        turns=tuple(turns),
        initial_config=config,
        involved_classes=tuple(name for name in classes if isinstance(name, str)),
        call_texts=tuple(tuple(turn) for turn in ground_truth),
        held_back=_held_back(record.get("missed_function", {}), task_id, len(turns)),
    )


def _held_back(value: JsonValue, task_id: str, turns: int) -> dict[int, tuple[str, ...]]:
    # BFCL's `missed_function`: {"<turn>": ["name", ...]}.
    if not isinstance(value, dict):
        raise DatasetError(f"task {task_id}: missed_function must be an object")
    held: dict[int, tuple[str, ...]] = {}
    for key, names in value.items():
        if not key.isdigit() or not 0 <= int(key) < turns:
            raise DatasetError(f"task {task_id}: missed_function turn {key!r} is not a turn")
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise DatasetError(f"task {task_id}: missed_function[{key!r}] must list names")
        held[int(key)] = tuple(name for name in names if isinstance(name, str))
    return dict(sorted(held.items()))
