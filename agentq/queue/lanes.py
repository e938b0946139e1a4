"""Priority lanes as users see them: `Priority`, `LaneConfig`, and the per-lane statistics.

A `Queue` has three lanes, one per `Priority`, and each is independent: its own waiting area
(``capacity``) and its own permits (``permits`` jobs run at once). A saturated lane never
starves another, and the priority only names the lane: give the lanes that matter more
permits. Jobs inside one lane start in the order they were admitted (FIFO).

How many jobs a lane admits, exactly: at most ``permits + capacity`` unfinished jobs, of which
at most ``permits`` run (each holds a permit) and the others wait. ``push`` waits, and
``push_nowait`` raises `QueueFull`, while ``queued + running == permits + capacity``. A job
holds its permit from its first attempt until its body has really stopped: through retries
and their backoff, and, after a timeout or a cancel, until a thread or a body that ignores
cancellation has returned. A run of a key whose previous run's body still runs holds its
permit while it waits for that body to stop. Cached and joined pushes take no room in any
lane.

The mechanism of one lane (its permits, waiting area and waiters) is `agentq.queue.lane.Lane`.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from agentq.queue.rates import Rate

__all__ = ["LaneConfig", "LaneStats", "Priority", "QueueStats"]


class Priority(StrEnum):
    """The three lanes. Values are stored as text: ``"low"``, ``"medium"``, ``"high"``.

    Members order by urgency, not alphabetically: ``LOW < MEDIUM < HIGH``. They compare equal
    to their text value (``Priority.HIGH == "high"``).
    """

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        """0 for LOW, 1 for MEDIUM, 2 for HIGH."""
        return _RANK[self]

    def __lt__(self, other: object) -> bool:
        if isinstance(other, Priority):
            return _RANK[self] < _RANK[other]
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if isinstance(other, Priority):
            return _RANK[self] <= _RANK[other]
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if isinstance(other, Priority):
            return _RANK[self] > _RANK[other]
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if isinstance(other, Priority):
            return _RANK[self] >= _RANK[other]
        return NotImplemented


_RANK = {Priority.LOW: 0, Priority.MEDIUM: 1, Priority.HIGH: 2}
LANE_ORDER = (Priority.HIGH, Priority.MEDIUM, Priority.LOW)
"""The lanes from the most to the least urgent: the order of `QueueStats.lanes`."""


def as_priority(value: object, what: str) -> Priority:
    """`value` as a `Priority`: a member, or its text value (``"low"``…).

    Raises:
        ValueError: Anything else: "<what> <value>: use a Priority or one of 'low', …".
    """
    if type(value) is Priority:
        return value
    if isinstance(value, str):
        try:
            return Priority(value)
        except ValueError:
            pass
    allowed = ", ".join(repr(p.value) for p in Priority)
    raise ValueError(f"{what} {value!r}: use a Priority or one of {allowed}")


def lane_configs(lanes: object) -> dict[Priority, LaneConfig]:
    """The `LaneConfig` per `Priority` of a queue's ``lanes=`` argument (None: none given).

    Raises:
        TypeError: `lanes` is not a mapping, or a value is not a `LaneConfig`.
        ValueError: A key is not a priority (the message names the allowed values).
    """
    configs: dict[Priority, LaneConfig] = {}
    if lanes is not None:
        if not isinstance(lanes, Mapping):
            raise TypeError(f"lanes must be a mapping of Priority to LaneConfig, got {lanes!r}")
        for name, config in lanes.items():
            priority = as_priority(name, "unknown lane")
            if not isinstance(config, LaneConfig):
                raise TypeError(f"lane {priority}: expected a LaneConfig, got {config!r}")
            configs[priority] = config
    return configs


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class LaneConfig:
    """The size of one lane.

    A lane admits at most ``permits + capacity`` unfinished jobs: ``permits`` running and
    ``capacity`` waiting for a permit.

    Args:
        capacity: How many admitted jobs may wait for a permit (>= 0). 0 means no waiting
            area: a job is admitted only when a permit is free.
        permits: How many jobs of this lane may run at once (>= 1).
        rate: At most ``rate.count`` jobs of this lane start in any ``rate.per_seconds``
            (a sliding window on the queue's clock), or None for no limit. A job that would
            exceed it waits in the lane, holding no permit, until the window has room.
        tokens: At most ``tokens.count`` tokens used by this lane's jobs in any
            ``tokens.per_seconds``, or None. A job is charged its estimate (``Job(...,
            tokens=n)``, 0 if not given) when it starts, waits until the window has room
            for it, and is settled by the usage its output reports (see ``docs/lanes.md``).

    Raises:
        TypeError: `rate` or `tokens` is neither a `Rate` nor None.
        ValueError: A count is not an int (bools are not accepted) or is out of range; the
            message names it.

    Example:
        >>> LaneConfig(capacity=10, permits=2, rate=Rate(60, 60.0))
        LaneConfig(capacity=10, permits=2, rate=Rate(count=60, per_seconds=60.0), tokens=None)
    """

    capacity: int = 100
    permits: int = 5
    rate: Rate | None = field(default=None, kw_only=True)
    tokens: Rate | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        _check_count("capacity", self.capacity, 0)
        _check_count("permits", self.permits, 1)
        for name in ("rate", "tokens"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Rate):
                raise TypeError(f"LaneConfig {name} must be a Rate or None, got {value!r}")

    @property
    def limit(self) -> int:
        """The most unfinished jobs the lane admits: ``permits + capacity``."""
        return self.permits + self.capacity


@dataclass(frozen=True, slots=True)
class LaneStats:
    """A frozen snapshot of one lane.

    Attributes:
        priority: Which lane.
        capacity: Configured size of the waiting area.
        permits: Configured number of jobs that may run at once.
        queued: Admitted jobs waiting for a permit.
        running: Permits in use: jobs running, in backoff between attempts, waiting for the
            previous run of their key to stop, or whose body has not stopped yet after a
            timeout or cancel. Never above `permits`.
        completed: Jobs of this lane that ended `Completed` (since the queue was created).
        failed: Jobs of this lane that ended `Failed` (errors, timeouts, cancels).
        cache_hits: Pushes to this lane answered from a completed key without running.
        joins: Pushes to this lane that joined a job already pending or running.
        paused_until: Clock time until which no job of the lane starts (a failure asked
            for it with ``retry_after``), or None.
        window_starts: Jobs started in the current `LaneConfig.rate` window (None: no rate).
        window_tokens: Tokens charged in the current `LaneConfig.tokens` window (None: no
            token budget).
    """

    priority: Priority
    capacity: int
    permits: int
    queued: int
    running: int
    completed: int
    failed: int
    cache_hits: int
    joins: int
    paused_until: float | None = None
    window_starts: int | None = None
    window_tokens: int | None = None


_COLUMNS = (
    ("lane", "priority"),
    ("capacity", "capacity"),
    ("permits", "permits"),
    ("queued", "queued"),
    ("running", "running"),
    ("completed", "completed"),
    ("failed", "failed"),
    ("cache hits", "cache_hits"),
    ("joins", "joins"),
)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """A frozen snapshot of every lane, from `Queue.stats`.

    Attributes:
        lanes: One `LaneStats` per lane, in priority order HIGH, MEDIUM, LOW.

    Index it by priority (``stats[Priority.HIGH]``) or iterate over the lanes. In Jupyter it
    displays as a small HTML table.
    """

    lanes: tuple[LaneStats, ...]

    def __getitem__(self, priority: Priority) -> LaneStats:
        for lane in self.lanes:
            if lane.priority == priority:
                return lane
        raise KeyError(priority)

    def __iter__(self) -> Iterator[LaneStats]:
        return iter(self.lanes)

    def __len__(self) -> int:
        return len(self.lanes)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(title)}</th>" for title, _ in _COLUMNS)
        rows = []
        for lane in self.lanes:
            cells = "".join(
                f"<td>{html.escape(str(getattr(lane, name)))}</td>" for _, name in _COLUMNS
            )
            rows.append(f"<tr>{cells}</tr>")
        return (
            '<table class="agentq-lanes"><thead><tr>'
            + head
            + "</tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table>"
        )
