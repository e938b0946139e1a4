"""Jobs: what is pushed (`Job`) and what is published about it (`JobEvent`).

A `Job` is an immutable description of one call: an idempotency key, a zero-argument callable
and how to run it; it is validated when it is built, so a push never admits a bad job. Every
change of a job is published as a `JobEvent` to the queue's subscribers; `TERMINAL_KINDS` are
the kinds that end a job. What a push answers (`Queued`, `InFlight`, `Cached`) and the
`JobHandle` that follows a job are in `agentq.queue.handles`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from inspect import CO_ASYNC_GENERATOR
from types import FunctionType
from typing import TYPE_CHECKING, Any

from agentq.keys import MAX_KEY_BYTES, validate_key
from agentq.outcomes import Outcome
from agentq.queue.job_checks import (
    check_no_arguments,
    check_seconds,
    is_async_generator,
    positive_seconds,
    short_repr,
)
from agentq.queue.lanes import Priority, as_priority
from agentq.retry import RetryPolicy

__all__ = ["Job", "JobEvent", "JobEventKind", "check_seconds", "short_repr"]


class _Weak:
    """Jobs are weakly referenced (`agentq.queue.records.Record.first`): the ``__weakref__``
    slot is inherited, so that `Job` and its `_Draft` add the same slots to the same base
    (``__class__`` assignment refuses a ``__weakref__`` slot added beside others)."""

    __slots__ = ("__weakref__",)


@dataclass(frozen=True, slots=True, init=False)
class Job(_Weak):
    """One call to run at most once per idempotency key.

    Args:
        key: The idempotency key: a non-empty str of at most `agentq.keys.MAX_KEY_BYTES`
            bytes of UTF-8, compared byte-exactly (no Unicode normalisation). Keys are global
            across the queue's lanes.
        fn: A zero-argument callable: an ``async def`` function (or a `functools.partial` of
            one, or an object with an ``async def __call__``) runs on the event loop; a plain
            callable runs in a worker thread of the loop's default executor, so that a
            ``def`` that blocks never blocks the loop; an awaitable it returns is awaited
            on the loop. One form is called on the loop with no thread hop, because its
            code shows it only builds a coroutine: a lambda whose body is one call of an
            ``async def`` function named by a global or an enclosing variable, with
            constants or plain names as arguments (``lambda: fetch(url)``; see
            ``docs/queue.md``). An async generator function is refused: it has no result
            to await. So is a callable whose signature cannot be called with no arguments
            (a required parameter left unbound, or too many bound); a callable without a
            signature (some builtins) is not checked.
        priority: The lane to run in: a `Priority`, or its text value ``"low"``,
            ``"medium"`` or ``"high"`` (converted to the member).
        timeout: Seconds one attempt may run (measured with the queue's clock), or None for
            no limit. A timeout cancels an async body and counts as a failed attempt (reason
            ``timeout``). A thread cannot be interrupted: the timeout is recorded at once, but
            the next attempt and the lane permit wait until the thread has returned.
        retry: Attempts and backoff; None means one attempt. An exception with a
            ``retryable`` attribute that is ``False`` is never retried, nor are
            `agentq.workflows.model.NonRetryable` and `agentq.workflows.model.WaitForInput`.
        fingerprint: What makes two pushes of one key "the same call", compared with ``==``.
            None (the default) derives it from `fn`: the function's module, qualified name
            and code, and the values the call uses: a `functools.partial`'s arguments, a
            bound method's ``self``, a closure's captured values, the defaults and the
            module-level values it reads. JSON-like values (None, bool, int, float, str, and
            lists, tuples and dicts of them) compare by value (dict key order does not
            matter), functions by their own fingerprint, other objects by ``repr`` when their
            class gives a meaningful one, else by identity (the same object); ``nonlocal``
            state the function rebinds is left out. The fingerprint of the push that claims
            the key (the one that runs) is taken when it is pushed, and every later push of
            the key with another `Job` object is compared with it by its own fingerprint,
            taken at that push; pushing the very same `Job` object again is the same call by
            identity (see ``docs/idempotency.md``). Give it explicitly when the derived one
            does not tell your calls apart, e.g. ``fingerprint=("send_mail", "alice")``.
        persist: With a queue that has a store (`Queue(store=...)`): whether this job's
            outcome is kept there (read before it runs, saved when it completes). False
            keeps it in memory only, as a queue without a store does: for jobs whose outcome
            is recorded elsewhere (a workflow step's attempts, in the workflow's event log)
            or whose output is not JSON. Ignored by a queue without a store.
        name: How messages about this job name it (timeouts, cancels, deadlocks, a closed
            or full queue), instead of ``job '<key>'``; e.g. the workflow engine names a
            step's job ``step 'charge' of workflow 'order-42'`` rather than by its internal
            key. None (the default) names it by its key.
        tokens: The tokens this job is expected to use (an int >= 0), charged to its
            lane's token budget (`LaneConfig.tokens`) when it starts and settled by the
            usage its output reports; None (the default) charges 0.

    Raises:
        TypeError: `key` is not a str, `fn` is not callable, is an async generator function
            or cannot be called with no arguments (the message names the key and the
            signature), `retry` is not a `RetryPolicy`, `persist` is not a bool, or `name` is
            not a str or None; the
            message names the value.
        InvalidKeyError: `key` is empty, has a lone surrogate or is too long.
        ValueError: `priority` is neither a `Priority` nor one of its values, `timeout`
            is not a positive, finite number of seconds, or `tokens` is not an int >= 0;
            the message names the value.

    Example:
        >>> Job("invoice-42", functools.partial(send_invoice, 42), Priority.HIGH, timeout=30)
    """

    key: str
    fn: Callable[[], Any]
    priority: Priority = Priority.MEDIUM
    timeout: float | None = field(default=None, kw_only=True)
    retry: RetryPolicy | None = field(default=None, kw_only=True)
    fingerprint: Any = field(default=None, kw_only=True)
    name: str | None = field(default=None, kw_only=True)

    @property
    def title(self) -> str:
        """How messages name this job: `name` if given, else ``job '<key>'``."""
        name = self.name
        return f"job {self.key!r}" if name is None else name
    persist: bool = field(default=True, kw_only=True)
    tokens: int | None = field(default=None, kw_only=True)

    def __new__(
        cls,
        key: str,
        fn: Callable[[], Any],
        priority: Priority = Priority.MEDIUM,
        *,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        fingerprint: Any = None,
        name: str | None = None,
        persist: bool = True,
        tokens: int | None = None,
    ) -> Job:
        # Built in `__new__`, with no `__init__` (building a Job is on every push, a cache
        # hit included). A frozen class refuses attribute assignment, so the generated
        # __init__ goes through object.__setattr__ per field, and even each slot's own
        # setter is a call with an argument tuple (issue 25: ~3,000 instructions a Job).
        # A Job is made as a `_Draft` (the same slots, assignable: plain stores), then
        # given its class: one check that the layouts match instead of nine calls.
        self: Any
        if cls is Job:
            self = _new_draft(_Draft)
            self.key = key
            self.fn = fn
            self.priority = priority
            self.timeout = timeout
            self.retry = retry
            self.fingerprint = fingerprint
            self.name = name
            self.persist = persist
            self.tokens = tokens
            self.__class__ = Job
        else:  # Job.__new__ called by a subclass's own __new__: as Job's __init__ builds it
            self = object.__new__(cls)
            _fill(self, key, fn, priority, timeout, retry, fingerprint, name, persist, tokens)
        # The common job is checked inline (building a Job is on the cache-hit path): an
        # ASCII key, a Priority member, no options, and a plain function or a partial of one
        # binding exactly its positional parameters. Anything else: the full `_validate`.
        if (
            type(key) is str
            and type(priority) is Priority
            and timeout is None
            and retry is None
            and name is None
            and persist is True
            and tokens is None
            and key.isascii()
            and 0 < len(key) <= MAX_KEY_BYTES
        ):
            kind = type(fn)
            if kind is functools.partial:
                func = fn.func  # type: ignore[attr-defined]
                if type(func) is FunctionType:
                    code = func.__code__
                    if (
                        code.co_argcount == len(fn.args)  # type: ignore[attr-defined]
                        and not code.co_kwonlyargcount
                        and not fn.keywords  # type: ignore[attr-defined]
                        and not code.co_flags & CO_ASYNC_GENERATOR
                    ):
                        return self  # type: ignore[no-any-return]
            elif kind is FunctionType:
                code = fn.__code__
                argcount = code.co_argcount  # (a code's attributes are generic lookups)
                if (not argcount or argcount <= len(fn.__defaults__ or ())) and not (
                    code.co_kwonlyargcount or code.co_flags & CO_ASYNC_GENERATOR
                ):
                    return self  # type: ignore[no-any-return]
        self._validate()
        return self  # type: ignore[no-any-return]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A subclass is built the ordinary way: its arguments (its own fields, its own
        # __init__'s) reach its __init__ — its own, a dataclass's, or Job's below — and not
        # the fixed signature of Job's __new__.
        super(Job, cls).__init_subclass__(**kwargs)  # (slots=True made a new class: no bare super)
        if "__new__" not in cls.__dict__:
            cls.__new__ = staticmethod(_bare_new)  # type: ignore[method-assign]

    if not TYPE_CHECKING:  # type checkers read Job's arguments off __new__

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # A Job is built whole by __new__ (this is called after it, with nothing to
            # do); a subclass without an __init__ of its own, or whose __init__ calls
            # ``super().__init__(key, fn, ...)``, is built and checked here, as a Job.
            if type(self) is not Job:
                _init_subclassed(self, *args, **kwargs)

    def __getnewargs_ex__(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments `copy` and `pickle` build a copy with (there is no bare `__new__`)."""
        return (self.key, self.fn, self.priority), {
            "timeout": self.timeout,
            "retry": self.retry,
            "fingerprint": self.fingerprint,
            "name": self.name,
            "persist": self.persist,
            "tokens": self.tokens,
        }

    def _validate(self) -> None:
        validate_key(self.key)
        fn = self.fn
        kind = type(fn)
        # The common cases are checked inline (building a Job is on the cache-hit path).
        if kind is FunctionType:
            code = fn.__code__
            async_generator = bool(code.co_flags & CO_ASYNC_GENERATOR)
            if code.co_kwonlyargcount or (
                code.co_argcount and code.co_argcount > len(fn.__defaults__ or ())
            ):  # a parameter without a default (``lambda i=i: ...`` has one with)
                check_no_arguments(self.key, fn)
        elif kind is functools.partial and type(fn.func) is FunctionType:  # type: ignore[attr-defined]
            code = fn.func.__code__  # type: ignore[attr-defined]
            async_generator = bool(code.co_flags & CO_ASYNC_GENERATOR)
            if (
                code.co_argcount != len(fn.args)  # type: ignore[attr-defined]
                or code.co_kwonlyargcount
                or fn.keywords  # type: ignore[attr-defined]
            ):
                check_no_arguments(self.key, fn)
        elif not callable(fn):
            raise TypeError(f"job {self.key!r}: fn must be callable, got {fn!r}")
        else:
            async_generator = is_async_generator(fn)
            check_no_arguments(self.key, fn)
        if async_generator:
            raise TypeError(
                f"job {self.key!r}: fn is an async generator function ({self.fn!r}), which "
                "returns no result to await; wrap it, e.g. in an async def that collects "
                "its items into a list"
            )
        if type(self.priority) is not Priority:
            what = f"job {self.key!r}: unknown priority"
            _set_priority(self, as_priority(self.priority, what))
        timeout = self.timeout
        if timeout is not None and not positive_seconds(timeout):
            raise ValueError(
                f"job {self.key!r}: timeout must be a positive, finite number of seconds or "
                f"None, got {timeout!r}"
            )
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise TypeError(
                f"job {self.key!r}: retry must be a RetryPolicy or None, got {self.retry!r}"
            )
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"job {self.key!r}: name must be a str or None, got {self.name!r}")
        if self.persist is not True and self.persist is not False:
            raise TypeError(f"job {self.key!r}: persist must be a bool, got {self.persist!r}")
        tokens = self.tokens
        if tokens is not None and (type(tokens) is not int or not 0 <= tokens < 2**63):
            raise ValueError(  # a store keeps it as a 64-bit integer
                f"job {self.key!r}: tokens must be an int in [0, 2**63) or None, got {tokens!r}"
            )


