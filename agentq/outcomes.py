"""What a job ended as, and what state an idempotency key is in.

`Outcome` is what awaiting a `JobHandle` yields: `Completed(output)` or `Failed(reason, error)`.
`State` is what `Queue.state(key)` reports: `Pending`, `Processing`, or one of the outcomes.
All are frozen dataclasses, usable with `match`.
"""

from __future__ import annotations

import traceback as _traceback
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "Completed",
    "ErrorInfo",
    "Failed",
    "FailureReason",
    "Outcome",
    "Pending",
    "Processing",
    "State",
]


class FailureReason(StrEnum):
    """Why a job or step attempt failed."""

    ERROR = "error"
    """The body raised an exception."""
    TIMEOUT = "timeout"
    """The body ran longer than its timeout and was cancelled."""
    CANCELLED = "cancelled"
    """The job was cancelled (`JobHandle.cancel`, or `Queue.close` without drain)."""


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """A JSON-friendly description of an exception.

    Attributes:
        type: Qualified name of the exception class, e.g. ``mypkg.errors.APIError``; a
            builtin one without its module (``ValueError``, ``SystemExit``).
        message: ``str(exception)``, or ``<unprintable TypeName>`` when that fails.
        traceback: The formatted traceback text ('' when there is none).
    """

    type: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        """Describe `exc`, including its traceback text; never raises.

        An exception whose ``__str__`` fails (raises, or returns something other than a
        str) gets the message ``<unprintable TypeName>``; a traceback that cannot be
        formatted gets a one-line stand-in saying so.
        """
        kind = type(exc)
        module = getattr(kind, "__module__", None)
        qualname = getattr(kind, "__qualname__", None) or kind.__name__
        name = qualname if module == "builtins" or not isinstance(module, str) else (
            f"{module}.{qualname}"
        )
        try:
            message = str(exc)
        except BaseException:
            message = f"<unprintable {kind.__name__}>"
        try:
            text = "".join(_traceback.format_exception(exc))
        except BaseException as failure:
            text = f"{name}: {message}\n(traceback unavailable: {type(failure).__name__})\n"
        return cls(type=name, message=message, traceback=text)

    def to_dict(self) -> dict[str, str]:
        """Return ``{"type": …, "message": …, "traceback": …}``."""
        return {"type": self.type, "message": self.message, "traceback": self.traceback}

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass(frozen=True, slots=True)
class Completed:
    """The job returned `output`; its key now answers with it (cached)."""

    output: Any


@dataclass(frozen=True, slots=True)
class Failed:
    """The job failed; the key may be pushed again.

    Attributes:
        reason: error, timeout or cancelled.
        error: Type, message and traceback text of the exception.
        exception: The exception object itself (not compared, not shown in repr).
    """

    reason: FailureReason
    error: ErrorInfo
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.reason}: {self.error}"


@dataclass(frozen=True, slots=True)
class Pending:
    """The job is admitted and waits in its lane."""


@dataclass(frozen=True, slots=True)
class Processing:
    """The job is running (or between two of its attempts)."""


Outcome = Completed | Failed
State = Pending | Processing | Completed | Failed
