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
from collections.abc import Mapping, Sequence
from typing import Any

from agentq.codec import MAX_TEXT_CHARS, encode_copy, storable_text
from agentq.events import utc
from agentq.keys import validate_key
from agentq.outcomes import ErrorInfo
from agentq.store.contract.claims import Execution
from agentq.store.contract.rows import WorkflowState

__all__ = [
    "MAX_TEXT_CHARS",
    "check_count",
    "check_duration",
    "check_error",
    "check_execution",
    "check_fingerprint",
    "check_index",
    "check_job_save",
    "check_now",
    "check_number",
    "check_object",
    "check_payload",
    "check_seq",
    "check_state",
    "check_text",
    "check_ttl",
]

def check_number(value: object, what: str) -> float:
    """Return `value` (Unix seconds) as a float; `TypeError` / `ValueError` if not finite."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of Unix seconds, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return result


_LAST_SECOND = 253_402_300_799
"""9999-12-31T23:59:59Z, the last whole second a `datetime` holds."""


def check_now(value: object) -> tuple[float, float]:
    """Return ``(now, at)``: the time as given, and rounded to the microsecond for events
    (``utc(now).timestamp()``, computed as `datetime` computes it: the fraction's
    microseconds rounded half to even, then whole microseconds over 10**6)."""
    now = check_number(value, "now")
    if 0.0 <= now <= _LAST_SECOND:
        fraction, whole = math.modf(now)
        return now, (int(whole) * 1_000_000 + round(fraction * 1e6)) / 1_000_000
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


def check_count(value: object, what: str) -> int:
    """Return a count (an int >= 0, not a bool), e.g. ``max_recoveries``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
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
    return encode_copy(value, field)


def check_object(value: Any, field: str) -> tuple[dict[str, Any] | None, str]:
    """Encode a JSON object (a dict with str keys) or None, as `check_payload` does.

    Raises:
        TypeError: `value` is neither a dict nor None (the message names the field).
        PayloadError: Something inside it is not JSON, or it is too large.
    """
    if value is not None and not isinstance(value, dict):
        raise TypeError(
            f"{field} must be a JSON object (a dict with str keys) or None, got "
            f"{type(value).__name__}: {value!r:.80}"
        )
    return check_payload(value, field)


def check_duration(value: object) -> float:
    """Return a duration (seconds, finite, >= 0) as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"duration must be a number of seconds, got {value!r:.80}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"duration must be finite seconds >= 0, got {value!r}")
    return float(value)


def check_fingerprint(value: object) -> str | None:
    """Return a call's fingerprint: None (not compared) or text compared exactly.

    Unlike descriptive text it is never escaped nor cut (two fingerprints must stay
    different): one that is not UTF-8 or longer than `MAX_TEXT_CHARS` is refused.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"fingerprint must be a str or None, got {value!r:.80}")
    text = str(value)
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(
            f"fingerprint is {len(text)} characters; the limit is {MAX_TEXT_CHARS} (store a hash)"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"fingerprint {text[:40]!r} is not UTF-8 (lone surrogate at index {exc.start})"
        ) from None
    return text


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


def check_job_save(
    key: object,
    fingerprint: object,
    output: Any,
    completed_at: object,
    expires_at: object,
) -> tuple[str, str, Any, str, float, float | None]:
    """Check the arguments of `JobOutcomeStore.save_job`, cheapest first.

    Returns:
        ``(key, fingerprint, output as it reads back, output's JSON text, completed_at,
        expires_at)``.

    Raises:
        TypeError / InvalidKeyError: `key` or `fingerprint` is not valid text (non-empty,
            UTF-8, at most 1024 bytes).
        TypeError / ValueError: A time is not a finite number, or `expires_at` is not later
            than `completed_at`.
        PayloadError: `output` is not JSON or is too large.
    """
    key = validate_key(key)
    fingerprint = validate_key(fingerprint, "fingerprint")
    done = check_number(completed_at, "completed_at")
    expires = None if expires_at is None else check_number(expires_at, "expires_at")
    if expires is not None and expires <= done:
        raise ValueError(
            f"expires_at ({expires_at!r}) must be later than completed_at ({completed_at!r})"
        )
    value, text = check_payload(output, "output")
    return key, fingerprint, value, text, done, expires


def check_prefix(value: object) -> str:
    """Return a worker id prefix (a str, "" included) as given.

    Raises:
        TypeError: `value` is not a str.
    """
    if not isinstance(value, str):
        raise TypeError(f"worker_prefix must be a str, got {value!r:.80}")
    return value


def check_ready(
    now: object, definitions: object, limit: object
) -> tuple[float, dict[str, tuple[str, ...]], int]:
    """Validate the arguments of `DurableStore.ready_workflows`: ``(now, served, limit)``,
    `served` a new dict of definition name -> tuple of step names.

    Raises:
        TypeError: `definitions` is not a mapping of str names to sequences of str step
            names; `limit` is not an int.
        ValueError: A definition has no step names; `limit` is not >= 1; `now` is not
            finite.
    """
    at = check_number(now, "now")
    if not isinstance(definitions, Mapping):
        raise TypeError(
            "definitions must map definition names to their step names, got "
            f"{definitions!r:.80}"
        )
    served: dict[str, tuple[str, ...]] = {}
    for name, steps in definitions.items():
        if not isinstance(name, str):
            raise TypeError(f"definitions must have str names, got {name!r:.80}")
        if isinstance(steps, str | bytes) or not isinstance(steps, Sequence):
            raise TypeError(
                f"definition {name!r} must map to a sequence of step names, got {steps!r:.80}"
            )
        if not steps or not all(isinstance(step, str) for step in steps):
            raise (TypeError if steps else ValueError)(
                f"definition {name!r} must map to step names (str), got {steps!r:.80}"
            )
        served[name] = tuple(steps)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int >= 1, got {limit!r}")
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit!r}")
    return at, served, limit

