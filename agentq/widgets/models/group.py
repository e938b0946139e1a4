"""`GroupProgress`: a run group's progress folded from its members' rows (no ipywidgets).

`read_progress` reads a group (its manifest, its members' rows, the usage their durable
calls recorded) and folds it with the time into a `GroupProgress`: counts by state, the
failures with their reasons, tokens and cost so far (cost only given a price table), the
rate at which members end and an estimate of the time left. `UsageCache` keeps the usage of
ended members, which no longer changes, so a refresh re-reads only the open members' calls.
The progress widget (`agentq.widgets.group`) and the script's progress line draw it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentq.errors import UnknownWorkflowError
from agentq.store import DurableGroups, DurableStore, WorkflowRow, WorkflowState, summed_usage
from agentq.workflows import GroupStatus

__all__ = ["Failure", "GroupProgress", "UsageCache", "fold_progress", "read_progress"]


@dataclass(frozen=True, slots=True)
class Failure:
    """A member that failed or was cancelled: its key, state and reason."""

    key: str
    state: str
    reason: str


@dataclass(frozen=True, slots=True)
class GroupProgress:
    """A run group's progress at one time.

    Attributes:
        group_id: The group.
        status: Members counted by state.
        failures: The failed and cancelled members, in the order submitted.
        tokens: Usage figures summed over every member's recorded calls (e.g.
            ``input_tokens``, ``output_tokens``).
        cost: ``sum(prices[name] * tokens[name])`` given a price table, else None.
        elapsed: Seconds since the first member started (0 before any did).
        rate: Members ended per second over `elapsed`, or None before the first end.
        eta: Seconds left at `rate` for the members not ended, or None when unknown
            (nothing ended yet) and 0 once every member has ended.
    """

    group_id: str
    status: GroupStatus
    failures: tuple[Failure, ...] = ()
    tokens: Mapping[str, int] = field(default_factory=dict)
    cost: float | None = None
    elapsed: float = 0.0
    rate: float | None = None
    eta: float | None = None

    @property
    def done(self) -> bool:
        """Whether every member has ended."""
        return self.status.ended == self.status.total


class UsageCache:
    """The usage of each member whose calls were read; an ended member's is read once."""

    def __init__(self) -> None:
        self._ended: dict[str, dict[str, int] | None] = {}

    async def usage(self, store: DurableStore, row: WorkflowRow) -> dict[str, int] | None:
        """The member's summed call usage (`summed_usage`), cached once it has ended."""
        if row.workflow_id in self._ended:
            return self._ended[row.workflow_id]
        found = summed_usage([c.usage for c in await store.calls(row.workflow_id)])
        if row.state.closed:
            self._ended[row.workflow_id] = found
        return found


def fold_progress(
    group_id: str,
    keys: list[str],
    rows: Mapping[str, WorkflowRow],
    usages: Mapping[str, dict[str, int] | None],
    now: float,
    prices: Mapping[str, float] | None = None,
) -> GroupProgress:
    """Fold a group's member rows into its `GroupProgress` at `now` (pure).

    Args:
        group_id: The group.
        keys: The manifest's keys, in the order submitted.
        rows: The stored members' rows by key (a key missing: pending).
        usages: Each member's summed call usage by key.
        now: Unix seconds.
        prices: Cost per unit of a usage figure (e.g. ``{"input_tokens": 3e-6,
            "output_tokens": 1.5e-5}``), or None: no cost.
    """
    counts = dict.fromkeys(GroupStatus(), 0)
    failures: list[Failure] = []
    tokens: dict[str, int] = {}
    for key in keys:
        row = rows.get(key)
        counts["pending" if row is None else row.state.value] += 1
        if row is not None and row.state in (WorkflowState.FAILED, WorkflowState.CANCELLED):
            failures.append(Failure(key, row.state.value, row.reason or ""))
        for name, value in (usages.get(key) or {}).items():
            tokens[name] = tokens.get(name, 0) + value
    status = GroupStatus(**counts)
    started = [row.created_at for row in rows.values()]
    if started and status.ended == status.total:  # ended: the time it took, not until now
        now = max(row.updated_at for row in rows.values())
    elapsed = max(0.0, now - min(started)) if started else 0.0
    rate = status.ended / elapsed if status.ended and elapsed > 0 else None
    left = status.total - status.ended
    eta = 0.0 if left == 0 else (left / rate if rate else None)
    cost = None
    if prices is not None:
        cost = sum(float(price) * tokens.get(name, 0) for name, price in prices.items())
    return GroupProgress(group_id, status, tuple(failures), tokens, cost, elapsed, rate, eta)


async def read_progress(
    store: DurableStore,
    group_id: str,
    now: float,
    *,
    prices: Mapping[str, float] | None = None,
    cache: UsageCache | None = None,
) -> GroupProgress:
    """Read group `group_id` and fold it (`fold_progress`).

    Raises:
        UnknownWorkflowError: No such group in the store.
        TypeError: The store keeps no run groups.
    """
    if not isinstance(store, DurableGroups):
        raise TypeError(f"{store!r} keeps no run groups (it has no DurableGroups verbs)")
    manifest = await store.load_group(group_id)
    if manifest is None:
        raise UnknownWorkflowError(f"no run group {group_id!r} is in the store")
    cache = cache if cache is not None else UsageCache()
    prefix = len(group_id) + 1
    rows: dict[str, WorkflowRow] = {}
    for row in await store.group_members(group_id):
        if row.workflow_id[prefix:] in manifest.items:
            rows[row.workflow_id[prefix:]] = row
    usages: dict[str, Any] = {key: await cache.usage(store, row) for key, row in rows.items()}
    return fold_progress(group_id, list(manifest.items), rows, usages, now, prices)
