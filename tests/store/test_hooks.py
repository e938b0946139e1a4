"""The DurableStore contract for the end-of-run hook outbox, on every store: one row written
by each transaction that ends a workflow (and none otherwise), claimed under a lease by one
worker at a time, finished once, retried at a later time, kept by a rebuild."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentq.errors import InvalidKeyError
from agentq.store import DurableStore, HookRow, PostgresStore, SqliteStore

from .conftest import T0, claim, run_step, start

pytestmark = pytest.mark.timeout(60)


async def ended(store: DurableStore, workflow_id: str, definition: str | None = "d") -> int:
    """Start a one-step workflow and complete it; return the seq of its end."""
    await store.start_workflow(workflow_id, ["a"], None, T0, definition=definition)
    await run_step(store, workflow_id)
    return (await store.load_events(workflow_id))[-1].seq


async def test_the_transaction_that_ends_a_workflow_writes_its_outbox_row(
    store: DurableStore,
) -> None:
    await start(store, steps=["a", "b"])
    await run_step(store)
    assert await store.hooks("wf") == []  # running: no row
    ex = await claim(store, index=1, now=T0 + 1)
    await store.complete_step(ex, "B", T0 + 2)
    end = (await store.load_events("wf"))[-1]
    assert str(end.kind) == "WorkflowCompleted"
    assert await store.hooks("wf") == [
        HookRow(end.seq, "wf", None, "completed", T0 + 2, due_at=T0 + 2)
    ]


@pytest.mark.parametrize("how", ["failed", "cancelled", "timed_out"])
async def test_every_end_writes_one_row(store: DurableStore, how: str) -> None:
    await store.start_workflow("wf", ["a"], None, T0, definition="d", deadline=T0 + 50)
    if how == "failed":
        await store.fail_step(await claim(store), "boom", None, T0 + 1, None)
    elif how == "cancelled":
        assert await store.cancel_workflow("wf", "stop", T0 + 1)
        assert not await store.cancel_workflow("wf", "again", T0 + 2)  # no second end
    else:
        assert await store.time_out_workflow("wf", T0 + 60)
    [row] = await store.hooks("wf")
    state = "failed" if how == "timed_out" else how
    assert (row.definition, row.state, row.delivered, row.attempts) == ("d", state, False, 0)


async def test_a_claim_leases_rows_to_one_worker_until_the_lease_expires(
    store: DurableStore,
) -> None:
    seq = await ended(store, "wf")
    other = await ended(store, "other", definition="e")
    plain = await ended(store, "plain", definition=None)
    [row] = await store.claim_hooks("w1", T0 + 1, 10.0, definitions=["d"])
    assert (row.seq, row.worker_id, row.attempts, row.lease_expires_at) == (
        seq, "w1", 1, T0 + 11)
    assert await store.claim_hooks("w2", T0 + 2, 10.0, definitions=["d"]) == []  # held
    assert await store.claim_hooks("w2", T0 + 2, 10.0) == []  # nothing asked for
    got = await store.claim_hooks("w2", T0 + 2, 10.0, definitions=["e"], plain=True)
    assert [r.seq for r in got] == [other, plain]
    [again] = await store.claim_hooks("w2", T0 + 11, 10.0, definitions=["d"])  # expired
    assert (again.worker_id, again.attempts) == ("w2", 2)
    assert await store.claim_hooks("w3", T0 + 30, 10.0, definitions=["d"], limit=1,
                                   workflow_id="other") == []


async def test_finish_marks_delivered_once_and_retry_makes_it_due_later(
    store: DurableStore,
) -> None:
    seq = await ended(store, "wf")
    await store.claim_hooks("w1", T0 + 1, 10.0, definitions=["d"])
    assert not await store.retry_hook(seq, "w2", T0 + 5, "not its claim", T0 + 2)
    assert await store.retry_hook(seq, "w1", T0 + 5, "ValueError: boom", T0 + 2)
    [row] = await store.hooks("wf")
    assert (row.due_at, row.lease_expires_at, row.error) == (T0 + 5, None, "ValueError: boom")
    assert await store.claim_hooks("w1", T0 + 4, 10.0, definitions=["d"]) == []  # not due
    [row] = await store.claim_hooks("w2", T0 + 5, 10.0, definitions=["d"])
    assert row.attempts == 2
    assert await store.finish_hook(seq, T0 + 6)
    assert not await store.finish_hook(seq, T0 + 7)  # once
    assert not await store.retry_hook(seq, "w2", T0 + 9, "late", T0 + 8)
    [row] = await store.hooks("wf")
    assert (row.delivered_at, row.error, row.delivered) == (T0 + 6, None, True)
    assert await store.claim_hooks("w1", T0 + 100, 10.0, definitions=["d"]) == []
    await store.rebuild_projection()
    assert await store.hooks("wf") == [row]  # not a projection: kept as it is


async def test_renew_extends_only_the_renewers_live_claim(store: DurableStore) -> None:
    seq = await ended(store, "wf")
    await store.claim_hooks("w1", T0 + 1, 10.0, definitions=["d"])
    assert not await store.renew_hook(seq, "w2", T0 + 5, 10.0)  # not its claim
    assert await store.renew_hook(seq, "w1", T0 + 5, 10.0)
    [row] = await store.hooks("wf")
    assert (row.worker_id, row.attempts, row.lease_expires_at) == ("w1", 1, T0 + 15)
    assert await store.claim_hooks("w2", T0 + 12, 10.0, definitions=["d"]) == []  # held
    assert not await store.renew_hook(seq, "w1", T0 + 15, 10.0)  # expired: lost
    [row] = await store.claim_hooks("w2", T0 + 16, 10.0, definitions=["d"])
    assert not await store.renew_hook(seq, "w1", T0 + 17, 10.0)  # taken over
    assert await store.retry_hook(seq, "w2", T0 + 30, "ValueError: boom", T0 + 17)
    assert not await store.renew_hook(seq, "w2", T0 + 18, 10.0)  # no claim left
    [row] = await store.claim_hooks("w2", T0 + 30, 10.0, definitions=["d"])
    assert await store.finish_hook(seq, T0 + 31)
    assert not await store.renew_hook(seq, "w2", T0 + 32, 10.0)  # delivered
    assert not await store.renew_hook(99, "w2", T0 + 32, 10.0)
    [row] = await store.hooks("wf")
    assert (row.delivered_at, row.lease_expires_at, row.attempts) == (T0 + 31, None, 3)
    with pytest.raises(ValueError):
        await store.renew_hook(seq, "w2", T0 + 32, 0.0)
    with pytest.raises(InvalidKeyError):
        await store.renew_hook(seq, "", T0 + 32, 10.0)


async def test_release_hands_back_only_the_releasers_claim_due_at_once(
    store: DurableStore,
) -> None:
    seq = await ended(store, "wf")
    await store.claim_hooks("w1", T0 + 1, 10.0, definitions=["d"])
    assert await store.retry_hook(seq, "w1", T0 + 3, "ValueError: boom", T0 + 2)
    assert not await store.release_hook(seq, "w1", T0 + 2)  # no claim left: nothing
    await store.claim_hooks("w1", T0 + 3, 10.0, definitions=["d"])
    assert not await store.release_hook(seq, "w2", T0 + 4)  # not its claim
    assert await store.release_hook(seq, "w1", T0 + 4)
    [row] = await store.hooks("wf")
    assert (row.worker_id, row.attempts, row.lease_expires_at, row.due_at, row.error) == (
        "w1", 2, None, T0 + 3, "ValueError: boom")  # no backoff; the count and error kept
    assert not await store.release_hook(seq, "w1", T0 + 4)  # once
    [row] = await store.claim_hooks("w2", T0 + 4, 10.0, definitions=["d"])  # at once
    assert (row.worker_id, row.attempts) == ("w2", 3)
    assert not await store.release_hook(seq, "w1", T0 + 5)  # taken over
    assert await store.finish_hook(seq, T0 + 6)
    assert not await store.release_hook(seq, "w2", T0 + 7)  # delivered
    assert not await store.release_hook(99, "w2", T0 + 7)
    with pytest.raises(ValueError):
        await store.release_hook(0, "w2", T0 + 7)
    with pytest.raises(InvalidKeyError):
        await store.release_hook(seq, "", T0 + 7)


async def test_a_retried_workflow_that_ends_again_has_a_row_per_end(store: DurableStore) -> None:
    await store.start_workflow("wf", ["a"], None, T0, definition="d")
    assert await store.cancel_workflow("wf", "stop", T0 + 1)
    await store.retry_workflow("wf", 0, T0 + 2)
    await run_step(store, now=T0 + 3)
    assert [r.state for r in await store.hooks("wf")] == ["cancelled", "completed"]


async def test_bad_arguments_are_refused(store: DurableStore) -> None:
    with pytest.raises(ValueError, match="limit"):
        await store.claim_hooks("w1", T0, 10.0, definitions=["d"], limit=0)
    with pytest.raises(ValueError):
        await store.claim_hooks("w1", T0, 0.0, definitions=["d"])
    with pytest.raises(TypeError, match="sequence of names"):
        await store.claim_hooks("w1", T0, 1.0, definitions="d")
    with pytest.raises(InvalidKeyError):
        await store.claim_hooks("", T0, 1.0, definitions=["d"])
    with pytest.raises(TypeError):
        await store.finish_hook("1", T0)  # type: ignore[arg-type]
    assert not await store.finish_hook(99, T0)


async def test_concurrent_claims_from_two_connections_never_share_a_row(
    store: DurableStore, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Two engines' stores on one database claim at once: each row goes to one of them
    (PostgreSQL: row locks skipped, not waited for; SQLite: serialised writes)."""
    for i in range(20):
        await ended(store, f"wf{i}")
    other = await second_connection(store, request, tmp_path)
    try:
        claims = await asyncio.gather(*(
            s.claim_hooks(w, T0 + 1, 10.0, definitions=["d"], limit=3)
            for _ in range(4) for s, w in ((store, "w1"), (other, "w2"))
        ))
    finally:
        if other is not store:
            await other.close()
    seqs = [r.seq for rows in claims for r in rows]
    assert len(seqs) == len(set(seqs)) == 20


async def second_connection(
    store: DurableStore, request: pytest.FixtureRequest, tmp_path: Path
) -> DurableStore:
    """Another store object on the same database (the same object for a MemoryStore)."""
    if isinstance(store, SqliteStore):
        return await SqliteStore.open(tmp_path / "store.db")
    if isinstance(store, PostgresStore):
        target = request.getfixturevalue("pg_target")
        return await PostgresStore.open(target.dsn, schema=target.schema)
    return store
