"""Rules of the end-of-run hook outbox: claim due rows under a lease, finish, retry.

The rows themselves are written by `agentq.store.rules.tx.apply_rows` in the transaction
that ends a workflow (`agentq.store.contract.hooks.pending_hook`); these rules only move a
row along: claimed (a lease, one more attempt, renewed while the claimer delivers), then
delivered, or due again after a failed delivery, or handed back by a claimer that stops. None
of them appends an event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from agentq.keys import validate_key
from agentq.store.contract.checks import check_now, check_number, check_text, check_ttl
from agentq.store.contract.hooks import MAX_HOOK_ERROR_CHARS, HookRow
from agentq.store.rules.tx import Tx

__all__ = ["claim_hooks", "finish_hook", "release_hook", "renew_hook", "retry_hook"]


def _check_seq(seq: int) -> int:
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise TypeError(f"an end-hook seq must be an int, got {seq!r:.60}")
    if seq < 1:
        raise ValueError(f"an end-hook seq must be >= 1, got {seq!r}")
    return seq


def claim_hooks(
    tx: Tx,
    worker_id: str,
    now: float,
    lease_ttl: float,
    definitions: Sequence[str],
    plain: bool,
    workflow_id: str | None,
    limit: int,
) -> list[HookRow]:
    """Rule of `DurableStore.claim_hooks`."""
    worker_id = validate_key(worker_id, "worker id")
    now, _ = check_now(now)
    ttl = check_ttl(lease_ttl)
    if isinstance(definitions, str):
        raise TypeError(f"definitions must be a sequence of names, not the str {definitions!r}")
    names = [validate_key(n, "definition name") for n in definitions]
    if workflow_id is not None:
        workflow_id = validate_key(workflow_id, "workflow id")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")
    if not names and not plain:
        return []
    claimed = []
    for row in tx.due_hooks(now, names, bool(plain), workflow_id, limit):
        row = replace(
            row, attempts=row.attempts + 1, worker_id=worker_id, lease_expires_at=now + ttl
        )
        tx.put_hook(row, False)
        claimed.append(row)
    return claimed


def renew_hook(tx: Tx, seq: int, worker_id: str, now: float, lease_ttl: float) -> bool:
    """Rule of `DurableStore.renew_hook`."""
    seq, (now, _) = _check_seq(seq), check_now(now)
    worker_id = validate_key(worker_id, "worker id")
    ttl = check_ttl(lease_ttl)
    row = tx.load_hook(seq)
    if (
        row is None or row.delivered or row.worker_id != worker_id
        or row.lease_expires_at is None or row.lease_expires_at <= now
    ):
        return False
    tx.put_hook(replace(row, lease_expires_at=now + ttl), False)
    return True


def finish_hook(tx: Tx, seq: int, now: float) -> bool:
    """Rule of `DurableStore.finish_hook`."""
    seq, (now, _) = _check_seq(seq), check_now(now)
    row = tx.load_hook(seq)
    if row is None or row.delivered:
        return False
    tx.put_hook(replace(row, delivered_at=now, lease_expires_at=None, error=None), False)
    return True


def retry_hook(tx: Tx, seq: int, worker_id: str, due_at: float, error: str, now: float) -> bool:
    """Rule of `DurableStore.retry_hook`."""
    seq, (now, _) = _check_seq(seq), check_now(now)
    worker_id = validate_key(worker_id, "worker id")
    due = check_number(due_at, "due_at")
    text = check_text(error, "error")[:MAX_HOOK_ERROR_CHARS]
    row = tx.load_hook(seq)
    if row is None or row.delivered or row.worker_id != worker_id:
        return False
    tx.put_hook(replace(row, due_at=due, lease_expires_at=None, error=text), False)
    return True


def release_hook(tx: Tx, seq: int, worker_id: str, now: float) -> bool:
    """Rule of `DurableStore.release_hook`."""
    seq, (now, _) = _check_seq(seq), check_now(now)
    worker_id = validate_key(worker_id, "worker id")
    row = tx.load_hook(seq)
    if (
        row is None or row.delivered or row.worker_id != worker_id
        or row.lease_expires_at is None
    ):
        return False
    tx.put_hook(replace(row, lease_expires_at=None, due_at=min(row.due_at, now)), False)
    return True
