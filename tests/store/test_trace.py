"""Contract: `start_workflow(trace=...)` keeps a W3C trace context in `WorkflowStarted`."""

from __future__ import annotations

import pytest

from agentq.store import DurableStore

from .conftest import T0


async def test_the_store_keeps_a_trace_only_as_a_dict_of_strings(store: DurableStore) -> None:
    with pytest.raises(TypeError, match="trace must be a dict of str"):
        await store.start_workflow(
            "t-1", ["a"], None, T0, trace={"traceparent": 1}  # type: ignore[dict-item]
        )
    assert await store.get_workflow("t-1") is None
    row, created = await store.start_workflow("t-1", ["a"], None, T0, trace={"traceparent": "tp"})
    assert created
    (event,) = await store.load_events("t-1")
    assert event.data["trace"] == {"traceparent": "tp"}
    _, again = await store.start_workflow("t-1", ["a"], None, T0, trace={"traceparent": "x"})
    assert not again
    await store.rebuild_projection()
    assert (await store.get_workflow("t-1")) == row
    (event,) = await store.load_events("t-1")  # the log is the record: rebuilt the same
    assert event.data["trace"] == {"traceparent": "tp"}
