"""`Job` validation, the `Accepted` values, `JobHandle` and `JobEvent` (agentq.queue.jobs)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import AsyncIterator

import pytest

from agentq.errors import InvalidKeyError, JobFailed
from agentq.keys import MAX_KEY_BYTES
from agentq.outcomes import Completed
from agentq.queue.handles import Accepted, Cached, InFlight, JobHandle, Queued
from agentq.queue.jobs import Job, JobEvent, JobEventKind
from agentq.queue.lanes import Priority
from agentq.queue.queue import Queue
from agentq.retry import RetryPolicy


async def work() -> str:
    return "done"


def test_a_job_has_defaults_and_keyword_only_options() -> None:
    job = Job("k", work)
    assert (job.priority, job.timeout, job.retry, job.fingerprint) == (
        Priority.MEDIUM, None, None, None
    )
    with pytest.raises(TypeError):
        Job("k", work, Priority.HIGH, 5)  # type: ignore[call-arg]
    policy = RetryPolicy(max_attempts=2)
    job = Job("k", work, Priority.LOW, timeout=2, retry=policy, fingerprint="f")
    assert (job.timeout, job.retry, job.fingerprint) == (2, policy, "f")


def test_a_job_is_frozen() -> None:
    job = Job("k", work)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.key = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "must not be empty"),
        ("\ud800", "lone surrogate"),
        ("x" * (MAX_KEY_BYTES + 1), "limit"),
        ("\N{SNAKE}" * (MAX_KEY_BYTES // 4 + 1), "bytes of UTF-8"),
    ],
)
def test_invalid_keys_are_rejected_with_the_problem_named(key: str, message: str) -> None:
    with pytest.raises(InvalidKeyError, match=message):
        Job(key, work)


def test_a_key_must_be_a_str() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        Job(42, work)  # type: ignore[arg-type]


def test_fn_must_be_callable_and_is_named_in_the_error() -> None:
    with pytest.raises(TypeError, match="fn must be callable, got 'not a function'"):
        Job("k", "not a function")  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1, math.inf, math.nan, True, "5"])
def test_a_timeout_must_be_a_positive_finite_number(timeout: object) -> None:
    with pytest.raises(ValueError, match=f"timeout must be .* got {timeout!r}"):
        Job("k", work, timeout=timeout)  # type: ignore[arg-type]


def test_retry_must_be_a_retry_policy() -> None:
    with pytest.raises(TypeError, match="RetryPolicy"):
        Job("k", work, retry=3)  # type: ignore[arg-type]


def test_priority_accepts_members_and_their_values_only() -> None:
    assert Job("k", work, "high").priority is Priority.HIGH  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'urgent'"):
        Job("k", work, "urgent")  # type: ignore[arg-type]


def describe(accepted: Accepted) -> str:
    match accepted:
        case Queued(handle):
            return f"queued {handle.key}"
        case InFlight(handle):
            return f"joined {handle.key}"
        case Cached(output):
            return f"cached {output}"
    return "unreachable"


async def test_accepted_values_work_with_match() -> None:
    async with Queue() as queue:
        job = Job("k", work)
        first = await queue.push(job)
        second = await queue.push(job)
        assert describe(first) == "queued k"
        assert describe(second) == "joined k"
        assert isinstance(first, Queued)
        await first.handle
        assert describe(await queue.push(job)) == "cached done"


async def test_a_handle_reports_its_job_and_outcome() -> None:
    async with Queue() as queue:
        job = Job("k", functools.partial(work))
        accepted = await queue.push(job)
        assert isinstance(accepted, Queued)
        handle: JobHandle = accepted.handle
        assert handle.job is job and handle.key == "k"
        assert handle.outcome is None and not handle.done()
        assert "pending" in repr(handle)
        assert await handle == Completed("done")
        assert handle.done() and "completed" in repr(handle)
        await handle.stopped()  # returns at once


def test_job_events_are_frozen_values() -> None:
    event = JobEvent(JobEventKind.STARTED, "k", Priority.LOW, 1.5, 1)
    assert event.outcome is None and event.kind == "started"
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.key = "x"  # type: ignore[misc]


# ------------------------------------------------------------------ callables that are not jobs


async def ticks() -> AsyncIterator[int]:
    yield 1


class Stream:
    async def __call__(self) -> AsyncIterator[int]:
        yield 1

    async def items(self) -> AsyncIterator[int]:
        yield 1


@pytest.mark.parametrize(
    "fn",
    [ticks, functools.partial(ticks), Stream(), Stream().items, functools.partial(Stream())],
    ids=["function", "partial", "__call__", "method", "partial-of-__call__"],
)
def test_an_async_generator_function_is_refused_at_construction(fn: object) -> None:
    with pytest.raises(TypeError, match="async generator"):
        Job("k", fn)  # type: ignore[arg-type]


async def test_a_callable_returning_an_async_generator_fails_its_job() -> None:
    async with Queue() as queue:
        with pytest.raises(JobFailed) as caught:
            await queue.push_and_wait(Job("k", lambda: ticks()))
    assert isinstance(caught.value.__cause__, TypeError)
    assert "async generator" in str(caught.value.__cause__)


# ------------------------------------------------------------------ callables that need arguments


async def fetch(city: str, *, units: str = "metric") -> str:
    return f"{city} in {units}"


def needs_two(a: int, b: int) -> int:
    return a + b


def keyword_only(*, token: str) -> str:
    return token


class Tool:
    def __call__(self, query: str) -> str:
        return query

    def run(self, query: str) -> str:
        return query

    def ready(self) -> str:
        return "ready"


class NeedsConfig:
    def __init__(self, config: dict[str, str]) -> None:
        self.config = config


@pytest.mark.parametrize(
    ("fn", "signature"),
    [
        (fetch, "(city: 'str', *, units: 'str' = 'metric')"),
        (needs_two, "(a: 'int', b: 'int')"),
        (functools.partial(needs_two, 1), "(b: 'int')"),
        (keyword_only, "(*, token: 'str')"),
        (functools.partial(fetch, units="imperial"), "(city: 'str', *, units: 'str' = 'imperial')"),
        (lambda x: x, "(x)"),
        (Tool(), "(query: 'str')"),
        (Tool().run, "(query: 'str')"),
        (NeedsConfig, "(config: 'dict[str, str]')"),
    ],
    ids=["async", "function", "partial", "keyword-only", "partial-keywords", "lambda",
         "__call__", "method", "class"],
)
def test_issue9_a_callable_that_needs_arguments_is_refused_when_the_job_is_built(
    fn: object, signature: str
) -> None:
    """Issue 9 item 15: it used to be accepted and to fail only when run."""
    with pytest.raises(TypeError) as caught:
        Job("tool-7", fn)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith("job 'tool-7': fn must be callable with no arguments")
    assert signature in message


def test_too_many_bound_arguments_are_refused_too() -> None:
    with pytest.raises(TypeError, match=r"job 'k'.*\(a: 'int', b: 'int'\)"):
        Job("k", functools.partial(needs_two, 1, 2, 3))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "fn",
    [
        work,
        functools.partial(fetch, "Paris"),
        functools.partial(needs_two, 1, 2),
        functools.partial(needs_two, 1, b=2),
        functools.partial(keyword_only, token="t"),
        lambda x=1, *rest, y=2, **more: x,
        Tool().ready,
        functools.partial(Tool(), "q"),
        functools.partial(Tool().run, query="q"),
        print,  # no signature to check: accepted
        dict,
    ],
    ids=["function", "partial", "partial-all", "partial-keyword", "partial-keyword-only",
         "defaults", "method", "partial-__call__", "partial-method-keyword", "builtin", "type"],
)
def test_callables_that_take_no_required_argument_are_accepted(fn: object) -> None:
    assert Job("k", fn).fn is fn  # type: ignore[arg-type]


async def test_a_job_that_passed_the_check_runs() -> None:
    async with Queue() as queue:
        assert await queue.push_and_wait(Job("k", functools.partial(fetch, "Oslo"))) == (
            "Oslo in metric"
        )


# ------------------------------------------------------------------ numbers and priorities


@pytest.mark.parametrize("timeout", [10**400, -(10**400)], ids=["1e400", "-1e400"])
def test_a_timeout_too_large_for_a_float_is_a_value_error(timeout: int) -> None:
    with pytest.raises(ValueError, match=f"got {timeout!r}"):
        Job("k", work, timeout=timeout)


def test_a_huge_but_finite_timeout_is_accepted() -> None:
    assert Job("k", work, timeout=10**300).timeout == 10**300


@pytest.mark.parametrize("priority", ["urgent", "HIGH", 2, None])
def test_an_unknown_priority_names_the_allowed_values(priority: object) -> None:
    with pytest.raises(ValueError, match=f"priority {priority!r}: .*'low', 'medium', 'high'"):
        Job("k", work, priority)  # type: ignore[arg-type]


def _values(job: Job) -> tuple[object, ...]:
    return tuple(getattr(job, f.name) for f in dataclasses.fields(job))


def test_a_job_built_through_its_draft_is_a_plain_frozen_job() -> None:
    # `Job.__new__` fills a draft of the same layout, then gives it its class (issue 25).
    policy = RetryPolicy(max_attempts=2)
    job = Job("k", work, Priority.HIGH, timeout=2, retry=policy, fingerprint="f", name="n",
              persist=False, tokens=3)
    assert type(job) is Job
    assert _values(job) == ("k", work, Priority.HIGH, 2, policy, "f", "n", False, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.tokens = 4  # type: ignore[misc]
    with pytest.raises(TypeError, match="key"):
        Job()  # type: ignore[call-arg]


def test_a_job_copies_pickles_and_replaces_as_a_dataclass() -> None:
    import pickle

    job = Job("k", functools.partial(work), Priority.LOW, timeout=2, name="n", tokens=3)
    for twin in (copy.copy(job), copy.deepcopy(job), pickle.loads(pickle.dumps(job))):
        assert type(twin) is Job
        assert _values(twin)[2:] == _values(job)[2:]
        assert twin.fn.func is work  # type: ignore[attr-defined]
    assert copy.copy(job) == job  # the very same partial: equal
    changed = dataclasses.replace(job, tokens=5)
    assert (type(changed), changed.tokens, changed.key, changed.name) == (Job, 5, "k", "n")
    with pytest.raises(ValueError, match="tokens"):
        dataclasses.replace(job, tokens=-1)  # checked as any Job


async def test_a_subclass_of_job_is_built_and_runs() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, init=False)
    class Tagged(Job):
        pass

    job = Tagged("k", work, timeout=1)
    assert type(job) is Tagged and (job.key, job.timeout) == ("k", 1)
    async with Queue() as queue:
        assert await queue.push_and_wait(job) == "done"


@dataclasses.dataclass(frozen=True)
class _Tagged(Job):
    tag: str = "t"


class _Numbered(Job):
    def __init__(self, n: int) -> None:
        super().__init__(f"numbered-{n}", functools.partial(_echo, n))  # type: ignore[call-arg]


async def _echo(value: int) -> int:
    return value


async def test_subclasses_with_their_own_fields_or_init_are_built_copied_and_run() -> None:
    tagged = _Tagged("tg", functools.partial(_echo, 1), tag="x")
    numbered = _Numbered(3)
    assert (tagged.key, tagged.tag, numbered.key) == ("tg", "x", "numbered-3")
    replaced = dataclasses.replace(tagged, tag="y")
    assert (type(replaced), replaced.key, replaced.tag) == (_Tagged, "tg", "y")
    twin = copy.copy(numbered)
    assert (type(twin), twin.key, twin.fn) == (_Numbered, "numbered-3", numbered.fn)
    async with Queue() as queue:
        assert await queue.push_and_wait(tagged) == 1
        assert await queue.push_and_wait(numbered) == 3
        assert await queue.push_and_wait(replaced) == 1  # the same key: cached


def test_a_subclass_built_through_job_init_is_checked_as_a_job() -> None:
    class Bad(Job):
        def __init__(self) -> None:
            super().__init__("", functools.partial(_echo, 1))  # type: ignore[call-arg]

    with pytest.raises(ValueError, match="key"):
        Bad()


class _Mixin:
    __slots__ = ()

    def describe(self) -> str:
        return f"mixed {self.key}"  # type: ignore[attr-defined]


class _Mixed(_Mixin, Job):
    pass


class _Renumbered(_Numbered):
    def __init__(self, n: int) -> None:
        super().__init__(n + 1)


async def test_a_subclass_beside_a_mixin_or_of_a_subclass_is_built_as_a_job() -> None:
    mixed = _Mixed("m", functools.partial(_echo, 4))
    renumbered = _Renumbered(1)
    assert (mixed.describe(), renumbered.key) == ("mixed m", "numbered-2")
    assert isinstance(mixed, Job) and isinstance(renumbered, _Numbered)
    with pytest.raises(TypeError, match="callable"):
        _Mixed("m", 3)  # type: ignore[arg-type]  # checked as a Job
    twin = copy.copy(mixed)
    assert (type(twin), twin.key, twin.fn) == (_Mixed, "m", mixed.fn)
    async with Queue() as queue:
        assert await queue.push_and_wait(mixed) == 4
        assert await queue.push_and_wait(renumbered) == 2
