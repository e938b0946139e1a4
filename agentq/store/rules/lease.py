"""Transition rules of a step's lease: take it (claim), extend it (renew), release it.

A lease is live while ``now <= expires_at`` and expired once ``now > expires_at``; each claim
gets the next fencing token (``lease_token``). An attempt whose lease is taken back without an
outcome (it ran out, or its worker's process is gone) was *lost to a crash*: `WorkerRecovered`
records it, the step's ``recoveries`` counts it, and it does not count toward
``RetryPolicy.max_attempts`` (the re-admitted attempt runs under the same number). Past the
step's ``max_recoveries`` the claim fails the step and the workflow instead. An attempt whose
worker hands its lease back itself once the body stopped (a graceful shutdown: the engine
closed, ``serve`` cancelled, the queue closed) is recorded by `WorkerRecovered` too, with
`HANDED_BACK_REASON` and ``crash: false``: it does not count toward ``max_recoveries`` (nor
toward ``max_attempts``), since a shutdown never fails a workflow by itself. A lease a cancel
revoked fences its step (`agentq.store.rules.projection.is_fenced`): no other worker claims
it until its worker hands it back once the body stopped, or is found gone (`release_dead`
records `LeaseReleased`), or until it expires. Each function is
the rule of the `DurableStore` verb of the same name, run by a store inside one transaction
(see `agentq.store.rules.tx` for the order every rule works in).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agentq.errors import EngineError, LeaseLostError
from agentq.events import EventKind
from agentq.keys import validate_key
from agentq.store.contract.checks import (
    check_count,
    check_execution,
    check_index,
    check_now,
    check_text,
    check_ttl,
)
from agentq.store.contract.claims import (
    AlreadyCompleted,
    AlreadyWaiting,
    Claimed,
    ClaimResult,
    Execution,
    HeldByOther,
    NotBefore,
    WorkflowClosed,
)
from agentq.store.contract.rows import StepRow, StepState, WorkflowRow, WorkflowState
from agentq.store.rules.projection import Rows, is_fenced
from agentq.store.rules.tx import (
    Draft,
    Tx,
    apply,
    describe_closed,
    describe_step,
    load_step,
    timed_out_draft,
)

__all__ = [
    "CANCEL_HANDED_BACK_REASON",
    "DEFAULT_MAX_RECOVERIES",
    "EXPIRED_REASON",
    "HANDED_BACK_REASON",
    "claim_loaded",
    "claim_step",
    "crash_reason",
    "release_dead",
    "release_expired",
    "renew_lease",
]

_K = EventKind

DEFAULT_MAX_RECOVERIES = 3
"""Attempts of one step that may be lost to crashes before its workflow fails."""

EXPIRED_REASON = "lease expired"
"""The ``reason`` of a `WorkerRecovered` that took over a lease once it had run out."""


HANDED_BACK_REASON = "handed back by its worker after a shutdown interrupted the attempt"
"""The ``reason`` of a `WorkerRecovered` that a worker records for its own lease once the
attempt's body has stopped (`release_dead` with this reason): not a crash, so the step's
``recoveries`` (the crash budget) is not counted up."""

CANCEL_HANDED_BACK_REASON = (
    "handed back by its worker once the body a cancel interrupted had stopped"
)
"""The ``reason`` of a `LeaseReleased` that lifts the fence of a lease a cancel revoked when
its worker hands it back with `HANDED_BACK_REASON` (the body it waited for has stopped)."""


def crash_reason(step_name: str, lost: int, max_recoveries: int) -> str:
    """The failure reason of a step whose attempts were lost to crashes too many times."""
    crashes = "crash" if lost == 1 else "crashes"
    return (
        f"step {step_name!r} was lost to {lost} {crashes} (max_recoveries={max_recoveries}): "
        "its attempts died with their process (or their lease ran out) before recording an "
        "outcome"
    )


def _recovered(step: StepRow, at: float, reason: str, worker_id: str | None) -> Draft:
    """`WorkerRecovered` for the lease `step` holds now (recorded by `worker_id`, if any)."""
    held_until = step.lease_expires_at if step.lease_expires_at is not None else math.inf
    data: dict[str, Any] = {
        "previous_worker": step.worker_id,
        "lease_token": step.lease_token,
        "expired_at": held_until,
        "reason": reason,
    }
    if reason == HANDED_BACK_REASON:
        data["crash"] = False  # absent: a crash (so are all events written before it)
    return Draft.build(
        _K.WORKER_RECOVERED,
        step.workflow_id,
        at,
        data,
        step=step,
        attempt=step.attempt,
        worker_id=worker_id,
    )


def claim_step(
    tx: Tx,
    workflow_id: str,
    step_index: int,
    worker_id: str,
    lease_ttl: float,
    now: float,
    max_recoveries: int = DEFAULT_MAX_RECOVERIES,
) -> ClaimResult:
    """Rule of `DurableStore.claim_step`: a compare-and-swap on the step's row.

    A lease is live while ``now <= expires_at``, so it is never taken over at the tick it
    expires. A step can be claimed only once every earlier step has completed, and not before
    its stored ``retry_at``. A claim that would re-admit more than `max_recoveries` lost
    attempts fails the step and the workflow (`StepFailed`, `WorkflowFailed`) instead. A
    claim of a step still fenced by a lease a cancel revoked (by that lease's own worker, or
    once the fence has expired) records `LeaseReleased` for it first (reason
    `CANCEL_HANDED_BACK_REASON` or `EXPIRED_REASON`), so that every lease ends in the log.
    """
    workflow_id = validate_key(workflow_id, "workflow id")
    index = check_index(step_index)
    worker_id = validate_key(worker_id, "worker id")
    ttl = check_ttl(lease_ttl)
    limit = check_count(max_recoveries, "max_recoveries")
    now, at = check_now(now)
    expires_at = now + ttl
    if not math.isfinite(expires_at):
        raise ValueError(f"now + lease_ttl overflows: {now!r} + {ttl!r}")
    wf, steps = load_step(tx, workflow_id, index, first=max(index - 1, 0))
    return claim_loaded(tx, wf, steps, index, worker_id, now, at, expires_at, limit)


def claim_loaded(
    tx: Tx,
    wf: WorkflowRow,
    steps: Mapping[int, StepRow],
    index: int,
    worker_id: str,
    now: float,
    at: float,
    expires_at: float,
    limit: int,
) -> ClaimResult:
    """The rest of `claim_step` once its arguments are checked (`at`, ``check_now``'s event
    time of `now`; `expires_at` the new lease's end; `limit` the ``max_recoveries``) and its
    rows read: `wf` and `steps`, holding step `index` (known: `check_known`) and, when
    `index` > 0, the step before it, as they stand in this transaction."""
    workflow_id = wf.workflow_id
    step = steps[index]
    if step.state is StepState.COMPLETED:
        return AlreadyCompleted(step.output)
    if wf.state.closed or step.state is StepState.FAILED:
        return WorkflowClosed(wf.state, wf.reason)
    if wf.deadline is not None and wf.deadline <= now:  # too late: it fails instead
        _, all_steps = tx.load(workflow_id, 0, 1 << 30)
        draft = timed_out_draft(wf, at)
        apply(tx, Rows(wf, all_steps), [draft])
        return WorkflowClosed(WorkflowState.FAILED, draft.data["reason"])
    if step.state is StepState.WAITING:
        return AlreadyWaiting(step.reason or "")
    if index > 0 and steps[index - 1].state is not StepState.COMPLETED:
        before = steps[index - 1]
        raise EngineError(
            f"cannot claim {describe_step(workflow_id, index, step.step_name)}: the step "
            f"before it, {before.step_name!r} (#{index - 1}), is {before.state}, not completed"
        )
    drafts: list[Draft] = []
    counted, lost = step.attempt, step.recoveries
    if step.state is StepState.LEASED:
        held_until = step.lease_expires_at if step.lease_expires_at is not None else math.inf
        if now <= held_until:
            return HeldByOther(step.worker_id or "", held_until)
        drafts.append(_recovered(step, at, EXPIRED_REASON, worker_id))
        counted, lost = max(counted - 1, 0), lost + 1
    elif (  # a lease a cancel revoked: its body may still run
        is_fenced(step)
        and step.lease_expires_at is not None
        and step.worker_id != worker_id
        and now <= step.lease_expires_at
    ):
        return HeldByOther(step.worker_id or "", step.lease_expires_at)
    elif step.retry_at is not None and now < step.retry_at:
        return NotBefore(step.retry_at)
    if is_fenced(step):  # the revoked lease ends here, in the log too: its body has stopped
        mine = step.worker_id == worker_id  # (its worker claims only then), or its fence ran out
        drafts.append(_released(step, at, CANCEL_HANDED_BACK_REASON if mine else EXPIRED_REASON))
    if lost > limit:
        reason = crash_reason(step.step_name, lost, limit)
        drafts.append(
            Draft.build(
                _K.STEP_FAILED,
                workflow_id,
                at,
                {"reason": reason, "error": None},
                step=step,
                attempt=counted + 1,
                worker_id=worker_id,
            )
        )
        drafts.append(
            Draft.build(_K.WORKFLOW_FAILED, workflow_id, at, {"reason": reason}, step=step)
        )
        apply(tx, Rows(wf, {index: step}), drafts)
        return WorkflowClosed(WorkflowState.FAILED, reason)
    token, attempt = step.lease_token + 1, counted + 1
    drafts.append(
        Draft.build(
            _K.STEP_STARTED,
            workflow_id,
            at,
            {"lease_token": token, "expires_at": expires_at},
            step=step,
            attempt=attempt,
            worker_id=worker_id,
            raw={"lease_token": str(token), "expires_at": repr(expires_at)},
        )
    )
    apply(tx, Rows(wf, {index: step}), drafts)
    execution = Execution(
        workflow_id, index, step.step_name, worker_id, token, attempt, expires_at
    )
    return Claimed(execution, step.resume_input, step.resumed, lost)


def renew_lease(tx: Tx, execution: Execution, lease_ttl: float, now: float) -> Execution:
    """Rule of `DurableStore.renew_lease`: a lease still held (even expired but not yet taken
    over) is extended; so is the fence of a lease a cancel revoked, by its own worker and
    token (``revoked=True`` in the execution returned: its body may still run, so no other
    worker may start the step until it is handed back). No event is appended."""
    ttl = check_ttl(lease_ttl)
    now, _ = check_now(now)
    ex = check_execution(execution)
    wf, steps = load_step(tx, ex.workflow_id, ex.step_index)
    step = steps[ex.step_index]
    revoked = _revoked(step, ex)
    if not revoked and not _holds(step, ex):
        why = describe_closed(wf) if wf.state.closed else (
            f"the step is {step.state} under lease #{step.lease_token} of worker "
            f"{step.worker_id!r}"
        )
        raise LeaseLostError(
            f"cannot renew lease #{ex.lease_token} of worker {ex.worker_id!r} on "
            f"{describe_step(ex.workflow_id, ex.step_index, step.step_name)}: {why}"
        )
    expires_at = now + ttl
    tx.put_step(replace(step, lease_expires_at=expires_at), False)
    return replace(ex, expires_at=expires_at, revoked=revoked)


def _holds(step: StepRow, ex: Execution) -> bool:
    """Whether `ex` is the lease `step` is under right now."""
    return (
        step.state is StepState.LEASED
        and step.lease_token == ex.lease_token
        and step.worker_id == ex.worker_id
    )


def release_expired(tx: Tx, execution: Execution, now: float) -> bool:
    """Rule of `DurableStore.release_expired`: `WorkerRecovered` ("lease expired") if the lease
    named by `execution` is still the step's and has expired (``now > expires_at``, using the
    stored expiry, which a renewal may have moved)."""
    now, at = check_now(now)
    ex = check_execution(execution)
    wf, steps = load_step(tx, ex.workflow_id, ex.step_index)
    step = steps[ex.step_index]
    if not _holds(step, ex) or step.lease_expires_at is None or now <= step.lease_expires_at:
        return False
    apply(tx, Rows(wf, steps), [_recovered(step, at, EXPIRED_REASON, None)])
    return True


def release_dead(tx: Tx, execution: Execution, now: float, reason: str) -> bool:
    """Rule of `DurableStore.release_dead`: `WorkerRecovered` (with `reason`) if the lease named
    by `execution` is still the step's, live or expired: the caller vouches that its worker is
    gone, or is that worker handing its own lease back (`HANDED_BACK_REASON`: not counted
    as a crash). If it is a lease a cancel revoked that still fences the step, `LeaseReleased`
    (with `reason`, or `CANCEL_HANDED_BACK_REASON` for its worker's own hand-back) lifts the
    fence instead: its body has stopped."""
    now, at = check_now(now)
    ex = check_execution(execution)
    reason = check_text(reason, "reason")
    wf, steps = load_step(tx, ex.workflow_id, ex.step_index)
    step = steps[ex.step_index]
    if _revoked(step, ex):
        if reason == HANDED_BACK_REASON:  # its worker's own: the cancel interrupted it
            reason = CANCEL_HANDED_BACK_REASON
        apply(tx, Rows(wf, steps), [_released(step, at, reason)])
        return True
    if not _holds(step, ex):
        return False
    apply(tx, Rows(wf, steps), [_recovered(step, at, reason, None)])
    return True


def _released(step: StepRow, at: float, reason: str) -> Draft:
    """`LeaseReleased` of the lease a cancel revoked that fences `step` (by its worker)."""
    return Draft.build(
        _K.LEASE_RELEASED,
        step.workflow_id,
        at,
        {"lease_token": step.lease_token, "reason": reason},
        step=step,
        worker_id=step.worker_id,
    )


def _revoked(step: StepRow, ex: Execution) -> bool:
    """Whether `ex` is a lease a cancel revoked that still fences `step` (failed, or pending
    after a retry) until it is released or expires."""
    return (
        is_fenced(step)
        and step.lease_token == ex.lease_token
        and step.worker_id == ex.worker_id
    )
