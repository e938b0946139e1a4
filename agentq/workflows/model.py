"""The workflow model: `StepDef`, `Workflow`, `WorkflowDef` (and what a run reports).

A workflow is an ordered list of steps under a stable id. A step body receives a
`StepContext` and returns a JSON value (see `agentq.codec`); it may be an ``async def`` or a
plain function (run in a worker thread). It signals with exceptions:

- ``raise WaitForInput(reason)``: the step becomes `Waiting` until `WorkflowEngine.resume`
  delivers input; the step then runs again with ``ctx.resumed`` true and
  ``ctx.resume_input`` set.
- ``raise NonRetryable(reason)`` (or any exception whose ``retryable`` is ``False``): the
  workflow fails at once, without retry.
- any other exception: the attempt failed; the step's `RetryPolicy` decides what follows.

An exception group (parallel calls in an `asyncio.TaskGroup`) is judged by its leaves:
`agentq.retry.classify` is the one rule, shared with the queue's jobs.

What a run reports (`StepStatus`, `RunStatus`, `RunResult`, `Recorded`) is defined in
`agentq.workflows.reports` and re-exported here.

`WaitForInput`, `NonRetryable` and `MAX_REASON_CHARS` are defined in `agentq.errors` (the
queue reads them too) and re-exported here.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from inspect import CO_VARARGS
from types import FunctionType
from typing import Any

from agentq.errors import MAX_REASON_CHARS, NonRetryable, WaitForInput
from agentq.keys import validate_key
from agentq.retry import RetryPolicy
from agentq.workflows.context import StepContext
from agentq.workflows.reports import Recorded, RunResult, RunStatus, StepStatus

__all__ = [
    "MAX_REASON_CHARS",
    "NonRetryable",
    "Recorded",
    "RunResult",
    "RunStatus",
    "StepDef",
    "StepStatus",
    "WaitForInput",
    "Workflow",
    "WorkflowDef",
]


StepFn = Callable[[StepContext], Any] | Callable[[StepContext], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class StepDef:
    """One step of a workflow.

    Args:
        name: Unique within the workflow; a non-empty str.
        fn: ``fn(ctx) -> JSON``: an async function, or a plain one that runs in a thread. It
            must accept being called with one positional argument, the `StepContext`
            (``*args`` and parameters with defaults are fine); checked here with
            `inspect.signature` when Python can tell the signature (some builtins it cannot:
            those are not checked).
        retry: Attempts and backoff; default one attempt.
        timeout: Seconds one attempt may run, or None for no limit. A timeout cancels an
            async body and counts as a failed attempt; a thread cannot be interrupted, so the
            next attempt starts only after the thread has returned.
        max_recoveries: How many times an attempt lost to a crash is re-admitted (an int
            >= 0; default 3). An attempt is lost when its process dies (or its lease runs
            out) before it records an outcome; it is run again
            under the same attempt number and does not count toward `retry`'s
            ``max_attempts``. One more lost attempt fails the workflow, with a reason saying
            its attempts were lost to crashes: a body that kills its own process cannot run
            forever. An attempt a graceful shutdown interrupts (engine closed, ``serve``
            cancelled, queue closed) is handed back by its worker and counts toward
            neither limit: a shutdown never fails a workflow by itself.

    Raises:
        TypeError: `fn` is not callable, cannot be called as ``fn(ctx)`` (the message names
            the step and the signature), `retry` is not a `RetryPolicy`, or `max_recoveries`
            is not an int.
        ValueError: `name` is empty, `timeout` is not a positive number, or
            `max_recoveries` is negative.
    """

    name: str
    fn: StepFn
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: float | None = None
    max_recoveries: int = 3

    def __post_init__(self) -> None:
        validate_key(self.name, "step name")
        if not callable(self.fn):
            raise TypeError(f"step {self.name!r}: fn must be callable, got {self.fn!r}")
        _check_takes_ctx(self.name, self.fn)
        if not isinstance(self.retry, RetryPolicy):
            raise TypeError(f"step {self.name!r}: retry must be a RetryPolicy, got {self.retry!r}")
        if self.timeout is not None and (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or not math.isfinite(self.timeout)
            or self.timeout <= 0
        ):
            raise ValueError(
                f"step {self.name!r}: timeout must be a positive number of seconds or None, "
                f"got {self.timeout!r}"
            )
        if isinstance(self.max_recoveries, bool) or not isinstance(self.max_recoveries, int):
            raise TypeError(
                f"step {self.name!r}: max_recoveries must be an int >= 0, got "
                f"{self.max_recoveries!r}"
            )
        if self.max_recoveries < 0:
            raise ValueError(
                f"step {self.name!r}: max_recoveries must be >= 0, got {self.max_recoveries!r}"
            )

    @property
    def is_async(self) -> bool:
        """Whether `fn` is a coroutine function (else it runs in a worker thread)."""
        fn = self.fn
        return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
        )


def _check_takes_ctx(name: str, fn: Callable[..., Any]) -> None:
    """Raise `TypeError` if `fn` cannot be called with one positional argument."""
    if _plainly_takes_one(fn):  # the common case, read off the code (no `inspect.signature`)
        return
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read (some builtins): not checked
        return
    try:
        signature.bind(None)
    except TypeError as why:
        inner = fn.func if isinstance(fn, functools.partial) else fn
        shown = getattr(inner, "__qualname__", None) or type(inner).__qualname__
        if inner is not fn:
            shown = f"functools.partial({shown})"
        raise TypeError(
            f"step {name!r}: fn {shown}{signature} cannot be called as fn(ctx) ({why}); a "
            "step function takes exactly one positional argument, the StepContext"
        ) from None


def _plainly_takes_one(fn: Callable[..., Any]) -> bool:
    """Whether `fn` is a plain function that accepts one positional argument, read from its
    code object as `inspect.signature` would read it (~1 µs instead of ~15: a `StepDef` is
    often built per run). False means only "ask `inspect.signature`": any other callable, or
    a function whose signature is overridden (``__wrapped__``, ``__signature__``)."""
    if type(fn) is not FunctionType:
        return False
    attrs = fn.__dict__
    if "__wrapped__" in attrs or "__signature__" in attrs:
        return False
    code = fn.__code__
    positional = code.co_argcount  # positional-only ones included
    defaults = len(fn.__defaults__ or ())
    if positional - defaults > 1 or (positional == 0 and not code.co_flags & CO_VARARGS):
        return False
    return code.co_kwonlyargcount == len(fn.__kwdefaults__ or ())  # every keyword-only defaulted


@dataclass(frozen=True, slots=True)
class Workflow:
    """An ordered list of steps under a stable id.

    Args:
        id: Stable id (a non-empty str of at most 1024 bytes of UTF-8). Running the same id
            again continues or returns the stored run; it never starts a second one.
        steps: The steps, in order; at least one; names unique.
        input: JSON value given to every step as ``ctx.input``.
        definition: The name of the `WorkflowDef` this instance was made from (set by
            `WorkflowDef.workflow`), recorded in the store so that any engine that
            registered that definition can run it; None (the default) for a plain workflow,
            tied to the process that registered it.
        timeout: Seconds from the workflow's start (its `WorkflowStarted`, when a run or
            `WorkflowEngine.start` first stores it) after which it fails with the reason
            ``WorkflowTimedOut`` if it has not ended; None (the default) for no limit. The
            deadline is stored with the workflow, so every engine and process honours it
            (see `WorkflowDef`).

    Raises:
        ValueError: Empty `steps` or duplicate step names, or a `timeout` that is not a
            positive finite number of seconds.
        TypeError: A step is not a `StepDef`.
        InvalidKeyError: `id` (or `definition`) is empty, not UTF-8 or too long.

    Example:
        >>> wf = Workflow("order-42", [StepDef("fetch", fetch), StepDef("charge", charge)])
    """

    id: str
    steps: Sequence[StepDef]
    input: Any = None
    definition: str | None = field(default=None, kw_only=True)
    timeout: float | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        validate_key(self.id, "workflow id")
        object.__setattr__(self, "steps", _checked_steps(f"workflow {self.id!r}", self.steps))
        object.__setattr__(self, "timeout", _checked_timeout(f"workflow {self.id!r}", self.timeout))
        if self.definition is not None:
            validate_key(self.definition, "definition name")

    @property
    def step_names(self) -> tuple[str, ...]:
        """The step names, in order."""
        return tuple(s.name for s in self.steps)

    def index_of(self, step: str | int) -> int:
        """Return the 0-based index of `step` (a name or an index), or raise `KeyError`."""
        if isinstance(step, int) and not isinstance(step, bool):
            if 0 <= step < len(self.steps):
                return step
            raise KeyError(step)
        for i, s in enumerate(self.steps):
            if s.name == step:
                return i
        raise KeyError(step)


def _checked_timeout(owner: str, timeout: object) -> float | None:
    """`timeout` as float seconds (positive, finite) or None; ValueError/TypeError naming it."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"{owner}: timeout must be seconds (a number) or None, got {timeout!r:.80}")
    if not (0 < timeout < math.inf):
        raise ValueError(f"{owner}: timeout must be positive finite seconds, got {timeout!r}")
    return float(timeout)


