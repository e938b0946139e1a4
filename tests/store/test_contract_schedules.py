"""The schedule verbs on every store (memory, SQLite, PostgreSQL): rows read back the same,
replace semantics, the compare-and-swap of a tick with its instance, and refusals that write
nothing."""

from __future__ import annotations

import pytest

from agentq.errors import InvalidKeyError, PayloadError
from agentq.store import DurableStore, ScheduleRow, WorkflowState, instance_id
from agentq.store.contract.schedules import MAX_SCHEDULE_NAME_BYTES

T0 = 1_767_225_600.0


async def put(store: DurableStore, name: str = "n", **kw: object) -> tuple[ScheduleRow, bool]:
    args: dict[str, object] = {
        "cron": None, "every": 60.0, "input": {"a": 1}, "next_tick": T0 + 60, "now": T0,
    }
    args.update(kw)
    return await store.put_schedule(name, "report", **args)  # type: ignore[arg-type]


async def test_a_schedule_reads_back_as_stored(store: DurableStore) -> None:
    row, changed = await store.put_schedule(
        "ü/n\x00", "d", cron="0 9 * * *", every=None, input={"a": [1, "é"]}, next_tick=5.0,
        now=1.0,
    )
    assert changed
    assert row == ScheduleRow("ü/n\x00", "d", "0 9 * * *", None, {"a": [1, "é"]}, 5.0, 1.0)
    assert await store.schedules() == [row]
    await put(store, "a")
    assert [r.name for r in await store.schedules()] == ["a", "ü/n\x00"]  # by name
    assert await store.delete_schedule("ü/n\x00") is True
    assert await store.delete_schedule("ü/n\x00") is False
    assert [r.name for r in await store.schedules()] == ["a"]


async def test_the_same_schedule_again_is_kept_another_replaces_it(store: DurableStore) -> None:
    first, _ = await put(store)
    again, changed = await put(store, next_tick=T0 + 999, now=T0 + 5)
    assert not changed and again == first  # its next tick kept
    replaced, changed = await put(store, input={"a": 2}, next_tick=T0 + 99, now=T0 + 5)
    assert changed and (replaced.next_tick, replaced.input) == (T0 + 99, {"a": 2})
    assert await store.schedules() == [replaced]


async def test_a_tick_fires_once_and_starts_its_instance(store: DurableStore) -> None:
    row, _ = await put(store)
    wid = await store.fire_schedule(row, tick=T0 + 120, next_tick=T0 + 180, step_names=["go"],
                                    now=T0 + 130, deadline=T0 + 500)
    assert wid == instance_id("n", T0 + 120) == "n@2026-01-01T00:02:00Z"
    started = await store.get_workflow(wid)
    assert started is not None and started.state is WorkflowState.RUNNING
    assert (started.definition, started.input, started.deadline) == ("report", {"a": 1}, T0 + 500)
    (after,) = await store.schedules()
    assert (after.next_tick, after.last_tick, after.last_instance) == (T0 + 180, T0 + 120, wid)
    seq = await store.last_seq()
    # The row read before the fire is stale now: nothing is written.
    assert await store.fire_schedule(row, tick=T0 + 120, next_tick=T0 + 180,
                                     step_names=["go"], now=T0 + 131) is None
    assert await store.last_seq() == seq and await store.schedules() == [after]


async def test_a_replaced_or_deleted_schedule_fires_nothing(store: DurableStore) -> None:
    row, _ = await put(store)
    await put(store, every=30.0, next_tick=T0 + 30)
    assert await store.fire_schedule(row, tick=T0 + 60, next_tick=T0 + 120, step_names=["go"],
                                     now=T0 + 60) is None
    (fresh,) = await store.schedules()
    await store.delete_schedule("n")
    assert await store.fire_schedule(fresh, tick=T0 + 30, next_tick=T0 + 60,
                                     step_names=["go"], now=T0 + 60) is None
    assert await store.workflows() == [] and await store.last_seq() == 0


async def test_an_instance_id_stored_already_with_other_steps_spends_the_tick(
    store: DurableStore,
) -> None:
    row, _ = await put(store)
    await store.start_workflow(instance_id("n", T0 + 60), ["other"], None, T0, definition="x")
    assert await store.fire_schedule(row, tick=T0 + 60, next_tick=T0 + 120, step_names=["go"],
                                     now=T0 + 60) is None
    (after,) = await store.schedules()
    assert after.next_tick == T0 + 120  # the schedule moved on; the stored workflow is kept


@pytest.mark.parametrize(
    ("name", "kw", "error"),
    [
        ("", {}, InvalidKeyError),
        ("x" * (MAX_SCHEDULE_NAME_BYTES + 1), {}, InvalidKeyError),
        ("n", {"cron": "* * * * *"}, ValueError),  # and every: both
        ("n", {"every": None}, ValueError),  # neither
        ("n", {"every": 0.0}, ValueError),
        ("n", {"every": "1"}, TypeError),
        ("n", {"every": None, "cron": 5}, TypeError),
        ("n", {"every": None, "cron": "0 9 * * *\x00"}, ValueError),
        ("n", {"every": None, "cron": "  "}, ValueError),
        ("n", {"input": object()}, PayloadError),
        ("n", {"next_tick": float("nan")}, ValueError),
    ],
)
async def test_bad_arguments_store_nothing(
    store: DurableStore, name: str, kw: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        await put(store, name, **kw)
    assert await store.schedules() == []


async def test_a_bad_tick_is_refused(store: DurableStore) -> None:
    row, _ = await put(store)
    with pytest.raises(ValueError, match="tick"):
        await store.fire_schedule(row, tick=T0, next_tick=T0 + 120, step_names=["go"], now=T0)
    with pytest.raises(ValueError, match="tick"):
        await store.fire_schedule(row, tick=T0 + 60, next_tick=T0 + 60, step_names=["go"],
                                  now=T0)
    assert await store.workflows() == []


async def test_the_longest_name_makes_instance_ids_that_are_keys(store: DurableStore) -> None:
    name = "é" * (MAX_SCHEDULE_NAME_BYTES // 2)
    row, _ = await put(store, name, every=0.25, next_tick=T0 + 0.25)
    wid = await store.fire_schedule(row, tick=T0 + 0.25, next_tick=T0 + 0.5, step_names=["go"],
                                    now=T0 + 0.3)
    assert wid == f"{name}@2026-01-01T00:00:00.250000Z"
