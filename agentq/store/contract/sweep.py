"""Retention: what `DurableStore.sweep` reports (`SweepReport`) and how its arguments are checked.

A sweep removes ended workflows, each with everything the store keeps of it (its events, step
rows, call and wait rows, and the queue job outcomes of its calls), in bounded batches: one
short transaction per `SWEEP_BATCH` workflows, so other writers take turns with a long sweep.
Which workflows it keeps whatever its arguments say is written once, for every store, in
``agentq.store.rules.sweep``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from agentq.clock import unix_seconds
from agentq.store.contract.rows import WorkflowState

__all__ = ["DEFAULT_SWEPT_STATES", "SWEEP_BATCH", "SweepReport", "check_sweep"]

SWEEP_BATCH = 200
"""Workflows examined per transaction of a sweep (each transaction is short: other writers,
in this process or another, take turns with a sweep of a million workflows)."""

DEFAULT_SWEPT_STATES = ("completed", "cancelled")
"""The states `DurableStore.sweep` removes by default: failed workflows are kept (they can be
retried, and are what one looks at after the fact) unless asked for."""

_ENDED = tuple(s.value for s in WorkflowState if s.closed)


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one `DurableStore.sweep` removed.

    Attributes:
        workflows: Workflows removed (each with its step rows).
        events: Events of theirs removed from the log.
        calls: Call and wait rows of theirs removed (``ctx.call``, ``ctx.wait_for_input``,
            child runs' waits).
    """

    workflows: int = 0
    events: int = 0
    calls: int = 0

    def __add__(self, other: SweepReport) -> SweepReport:
        return SweepReport(
            self.workflows + other.workflows,
            self.events + other.events,
            self.calls + other.calls,
        )


def check_sweep(
    ended_before: float | datetime, states: Iterable[str]
) -> tuple[float, tuple[WorkflowState, ...]]:
    """Check the arguments of `DurableStore.sweep`; return ``(cutoff, states)``.

    Args:
        ended_before: Unix seconds or an aware `datetime`.
        states: Some of ``"completed"``, ``"failed"``, ``"cancelled"`` (str or
            `WorkflowState`), at least one; a single str is refused (it would read as its
            letters).

    Returns:
        The cutoff as Unix seconds, and the states without repeats, in the order given.

    Raises:
        ValueError: A naive `datetime` or a number that is not finite (the message names
            ``ended_before``); no state, or one that is not an ended state (running and
            waiting workflows are never swept; the message names it).
        TypeError: `ended_before` is neither a number nor a `datetime`; `states` is a str
            or not iterable, or holds something that is not a str.
    """
    cutoff = unix_seconds(ended_before, "ended_before")
    if isinstance(states, str | bytes) or not isinstance(states, Iterable):
        raise TypeError(
            f"states must be a list or tuple of state names (e.g. ('completed',)), got "
            f"{states!r:.80}"
        )
    wanted: list[WorkflowState] = []
    for state in states:
        if not isinstance(state, str):
            raise TypeError(f"states must hold state names (str), got {state!r:.80}")
        if state not in _ENDED:
            raise ValueError(
                f"sweep removes ended workflows only: states must be among {list(_ENDED)}, "
                f"got {state!r:.80}"
            )
        found = WorkflowState(state)
        if found not in wanted:
            wanted.append(found)
    if not wanted:
        raise ValueError(f"states must name at least one of {list(_ENDED)}, got none")
    return cutoff, tuple(wanted)
