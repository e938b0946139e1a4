"""The run-group verbs of every store (`DurableGroups`): record once, load, forget, members."""

from __future__ import annotations

import pytest

from agentq.errors import InvalidKeyError, PayloadError
from agentq.store import DurableGroups, DurableStore, GroupManifest

from .conftest import T0

ITEMS = {"b": {"q": [1, 2]}, "a": None, "é": (3, "x")}


async def test_record_load_and_forget(store: DurableStore) -> None:
    assert isinstance(store, DurableGroups)
    manifest, created = await store.record_group("g", definition="d", items=ITEMS, now=T0)
    assert created is True
    names = {"b": "d", "a": "d", "é": "d"}
    expected = GroupManifest("g", names, {"b": {"q": [1, 2]}, "a": None, "é": [3, "x"]}, T0)
    assert manifest == expected and manifest.definition == "d"
    assert list(manifest.items) == ["b", "a", "é"]  # the order submitted
    loaded = await store.load_group("g")
    assert loaded == expected and list(loaded.items) == ["b", "a", "é"]
    # recorded once: a second record returns the stored manifest, unchanged
    again, created = await store.record_group("g", definition="e", items={"z": 1}, now=T0 + 5)
    assert (again, created) == (expected, False)
    assert await store.load_group("other") is None
    assert await store.forget_group("g") is True
    assert await store.forget_group("g") is False
    assert await store.load_group("g") is None
    assert await store.load_events() == []  # beside the log, not in it


async def test_each_key_may_have_its_own_definition(store: DurableStore) -> None:
    assert isinstance(store, DurableGroups)
    names = {"a": "d1", "é": "d2", "b": "d1"}  # in another order than the items
    manifest, created = await store.record_group("g", definition=names, items=ITEMS, now=T0)
    assert created is True
    assert manifest.definitions == {"b": "d1", "a": "d1", "é": "d2"}  # the items' order
    assert manifest.definition is None  # not one shared name
    loaded = await store.load_group("g")
    assert loaded == manifest and list(loaded.definitions) == ["b", "a", "é"]


async def test_definitions_with_other_keys_than_the_items_write_nothing(
    store: DurableStore,
) -> None:
    assert isinstance(store, DurableGroups)
    with pytest.raises(ValueError, match="1 without an item \\('z'\\), 1 without a definition"
                       " \\('b'\\)"):
        await store.record_group(
            "g", definition={"a": "d", "é": "d", "z": "d"}, items=ITEMS, now=T0
        )
    with pytest.raises(InvalidKeyError, match="member 'a'"):
        await store.record_group(
            "g", definition={"a": "", "b": "d", "é": "d"}, items=ITEMS, now=T0
        )
    assert await store.load_group("g") is None


async def test_bad_manifests_write_nothing(store: DurableStore) -> None:
    assert isinstance(store, DurableGroups)
    with pytest.raises(ValueError, match="empty"):
        await store.record_group("g", definition="d", items={}, now=T0)
    with pytest.raises(ValueError, match="no '/'"):
        await store.record_group("g", definition="d", items={"a/b": 1}, now=T0)
    with pytest.raises(PayloadError, match="member 'k'"):
        await store.record_group("g", definition="d", items={"k": {1j}}, now=T0)
    with pytest.raises(InvalidKeyError):
        await store.record_group("", definition="d", items={"k": 1}, now=T0)
    with pytest.raises(TypeError, match="mapping"):
        await store.record_group("g", definition="d", items=[1], now=T0)  # type: ignore[arg-type]
    assert await store.load_group("g") is None


async def test_members_are_the_workflows_under_the_group_id(store: DurableStore) -> None:
    assert isinstance(store, DurableGroups)
    for wid in ("g/a", "g/b", "g/b/kid", "g0", "g", "gx/a", "f/a", "g/é"):
        await store.start_workflow(wid, ["s"], None, T0)
    rows = await store.group_members("g")
    assert [r.workflow_id for r in rows] == ["g/a", "g/b", "g/b/kid", "g/é"]
    assert await store.group_members("none") == []