def _checked_steps(owner: str, steps: Sequence[StepDef]) -> tuple[StepDef, ...]:
    """`steps` as a tuple, checked: a non-empty sequence of `StepDef` with unique names."""
    if isinstance(steps, str | bytes | StepDef) or not isinstance(steps, Iterable):
        raise TypeError(f"{owner}: steps must be a sequence of StepDef, got {steps!r:.80}")
    checked = tuple(steps)
    if not checked:
        raise ValueError(f"{owner} has no steps")
    for step in checked:
        if not isinstance(step, StepDef):
            raise TypeError(f"{owner}: steps must be StepDef, got {step!r:.80}")
    names = [s.name for s in checked]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{owner} has duplicate step names: {dupes}")
    return checked


@dataclass(frozen=True, slots=True)
class WorkflowDef:
    """A named workflow definition: the steps of many instances, runnable in any process.

    A plain `Workflow` is one instance whose step bodies only the process that registered
    it knows. A definition names its steps once; each instance (``definition.workflow(id,
    input)``, or ``engine.start(definition, id, input)``) records the definition's name in
    the store, so that any engine that registered a definition of that name, in any
    process, can run, resume, retry and recover it by id. Step bodies are code, not data:
    what is stored is the name, the step names and the input, never the functions.

    Args:
        name: The definition's name (a non-empty str of at most 1024 bytes of UTF-8, like a
            key). Engines look definitions up by it: keep it stable across releases of
            the program.
        steps: The steps, in order: a non-empty sequence of `StepDef` with unique names.
            Stored instances record the step names; an engine whose registered definition
            has other step names refuses to run them (`WorkflowMismatchError`).
        timeout: Seconds from an instance's start after which it fails with the reason
            ``WorkflowTimedOut`` if it has not ended (None: no limit). The deadline (start
            + timeout; the earlier of it and ``engine.start(..., deadline=)``) is stored
            with the instance: a running body is cancelled at the deadline by the engine
            running it (or, in another process, at its next lease renewal); a waiting or
            sleeping instance is failed then by whichever engine notices first (its live
            timer, `run`, `recover`, `serve`). A claim after the deadline fails it too.
        on_end: Called with the final `RunResult` of every instance that ends (completed,
            failed, cancelled, timed out), sync or async; None for no hook. At least once,
            from an outbox row written with the end: by the engine that ended it if that
            engine registered this definition, else by an engine that did (``serve``,
            ``run`` of the id), also after a crash. A hook that raises is called again
            after the engine's ``hook_backoff`` until it returns (see
            ``WorkflowEngine.on_end``).

    Raises:
        InvalidKeyError: `name` is empty, not valid UTF-8 or too long.
        TypeError: `name` is not a str, `steps` is not a sequence, or a step is not a
            `StepDef`.
        ValueError: `steps` is empty or has duplicate names, or `timeout` is not positive
            finite seconds.
        TypeError: `on_end` is neither None nor callable.

    Example:
        >>> order = WorkflowDef("order", [StepDef("fetch", fetch), StepDef("charge", charge)])
        >>> engine.register(order)
        >>> await engine.start(order, "order-42", input={"sku": "A1"})
        >>> result = await engine.run("order-42")        # or in another process
    """

    name: str
    steps: Sequence[StepDef]
    timeout: float | None = field(default=None, kw_only=True)
    on_end: Callable[[RunResult], Any] | None = field(default=None, kw_only=True, compare=False)

    def __post_init__(self) -> None:
        validate_key(self.name, "definition name")
        if self.on_end is not None and not callable(self.on_end):
            raise TypeError(
                f"definition {self.name!r}: on_end must be a callable or None, got "
                f"{self.on_end!r:.80}"
            )
        object.__setattr__(self, "steps", _checked_steps(f"definition {self.name!r}", self.steps))
        owner = f"definition {self.name!r}"
        object.__setattr__(self, "timeout", _checked_timeout(owner, self.timeout))

    @property
    def step_names(self) -> tuple[str, ...]:
        """The step names, in order."""
        return tuple(s.name for s in self.steps)

    def workflow(self, workflow_id: str, input: Any = None) -> Workflow:
        """Make an instance: a `Workflow` with these steps that remembers this definition.

        Nothing is stored: `WorkflowEngine.start` (or `run`) stores it.

        Args:
            workflow_id: The instance's id (a key: non-empty, at most 1024 bytes of UTF-8).
            input: The instance's input (JSON), given to every step as ``ctx.input``.

        Returns:
            ``Workflow(workflow_id, self.steps, input=input, definition=self.name,
            timeout=self.timeout)``.

        Raises:
            InvalidKeyError / TypeError: A bad `workflow_id`.
        """
        return Workflow(
            workflow_id, self.steps, input=input, definition=self.name, timeout=self.timeout
        )
