"""What a run group reports: `GroupMember` (one member that ended) and `GroupStatus` (the
members counted by state)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["STATES", "GroupMember", "GroupStatus"]

STATES = ("pending", "running", "waiting", "completed", "failed", "cancelled")
"""A member's states, as `GroupStatus` counts them (pending: in the manifest, not stored)."""


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member of a run group, as `RunGroup.results` yields it once it has ended.

    Attributes:
        key: The member's key in the group.
        workflow_id: Its workflow id, ``<group_id>/<key>``.
        status: ``"completed"``, ``"failed"`` or ``"cancelled"``.
        output: The output of its last step when completed, else None.
        reason: Why it failed or was cancelled, else None.
        usage: The usage figures its durable calls recorded, summed by name (integers),
            or None when none was recorded.
        ended_at: Unix seconds of its last event.
    """

    key: str
    workflow_id: str
    status: str
    output: Any
    reason: str | None
    usage: dict[str, int] | None
    ended_at: float


@dataclass(frozen=True, slots=True)
class GroupStatus(Mapping[str, int]):
    """How many members of a group are in each state (also a read-only mapping of those
    counts, state name to count, in the order of the fields).

    Attributes:
        pending: Members in the manifest not stored yet (a crash between the manifest and
            their start; `resume` starts them).
        running: Started and not ended, not waiting.
        waiting: Waiting for input, a child run, a timer.
        completed: Ended completed.
        failed: Ended failed.
        cancelled: Ended cancelled.
    """

    pending: int = 0
    running: int = 0
    waiting: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        """How many members the group has."""
        return sum(self.values())

    @property
    def ended(self) -> int:
        """How many members have ended (completed, failed or cancelled)."""
        return self.completed + self.failed + self.cancelled

    def __getitem__(self, state: str) -> int:
        if state not in STATES:
            raise KeyError(state)
        value: int = getattr(self, state)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(STATES)

    def __len__(self) -> int:
        return len(STATES)
