"""Transition rules of durable calls (``ctx.call``): start, complete, fail, under fencing.

A call is recorded in the workflow's log under its key (scoped to the workflow): `CallStarted`
is committed before the call's body runs, so a crash leaves a trace of every call that may
have reached the outside world; `CallCompleted` / `CallFailed` record its outcome. The worker
presents the `Execution` of the attempt making the call, exactly as for `complete_step`
(`agentq.store.rules.attempt.fenced`): a stale attempt records nothing. Each function is the
rule of the `DurableStore` verb of the same name, run by a store inside one transaction (see
`agentq.store.rules.tx` for the order every rule works in).

Decisions:

- A key names one call: a start with another fingerprint than the stored one raises
  `KeyConflictError` (None on either side is not compared), unless the stored call failed:
  a failed call has no output another call could be answered with, and the usual way out of
  a failure is to fix the tool (its code, so its fingerprint) and retry, so it starts again
  under the new fingerprint. A completed call (its output would answer another call) and one
  in doubt (it may have reached the world with the old values) conflict. A start of a wait's
  key conflicts too.
- A completed key is never started again (`EngineError`): the caller answers it from
  `DurableStore.calls`. A failed key may start again (a later attempt runs it again); a
  started key that never finished starts again with ``rerun: true`` (it is in doubt).
- An outcome of a call that was running when its workflow was cancelled is still recorded,
  as long as no other claim took the step over since (a retry meanwhile does not: the revoked
  lease still fences the step): the call did reach the outside world, and a retried workflow
  must not make it twice. Starting a call in a closed workflow is
  refused (`WorkflowClosedError`).
"""

from __future__ import annotations

from typing import Any

from agentq.errors import EngineError, KeyConflictError
from agentq.events import EventKind
from agentq.keys import validate_key
from agentq.outcomes import ErrorInfo
from agentq.store.contract.checks import (
    check_duration,
    check_error,
    check_execution,
    check_fingerprint,
    check_now,
    check_object,
    check_payload,
    check_text,
)
from agentq.store.contract.claims import Execution
from agentq.store.contract.rows import CallKind, CallRow, CallState
from agentq.store.rules.attempt import check_fence
from agentq.store.rules.fence import StepLease, check_known
from agentq.store.rules.projection_calls import project_call
from agentq.store.rules.tx import Draft, Tx, describe_call

__all__ = ["complete_call", "fail_call", "start_call"]

_K = EventKind


def _short(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:60]) + "…"


def start_call(
    tx: Tx,
    execution: Execution,
    key: str,
    fingerprint: str | None,
    lane: str | None,
    label: dict[str, Any] | None,
    now: float,
) -> CallRow:
    """Rule of `DurableStore.start_call`: `CallStarted` (``rerun`` when the stored row is
    still started); the call row is started."""
    now, at = check_now(now)
    key = validate_key(key, "call key")
    fp = check_fingerprint(fingerprint)
    if lane is not None:
        lane = validate_key(lane, "lane")
    label_value, label_text = check_object(label, "label")
    ex, step, row = _fenced(tx, execution, key, "start_call")
    rerun = False
    if row is not None:
        where = describe_call(ex.workflow_id, key, "call key")
        if row.kind is not CallKind.CALL:
            raise KeyConflictError(
                f"{where} is the key of a durable wait ({row.reason!r}); a call needs a key "
                "of its own"
            )
        if (
            fp is not None
            and row.fingerprint is not None
            and fp != row.fingerprint
            and row.state is not CallState.FAILED  # no answer to protect: runs as it is now
        ):
            raise KeyConflictError(
                f"{where} was recorded for another call (stored fingerprint "
                f"{_short(row.fingerprint)}, this call's {_short(fp)}): a key names one call; "
                "use another key for another call"
            )
        if row.state is CallState.COMPLETED:
            raise EngineError(
                f"start_call refused: {where} completed already (event #{row.last_seq}); "
                "answer it from the log (DurableStore.calls) instead of running it again"
            )
        rerun = row.state is CallState.STARTED
    data = {
        "key": key,
        "lane": lane,
        "attempt": ex.attempt,
        "label": label_value,
        "fingerprint": fp,
        "rerun": rerun,
    }
    return _record(tx, ex, step, row, _K.CALL_STARTED, at, data, {"label": label_text})


