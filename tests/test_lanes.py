"""`Priority`, `LaneConfig`, `LaneStats` and `QueueStats` (agentq.queue.lanes)."""

from __future__ import annotations

import pytest

from agentq.queue.lanes import LANE_ORDER, LaneConfig, LaneStats, Priority, QueueStats
from agentq.queue.queue import Queue


def test_priorities_are_text_values_ordered_by_urgency() -> None:
    assert [p.value for p in Priority] == ["low", "medium", "high"]
    assert Priority.HIGH == "high" and str(Priority.LOW) == "low"
    assert Priority.LOW < Priority.MEDIUM < Priority.HIGH
    assert Priority.HIGH >= Priority.HIGH > Priority.LOW
    assert sorted([Priority.HIGH, Priority.LOW, Priority.MEDIUM]) == list(Priority)
    assert [p.rank for p in LANE_ORDER] == [2, 1, 0]
    assert {Priority.HIGH: 1}["high"] == 1


def test_lane_config_defaults_and_limit() -> None:
    config = LaneConfig()
    assert (config.capacity, config.permits, config.limit) == (100, 5, 105)
    assert LaneConfig(capacity=0, permits=1).limit == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": -1}, "capacity must be an int >= 0, got -1"),
        ({"permits": 0}, "permits must be an int >= 1, got 0"),
        ({"permits": True}, "permits must be an int >= 1, got True"),
        ({"capacity": False}, "capacity must be an int >= 0, got False"),
        ({"capacity": 2.0}, "capacity must be an int >= 0, got 2.0"),
        ({"permits": "3"}, "permits must be an int >= 1, got '3'"),
    ],
)
def test_invalid_lane_configs_raise_value_error_naming_the_value(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        LaneConfig(**kwargs)  # type: ignore[arg-type]


def test_queue_stats_are_ordered_high_to_low_and_indexable() -> None:
    queue = Queue({Priority.LOW: LaneConfig(capacity=1, permits=2)})
    stats = queue.stats()
    assert [lane.priority for lane in stats] == [Priority.HIGH, Priority.MEDIUM, Priority.LOW]
    assert len(stats) == 3 and stats.lanes[2] is stats[Priority.LOW]
    assert stats[Priority.LOW] == LaneStats(Priority.LOW, 1, 2, 0, 0, 0, 0, 0, 0)
    assert stats[Priority.HIGH].capacity == 100
    with pytest.raises(KeyError):
        stats["urgent"]  # type: ignore[index]


def test_queue_stats_render_as_an_escaped_html_table() -> None:
    lane = LaneStats("<b>x</b>", 1, 2, 3, 4, 5, 6, 7, 8)  # type: ignore[arg-type]
    markup = QueueStats((lane,))._repr_html_()
    assert markup.startswith("<table") and markup.endswith("</table>")
    assert "&lt;b&gt;x&lt;/b&gt;" in markup and "<b>x" not in markup
    assert "<th>cache hits</th>" in markup and "<td>8</td>" in markup
