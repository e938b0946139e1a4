"""The JobOutcomeStore contract: load_job, save_job and forget_job, on every store.

A store that passes this file can back a `Queue(store=...)`.
"""

from __future__ import annotations

import asyncio
import math
import unicodedata
from typing import Any, cast

import pytest

from agentq.codec import MAX_PAYLOAD_BYTES
from agentq.errors import InvalidKeyError, PayloadError, StoreError
from agentq.queue import JobOutcomeStore, StoredJob
from agentq.store import DurableStore

from .conftest import T0

pytestmark = pytest.mark.timeout(30)

FP = "v1:" + "0" * 64


def jobs(store: DurableStore) -> JobOutcomeStore:
    assert isinstance(store, JobOutcomeStore)
    return cast(JobOutcomeStore, store)


async def save(
    store: DurableStore, key: str = "k", output: Any = "out", *, fingerprint: str = FP,
    at: float = T0, expires_at: float | None = None,
) -> bool:
    return await jobs(store).save_job(
        key, fingerprint=fingerprint, output=output, completed_at=at, expires_at=expires_at
    )


async def test_every_store_is_a_job_outcome_store(store: DurableStore) -> None:
    assert isinstance(store, JobOutcomeStore)


async def test_an_unknown_key_loads_as_none(store: DurableStore) -> None:
    assert await jobs(store).load_job("never", T0) is None


async def test_a_saved_outcome_loads_back_as_json(store: DurableStore) -> None:
    output = {"to": "alice", "ids": (1, 2), "ok": True, "n": None, "x": 1.5}
    assert await save(store, output=output, expires_at=T0 + 60) is True
    loaded = await jobs(store).load_job("k", T0 + 1)
    assert loaded == StoredJob(
        "k", FP, {"to": "alice", "ids": [1, 2], "ok": True, "n": None, "x": 1.5}, T0, T0 + 60
    )
    assert await save(store, "never-expires", [1]) is True
    assert await jobs(store).load_job("never-expires", T0 + 10**9) == StoredJob(
        "never-expires", FP, [1], T0, None
    )


@pytest.mark.parametrize("output", [None, 0, -7, 2**62, 0.1, "", "é\x00", [], {}, [[[]]]])
async def test_every_json_value_round_trips(store: DurableStore, output: Any) -> None:
    await save(store, output=output)
    loaded = await jobs(store).load_job("k", T0)
    assert loaded is not None and loaded.output == output
    assert type(loaded.output) is type(output)


async def test_values_are_copies(store: DurableStore) -> None:
    output: dict[str, Any] = {"items": [1]}
    await save(store, output=output)
    output["items"].append(2)  # the caller changes its value after saving
    first = await jobs(store).load_job("k", T0)
    assert first is not None and first.output == {"items": [1]}
    first.output["items"].append(3)  # and a reader changes what it read
    second = await jobs(store).load_job("k", T0)
    assert second is not None and second.output == {"items": [1]}


async def test_the_first_live_outcome_is_kept(store: DurableStore) -> None:
    assert await save(store, output="first", expires_at=T0 + 60) is True
    assert await save(store, output="second", fingerprint="other", at=T0 + 59) is False
    loaded = await jobs(store).load_job("k", T0 + 59)
    assert loaded is not None and (loaded.output, loaded.fingerprint) == ("first", FP)


async def test_an_outcome_expires_at_expires_at(store: DurableStore) -> None:
    await save(store, expires_at=T0 + 60)
    assert await jobs(store).load_job("k", T0 + 59.999) is not None
    assert await jobs(store).load_job("k", T0 + 60) is None
    assert await jobs(store).load_job("k", T0 + 61) is None


async def test_an_expired_outcome_is_replaced(store: DurableStore) -> None:
    await save(store, output="old", expires_at=T0 + 60)
    assert await save(store, output="new", fingerprint="other", at=T0 + 60) is True
    loaded = await jobs(store).load_job("k", T0 + 60)
    assert loaded == StoredJob("k", "other", "new", T0 + 60, None)