def _fenced(
    tx: Tx, execution: object, key: str, verb: str, after_cancel: bool = False
) -> tuple[Execution, StepLease, CallRow | None]:
    """`agentq.store.rules.attempt.fenced` on the `CallFence` of the execution's step (its
    lease), and the call row of `key` (or None), read together (`Tx.load_fence`)."""
    ex = check_execution(execution)
    fence = tx.load_fence(ex.workflow_id, ex.step_index, key)
    names = None if fence is None else fence.step_names
    check_known(ex.workflow_id, ex.step_index, names, fence is not None and fence.step is not None)
    assert fence is not None and fence.step is not None
    check_fence(ex, fence, fence.step, verb, after_cancel)
    return ex, fence.step, fence.call


def _started(ex: Execution, key: str, row: CallRow | None, verb: str) -> CallRow:
    """Return the call row `verb` records an outcome for: started, by this step."""
    if (
        row is not None
        and row.kind is CallKind.CALL
        and row.state is CallState.STARTED
        and row.step_index == ex.step_index
    ):
        return row
    where = describe_call(ex.workflow_id, key, "call key")
    if row is None:
        raise EngineError(f"{verb} refused: {where} was never started (start_call first)")
    if row.kind is not CallKind.CALL:
        raise KeyConflictError(f"{verb} refused: {where} is the key of a durable wait")
    if row.state is not CallState.STARTED:
        raise EngineError(
            f"{verb} refused: {where} is {row.state}, not started (each run of a call is "
            "started once and ends once)"
        )
    if row.step_index != ex.step_index:
        raise EngineError(
            f"{verb} refused: {where} was started by step #{row.step_index}, not by step "
            f"#{ex.step_index}"
        )
    return row


def _record(
    tx: Tx,
    ex: Execution,
    step: StepLease,
    row: CallRow | None,
    kind: EventKind,
    at: float,
    data: dict[str, Any],
    raw: dict[str, str],
) -> CallRow:
    """Append the call's event and write its row as `project` would: the call row after
    `project_call`, and the workflow's ``updated_at`` and ``last_seq`` (the event changes
    no other row)."""
    draft = Draft.build(
        kind, ex.workflow_id, at, data, step=step, attempt=ex.attempt, worker_id=ex.worker_id,
        raw=raw,
    )
    seq = tx.append(draft)
    key = data["key"]
    after = project_call(draft.logged(seq), {} if row is None else {key: row})[key]
    tx.put_call(after, row is None)
    tx.touch_workflow(ex.workflow_id, at, seq)
    return after


def complete_call(
    tx: Tx,
    execution: Execution,
    key: str,
    output: Any,
    usage: dict[str, Any] | None,
    duration: float,
    now: float,
) -> CallRow:
    """Rule of `DurableStore.complete_call`: `CallCompleted`; the call row is completed."""
    now, at = check_now(now)
    key = validate_key(key, "call key")
    value, text = check_payload(output, "output")
    usage_value, usage_text = check_object(usage, "usage")
    seconds = check_duration(duration)
    ex, step, found = _fenced(tx, execution, key, "complete_call", after_cancel=True)
    row = _started(ex, key, found, "complete_call")
    data = {
        "key": key,
        "output": value,
        "duration": seconds,
        "usage": usage_value,
        "label": row.label,
        "lane": row.lane,
        "attempt": ex.attempt,
    }
    raw = {"output": text, "usage": usage_text}
    return _record(tx, ex, step, row, _K.CALL_COMPLETED, at, data, raw)


def fail_call(
    tx: Tx,
    execution: Execution,
    key: str,
    reason: str,
    error: ErrorInfo | None,
    duration: float,
    now: float,
) -> CallRow:
    """Rule of `DurableStore.fail_call`: `CallFailed`; the call row is failed."""
    now, at = check_now(now)
    key = validate_key(key, "call key")
    reason = check_text(reason, "reason")
    info = check_error(error)
    seconds = check_duration(duration)
    ex, step, found = _fenced(tx, execution, key, "fail_call", after_cancel=True)
    row = _started(ex, key, found, "fail_call")
    data = {
        "key": key,
        "reason": reason,
        "error": info,
        "duration": seconds,
        "label": row.label,
        "lane": row.lane,
        "attempt": ex.attempt,
    }
    return _record(tx, ex, step, row, _K.CALL_FAILED, at, data, {})