_slots: Any = Job.__dict__
_Draft: Any = type("_JobDraft", (_Weak,), {"__slots__": Job.__slots__})  # Job's layout, assignable
"""What `Job.__new__` fills in before it becomes a `Job` (``__class__`` assignment checks
that the two layouts are the same)."""
_new_draft = object.__new__
_set_key = _slots["key"].__set__
_set_fn = _slots["fn"].__set__
_set_priority = _slots["priority"].__set__
_set_timeout = _slots["timeout"].__set__
_set_retry = _slots["retry"].__set__
_set_fingerprint = _slots["fingerprint"].__set__
_set_name = _slots["name"].__set__
_set_persist = _slots["persist"].__set__
_set_tokens = _slots["tokens"].__set__


def _fill(self: Any, key: Any, fn: Any, priority: Any, timeout: Any, retry: Any,
          fingerprint: Any, name: Any, persist: Any, tokens: Any) -> None:
    """Set a (subclass's) instance's Job fields through the slots' own setters."""
    _set_key(self, key)
    _set_fn(self, fn)
    _set_priority(self, priority)
    _set_timeout(self, timeout)
    _set_retry(self, retry)
    _set_fingerprint(self, fingerprint)
    _set_name(self, name)
    _set_persist(self, persist)
    _set_tokens(self, tokens)


