"""What parks a step on a keyed wait: `InputRequested`, and the limits of a wait's time.

`agentq.workflows.calls.CallLog` raises `InputRequested` from ``ctx.wait_for_input``,
``ctx.sleep`` and ``ctx.receive`` (and a child run's wait); the driver records it with
``wait_step``. Imports nothing of `agentq.workflows`.
"""

from __future__ import annotations

from typing import Any

from agentq.store import SLEEP_WAIT_PREFIX

__all__ = [
    "MAX_WAIT_TIMEOUT",
    "SLEEP_KEY_PREFIX",
    "SLEEP_REASON_PREFIX",
    "InputRequested",
    "check_timeout",
]

SLEEP_KEY_PREFIX = SLEEP_WAIT_PREFIX
"""Keys of durable sleeps: ``sleep:0`` is a step's first `ctx.sleep`, ``sleep:1`` its second."""

SLEEP_REASON_PREFIX = "sleeping until "
"""The start of a sleeping step's reason; the wake time follows, ISO-8601 UTC."""

MAX_WAIT_TIMEOUT = 10 * 365.25 * 24 * 3600.0
"""The longest ``wait_for_input`` timeout, in seconds (10 years): its deadline is stored, and
every deadline must be a time the frames (pandas timestamps) and widgets can show; a longer
one is refused (``timeout=None`` waits forever)."""


class InputRequested(BaseException):  # a signal, like CancelledError
    """Raised by `CallLog.wait` to park the step on a keyed wait; the driver records it.

    A control-flow signal, not an error: like `asyncio.CancelledError` it derives from
    `BaseException`, so that a body's ``except Exception`` (meant for `InputTimeout` or a
    flaky tool) lets it through. A body can still swallow it (``except BaseException``,
    ``gather(..., return_exceptions=True)``): the `CallLog` remembers every wait it
    requested (`CallLog.requested`), and the attempt ends waiting all the same.
    """

    def __init__(
        self,
        reason: str,
        key: str,
        details: dict[str, Any] | None,
        deadline: float | None,
        topic: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.key = key
        self.details = details
        self.deadline = deadline
        self.topic = topic
        """The topic of a `CallLog.receive` (its wait takes a message on it), else None."""


def check_timeout(what: str, timeout: object) -> None:
    """Refuse a timeout that is not None or a positive number of seconds up to 10 years.

    Raises:
        ValueError: `timeout` is something else (`what` names the wait in the message).
    """
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not (0 < timeout <= MAX_WAIT_TIMEOUT)  # NaN too
    ):
        raise ValueError(
            f"{what}: timeout must be a positive number of seconds of at most "
            f"{MAX_WAIT_TIMEOUT:.0f} (10 years) or None, got {timeout!r}"
        )