async def test_save_removes_every_outcome_expired_by_its_time(store: DurableStore) -> None:
    await save(store, "short", expires_at=T0 + 10)
    await save(store, "long", expires_at=T0 + 100)
    await save(store, "forever")
    assert await save(store, "later", at=T0 + 50) is True
    assert await jobs(store).forget_job("short") is False  # gone: purged by the save
    assert await jobs(store).forget_job("long") is True
    assert await jobs(store).forget_job("forever") is True


async def test_forget_job(store: DurableStore) -> None:
    assert await jobs(store).forget_job("k") is False
    await save(store, expires_at=T0 + 1)
    assert await jobs(store).forget_job("k") is True  # expired but still there: removed
    assert await jobs(store).forget_job("k") is False
    await save(store)
    assert await jobs(store).forget_job("k") is True
    assert await jobs(store).load_job("k", T0) is None
    assert await save(store, output="again") is True


async def test_keys_compare_byte_exactly(store: DurableStore) -> None:
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    keys = [nfc, nfd, "k", "k ", "a\x00b", "a"]
    for i, key in enumerate(keys):
        assert await save(store, key, output=i) is True
    for i, key in enumerate(keys):
        loaded = await jobs(store).load_job(key, T0)
        assert loaded is not None and (loaded.key, loaded.output) == (key, i)
    assert await jobs(store).load_job("a\x00", T0) is None


async def test_a_non_json_output_is_refused_and_nothing_written(store: DurableStore) -> None:
    with pytest.raises(PayloadError, match=r"output\['ids'\] is a set") as info:
        await save(store, output={"ids": {1, 2}})
    assert info.value.field == "output"
    with pytest.raises(PayloadError, match=r"output\[0\] is nan"):
        await save(store, output=[math.nan])
    with pytest.raises(PayloadError, match="bytes of JSON"):
        await save(store, output="x" * (MAX_PAYLOAD_BYTES + 1))
    assert await jobs(store).load_job("k", T0) is None
    assert await jobs(store).forget_job("k") is False


async def test_a_refused_save_does_not_affect_the_others_of_its_batch(
    store: DurableStore,
) -> None:
    results = await asyncio.gather(
        save(store, "a", "ok-a"), save(store, "bad", object()), save(store, "b", "ok-b"),
        return_exceptions=True,
    )
    assert results[0] is True and results[2] is True
    assert isinstance(results[1], PayloadError)
    assert (await jobs(store).load_job("a", T0)) is not None
    assert (await jobs(store).load_job("b", T0)) is not None
    assert (await jobs(store).load_job("bad", T0)) is None


@pytest.mark.parametrize(
    ("key", "error"),
    [("", InvalidKeyError), ("\udc80", InvalidKeyError), ("k" * 1025, InvalidKeyError),
     (b"k", TypeError), (None, TypeError)],
)
async def test_bad_keys_are_refused_by_every_verb(
    store: DurableStore, key: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await jobs(store).load_job(key, T0)
    with pytest.raises(error):
        await save(store, key)
    with pytest.raises(error):
        await jobs(store).forget_job(key)


async def test_bad_arguments_are_refused_before_anything_is_written(
    store: DurableStore,
) -> None:
    with pytest.raises(InvalidKeyError, match="fingerprint"):
        await save(store, fingerprint="")
    with pytest.raises(TypeError, match="fingerprint"):
        await save(store, fingerprint=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="completed_at"):
        await save(store, at="now")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="completed_at"):
        await save(store, at=math.inf)
    with pytest.raises(TypeError, match="expires_at"):
        await save(store, expires_at=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"expires_at .* later than completed_at"):
        await save(store, expires_at=T0)
    with pytest.raises(TypeError, match="now"):
        await jobs(store).load_job("k", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="now"):
        await jobs(store).load_job("k", math.nan)
    assert await jobs(store).forget_job("k") is False


async def test_a_closed_store_refuses_every_verb(store: DurableStore) -> None:
    await save(store)
    await store.close()
    with pytest.raises(StoreError):
        await jobs(store).load_job("k", T0)
    with pytest.raises(StoreError):
        await save(store, "other")
    with pytest.raises(StoreError):
        await jobs(store).forget_job("k")


async def test_job_outcomes_leave_the_event_log_alone(store: DurableStore) -> None:
    await save(store)
    await jobs(store).forget_job("k")
    assert await store.last_seq() == 0
    assert await store.workflows() == []