def _bare_new(cls: type[Job], *args: Any, **kwargs: Any) -> Job:
    """A `Job` subclass's `__new__`: an empty instance, filled in by its `__init__`."""
    return object.__new__(cls)


def _init_subclassed(self: Job, *args: Any, **kwargs: Any) -> None:
    """`Job.__init__` for a subclass's instance: a `Job` of the same arguments is built (so
    checked, its priority normalised) and its fields are taken."""
    job = Job(*args, **kwargs)
    _fill(self, job.key, job.fn, job.priority, job.timeout, job.retry, job.fingerprint,
          job.name, job.persist, job.tokens)


class JobEventKind(StrEnum):
    """What happened to a job (values are text, for logs and frames)."""

    QUEUED = "queued"
    """Admitted to its lane."""
    STARTED = "started"
    """An attempt started (``attempt`` is its number, 1-based)."""
    RETRY = "retry"
    """An attempt failed and another one follows after the backoff (``outcome`` says why)."""
    COMPLETED = "completed"
    """Terminal: the job returned (``outcome`` is `Completed`)."""
    FAILED = "failed"
    """Terminal: the job failed for good, timed out or was cancelled (``outcome`` is `Failed`)."""
    LOST = "lost"
    """Terminal: abandoned before it ran (its push was cancelled, or `Queue.close` dropped it);
    the key was released (or went back to its earlier Failed state)."""
    CACHED = "cached"
    """A push was answered from the completed key (``outcome`` is the `Completed`)."""
    JOINED = "joined"
    """A push joined the job already pending or running under this key."""


TERMINAL_KINDS = frozenset({JobEventKind.COMPLETED, JobEventKind.FAILED, JobEventKind.LOST})
"""Every job admitted or claimed by a push ends with exactly one event of these kinds."""


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One change of a job, as given to `Queue.subscribe` callbacks.

    Attributes:
        kind: What happened.
        key: The job's idempotency key.
        priority: The lane of the push or job it concerns.
        at: When, in seconds since the Unix epoch, by the queue's clock.
        attempt: The attempt number (1-based) for started, retry, completed and failed;
            None otherwise.
        outcome: The `Completed` or `Failed` for completed, failed, lost, retry and cached;
            None otherwise.
    """

    kind: JobEventKind
    key: str
    priority: Priority
    at: float
    attempt: int | None = None
    outcome: Outcome | None = None
