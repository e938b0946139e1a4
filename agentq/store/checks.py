"""Argument checks of the store verbs, shared by every store.

Every store checks its arguments the same way, before reading or writing anything: the wrong
type raises `TypeError`, a bad value `ValueError` (ids: `InvalidKeyError`), a value that is
not JSON or too large `PayloadError` (see `agentq.codec`).

Text that only describes (failure and wait reasons, error messages and tracebacks,
cancellation reasons) is never refused, so that a failure can always be recorded: lone
surrogates and NUL characters are written as backslash escapes, and text longer than
`MAX_TEXT_CHARS` is cut.
"""

from __future__ import annotations

import math
from typing import Any

from agentq.codec import MAX_TEXT_CHARS, decode, encode, storable_text
from agentq.events import utc
from agentq.outcomes import ErrorInfo
from agentq.store.claims import Execution
from agentq.store.rows import WorkflowState

__all__ = [
    "MAX_TEXT_CHARS",
    "check_error",
    "check_execution",
    "check_index",
    "check_now",
    "check_payload",
    "check_seq",
    "check_state",
    "check_text",
    "check_ttl",
    "check_number",
]

def check_number(value: object, what: str) -> float:
    """Return `value` (Unix seconds) as a float; `TypeError` / `ValueError` if not finite."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of Unix seconds, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return result


def check_now(value: object) -> tuple[float, float]:
    """Return ``(now, at)``: the time as given, and rounded to the microsecond for events."""
    now = check_number(value, "now")
    try:
        at = utc(now).timestamp()
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"now must be a date Python can represent, got {value!r}") from None
    return now, at


def check_ttl(value: object) -> float:
    """Return a lease length (seconds, positive and finite) as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"lease_ttl must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"lease_ttl must be a positive finite number of seconds, got {value!r}")
    return float(value)


def check_index(value: object) -> int:
    """Return a step index (an int, not a bool); its range is checked against the workflow."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"step_index must be an int, got {value!r}")
    return int(value)


def check_execution(value: object) -> Execution:
    """Return `value` if it is an `Execution`, else raise `TypeError`."""
    if not isinstance(value, Execution):
        raise TypeError(f"expected an Execution (from claim_step), got {value!r:.80}")
    return value


def check_text(value: object, what: str) -> str:
    """Return storable text (`agentq.codec.storable_text`: lone surrogates and NUL escaped,
    cut at `MAX_TEXT_CHARS`); `TypeError` naming `what` if `value` is not a str."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}: {value!r:.80}")
    return storable_text(str(value))


def check_error(value: object) -> dict[str, str] | None:
    """Return an `ErrorInfo` (or None) as the JSON object a `StepFailed` event stores."""
    if value is None:
        return None
    if not isinstance(value, ErrorInfo):
        raise TypeError(f"error must be an ErrorInfo or None, got {value!r:.80}")
    return {
        "type": check_text(value.type, "error.type"),
        "message": check_text(value.message, "error.message"),
        "traceback": check_text(value.traceback, "error.traceback"),
    }


def check_payload(value: Any, field: str) -> tuple[Any, str]:
    """Encode a JSON value; return it as it will read back (tuples become lists) and its text."""
    if value is None:
        return None, "null"
    text = encode(value, field)
    if type(value) in (str, int, float, bool) or value is None:
        return value, text
    return decode(text), text


def check_state(state: object) -> WorkflowState | None:
    """Validate the `state` filter of `DurableStore.workflows`."""
    if state is None or isinstance(state, WorkflowState):
        return state
    if isinstance(state, str):
        try:
            return WorkflowState(state)
        except ValueError:
            pass
    raise ValueError(f"state must be a WorkflowState or None, got {state!r}")


def check_seq(after_seq: object, limit: object = None) -> tuple[int, int | None]:
    """Validate the `after_seq` and `limit` arguments of the event readers."""
    if isinstance(after_seq, bool) or not isinstance(after_seq, int):
        raise TypeError(f"after_seq must be an int, got {after_seq!r}")
    if after_seq < 0:
        raise ValueError(f"after_seq must be >= 0, got {after_seq!r}")
    if limit is None:
        return after_seq, None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int or None, got {limit!r}")
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit!r}")
    return after_seq, limit
