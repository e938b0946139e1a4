"""The verb families a `MemoryStore` runs over its own dicts, for `RuleStore`.

`RuleStore` writes every verb once; the families whose rows a store keeps its own way take
the store's half from it: job outcomes (`JOB_RULES`: a dict with a heap of expiry times for
the purge of ``save_job``), run group manifests (`GROUP_RULES`), the shared rate windows
(`RATE_RULES`, over `RateBook`) and one transaction of a sweep (`SWEEPER`). Each function
runs inside a `MemoryTx`.
"""

from __future__ import annotations

import heapq
from typing import Any

from agentq.keys import call_queue_key
from agentq.queue import StoredJob
from agentq.store.contract.checks import check_job_save
from agentq.store.contract.groups import GroupItem, GroupManifest
from agentq.store.contract.rows import CallKind
from agentq.store.contract.sweep import SweepReport
from agentq.store.memory.tx import MemoryTx
from agentq.store.rules.sweep import (
    Candidate,
    SweepBatch,
    Sweeper,
    chosen,
    group_member,
    hook_holds,
    recorded_child,
)
from agentq.store.rules.verbs import GroupRules, JobRules, RateRules

__all__ = ["GROUP_RULES", "JOB_RULES", "RATE_RULES", "SWEEPER"]


def _save_job(
    tx: MemoryTx,
    key: str,
    fingerprint: str,
    output: Any,
    completed_at: float,
    expires_at: float | None,
) -> bool:
    """`JobOutcomeStore.save_job` over the store's dict (with a heap of expiry times)."""
    key, fingerprint, value, _, done, expires = check_job_save(
        key, fingerprint, output, completed_at, expires_at
    )
    store = tx._store
    jobs, heap = store._jobs, store._job_expiry
    while heap and heap[0][0] <= done:  # the purge of outcomes expired by now
        _, old_key = heapq.heappop(heap)
        old = jobs.get(old_key)
        if old is not None and old.expires_at is not None and old.expires_at <= done:
            del jobs[old_key]
    if key in jobs:
        return False  # live: it survived the purge
    jobs[key] = StoredJob(key, fingerprint, value, done, expires)
    if expires is not None:
        heapq.heappush(heap, (expires, key))
    return True


def _forget_job(tx: MemoryTx, key: str) -> bool:
    """`JobOutcomeStore.forget_job` over the store's dict."""
    return tx._store._jobs.pop(key, None) is not None


def _record_group(
    tx: MemoryTx, group_id: str, items: list[GroupItem], now: float
) -> tuple[GroupManifest, bool]:
    """`DurableGroups.record_group` over the store's dict."""
    found = tx._store._groups.get(group_id)
    if found is not None:
        return found, False
    manifest = GroupManifest(
        group_id, {i.key: i.definition for i in items}, {i.key: i.input for i in items}, now
    )
    tx._store._groups[group_id] = manifest
    return manifest, True


def _forget_group(tx: MemoryTx, group_id: str) -> bool:
    """`DurableGroups.forget_group` over the store's dict."""
    return tx._store._groups.pop(group_id, None) is not None
def _sweep(tx: MemoryTx, cutoff: float, state: str, after: int, limit: int) -> SweepBatch:
    """One transaction of a sweep (`agentq.store.rules.sweep.Sweeper.batch`) over the dicts."""
    store = tx._store
    candidates: list[Candidate] = []
    for wid, wf in store._workflows.items():  # in start order
        if len(candidates) == limit:
            break
        started = store._started[wid]
        if started > after and wf.state == state:
            fences = [s.lease_expires_at for s in store._steps[wid] if s.lease_expires_at]
            fence = max(fences) if fences else None
            candidates.append(Candidate(wid, started, wf.updated_at, fence))

    def has_wait(parent_id: str, wait_key: str) -> bool:
        return wait_key in store._calls.get(parent_id, {})

    def has_item(group_id: str, key: str) -> bool:
        manifest = store._groups.get(group_id)
        return manifest is not None and key in manifest.items

    hooked = {r.workflow_id for r in store._hooks.rows.values() if hook_holds(r)}
    ids, skipped = chosen(
        candidates,
        cutoff,
        lambda wid: recorded_child(wid, has_wait),
        lambda wid: wid in hooked or group_member(wid, has_item) is not None,
    )
    cursor = candidates[-1].started_seq if len(candidates) == limit else None
    calls = 0
    for wid in ids:
        del store._workflows[wid], store._steps[wid], store._started[wid]
        store._messages.pop(wid, None)
        rows = store._calls.pop(wid, {})
        calls += len(rows)
        for key, row in rows.items():
            if row.kind is CallKind.CALL:
                store._jobs.pop(call_queue_key(wid, key), None)
    gone = set(ids)
    if gone:
        hooks = store._hooks.rows
        store._hooks.rows = {s: r for s, r in hooks.items() if r.workflow_id not in gone}
    kept = [e for e in store._events if e.workflow_id not in gone] if gone else store._events
    events, store._events = len(store._events) - len(kept), kept
    return SweepBatch(SweepReport(len(ids), events, calls), cursor, skipped)


JOB_RULES = JobRules(_save_job, _forget_job)
"""The job outcome verbs of a `MemoryStore`."""

GROUP_RULES = GroupRules(_record_group, _forget_group)
"""The run group verbs of a `MemoryStore`."""

SWEEPER = Sweeper(_sweep)
"""One transaction of a sweep of a `MemoryStore`."""

RATE_RULES = RateRules(
    lambda tx, *args: tx._store._rates.take(*args),
    lambda tx, *args: tx._store._rates.settle(*args),
    lambda tx, *args: tx._store._rates.pause(*args),
    lambda tx, *args: tx._store._rates.resume(*args),
)
"""The shared rate window verbs of a `MemoryStore` (over its `RateBook`)."""
