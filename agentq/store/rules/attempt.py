"""Transition rules that end an attempt, under fencing: complete, fail, wait.

The worker presents the `Execution` its claim returned; the write is refused with
`LeaseLostError` once another claim took the step over or the lease was released, and with
`WorkflowClosedError` once the workflow was cancelled meanwhile, so a stale worker's late result
is never recorded (`fenced`; the call rules of `calls` use it too). Each function is the
rule of the `DurableStore` verb of the same name, run by a store inside one transaction (see
`agentq.store.rules.tx` for the order every rule works in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentq.errors import KeyConflictError, LeaseLostError, WorkflowClosedError
from agentq.events import EventKind
from agentq.keys import validate_key
from agentq.outcomes import ErrorInfo
from agentq.store.contract.checks import (
    check_error,
    check_execution,
    check_now,
    check_number,
    check_object,
    check_payload,
    check_text,
)
from agentq.store.contract.children import child_of
from agentq.store.contract.claims import Execution
from agentq.store.contract.rows import (
    CallKind,
    CallRow,
    CallState,
    StepRow,
    StepState,
    WorkflowRow,
    WorkflowState,
)
from agentq.store.rules.fence import CallFence, StepLease
from agentq.store.rules.messages import take_kept
from agentq.store.rules.projection import Rows, is_fenced
from agentq.store.rules.tx import (
    Draft,
    Tx,
    apply,
    apply_rows,
    child_outcome,
    describe_call,
    describe_closed,
    describe_step,
    load_step,
)

__all__ = ["check_fence", "complete_step", "completed", "fail_step", "fenced", "wait_step"]

_K = EventKind


def fenced(
    tx: Tx, execution: object, verb: str, *, after_cancel: bool = False
) -> tuple[Execution, WorkflowRow, dict[int, StepRow]]:
    """Load the execution's rows and check that it still holds its lease (fencing).

    Args:
        tx: The transaction.
        execution: What the claim returned.
        verb: The verb's name, for messages.
        after_cancel: Also accept an attempt whose lease was revoked only by the
            cancellation of its workflow (no other claim since, even if the workflow was
            retried while the revoked lease still fences the step): the outcome of a durable
            call that was running when the workflow was cancelled is still recorded.

    Raises:
        LeaseLostError: Another claim took the step over, or the lease was released.
        WorkflowClosedError: The workflow is closed (and `after_cancel` does not apply).
    """
    ex = check_execution(execution)
    wf, steps = load_step(tx, ex.workflow_id, ex.step_index)
    check_fence(ex, wf, steps[ex.step_index], verb, after_cancel)
    return ex, wf, steps


def check_fence(
    ex: Execution,
    wf: WorkflowRow | CallFence,
    step: StepRow | StepLease,
    verb: str,
    after_cancel: bool,
) -> None:
    """The check of `fenced` on what was read already: the workflow (or a call verb's
    `CallFence`) and the execution's step (or its `StepLease`).

    Raises:
        LeaseLostError, WorkflowClosedError: As `fenced`.
    """
    if step.lease_token != ex.lease_token or step.worker_id != ex.worker_id:
        where = describe_step(ex.workflow_id, ex.step_index, step.step_name)
        raise LeaseLostError(
            f"{verb} refused for {where}: lease #{ex.lease_token} of worker {ex.worker_id!r} "
            f"was taken over by lease #{step.lease_token} of worker {step.worker_id!r} "
            f"(the step is {step.state})"
        )
    if after_cancel and (
        (wf.state is WorkflowState.CANCELLED and step.state is StepState.FAILED)
        or is_fenced(step)  # retried since, but its revoked lease still fences the step
    ):
        return  # same token: the cancellation itself failed this attempt's step
    if wf.state.closed:
        where = describe_step(ex.workflow_id, ex.step_index, step.step_name)
        raise WorkflowClosedError(f"{verb} refused for {where}: {describe_closed(wf)}")
    if step.state is not StepState.LEASED:
        where = describe_step(ex.workflow_id, ex.step_index, step.step_name)
        raise LeaseLostError(
            f"{verb} refused for {where}: lease #{ex.lease_token} of worker {ex.worker_id!r} "
            f"no longer holds it (the step is {step.state})"
        )


def complete_step(tx: Tx, execution: Execution, output: Any, now: float) -> WorkflowRow:
    """Rule of `DurableStore.complete_step`: `StepCompleted`, and `WorkflowCompleted` (with
    every step's output) after the last step."""
    now, at = check_now(now)
    value, text = check_payload(output, "output")
    ex, wf, steps = fenced(tx, execution, "complete_step")
    after = completed(tx, ex, value, text, at, wf, steps)
    assert after.workflow is not None
    return after.workflow


def completed(
    tx: Tx,
    ex: Execution,
    value: Any,
    text: str,
    at: float,
    wf: WorkflowRow,
    steps: Mapping[int, StepRow],
) -> Rows:
    """The writes of `complete_step` once its arguments are checked (`value` and its JSON
    `text`, `at` the event time) and its rows read and fenced (`wf`, `steps` holding at least
    the execution's step): all the rows after the events."""
    step = steps[ex.step_index]
    drafts = [
        Draft.build(
            _K.STEP_COMPLETED,
            ex.workflow_id,
            at,
            {"output": value},
            step=step,
            attempt=ex.attempt,
            worker_id=ex.worker_id,
            raw={"output": text},
        )
    ]
    last = len(wf.step_names) - 1
    if ex.step_index == last:
        if not all(i in steps for i in range(last)):  # the earlier steps' rows (outputs)
            _, earlier = tx.load(ex.workflow_id, 0, last - 1)  # (a one-step workflow: none)
            steps = {**earlier, **steps}
        outputs = [steps[i].output for i in range(last)] + [value]
        drafts.append(
            Draft.build(_K.WORKFLOW_COMPLETED, ex.workflow_id, at, {"outputs": outputs})
        )
    return apply_rows(tx, Rows(wf, steps), drafts)


def fail_step(
    tx: Tx,
    execution: Execution,
    reason: str,
    error: ErrorInfo | None,
    now: float,
    retry_at: float | None,
) -> WorkflowRow:
    """Rule of `DurableStore.fail_step`: `StepFailed`, then `RetryScheduled` (the step is
    pending again) or `WorkflowFailed`."""
    now, at = check_now(now)
    reason = check_text(reason, "reason")
    info = check_error(error)
    retry = None if retry_at is None else check_number(retry_at, "retry_at")
    ex, wf, steps = fenced(tx, execution, "fail_step")
    step = steps[ex.step_index]
    failed = Draft.build(
        _K.STEP_FAILED,
        ex.workflow_id,
        at,
        {"reason": reason, "error": info},
        step=step,
        attempt=ex.attempt,
        worker_id=ex.worker_id,
    )
    if retry is None:
        follow = Draft.build(
            _K.WORKFLOW_FAILED, ex.workflow_id, at, {"reason": reason}, step=step
        )
    else:
        follow = Draft.build(
            _K.RETRY_SCHEDULED,
            ex.workflow_id,
            at,
            {"retry_at": retry, "delay": max(retry - now, 0.0)},
            step=step,
            attempt=ex.attempt,
            worker_id=ex.worker_id,
        )
    return apply(tx, Rows(wf, steps), [failed, follow])


def _check_wait_key(workflow_id: str, key: str, reason: str, row: CallRow | None) -> None:
    """Refuse a wait key already recorded: a call's key, or a wait asked before.

    One exception: a wait still unanswered (state waiting) while its step holds a lease.
    Only a cancellation leaves a wait so (it ends the step, not the wait), so the step runs
    again after `retry_workflow` and asks the same question again: the row is re-opened.
    With another reason it is another question under the same key, and refused. A child
    run's wait is re-opened too once answered (its `ChildEnded`, while a call of the step
    awaited the child): the step parks on it and is answered at once.
    """
    if row is None or (row.state is CallState.ANSWERED and child_of(row) is not None):
        return
    where = describe_call(workflow_id, key, "key")
    if row.kind is not CallKind.WAIT:
        raise KeyConflictError(f"{where} is a durable call's key; a wait needs a key of its own")
    if row.state is CallState.WAITING:
        if row.reason == reason:
            return
        raise KeyConflictError(
            f"wait {where} was asked already with another question ({row.reason!r}, not "
            f"{reason!r}) and never answered; a wait key asks one question: use a new key "
            "for a new question"
        )
    raise KeyConflictError(
        f"wait {where} was asked already ({row.reason!r}, now {row.state.value.replace('_', ' ')}"
        "); a wait key asks one question once: use a new key for a new question"
    )


def wait_step(
    tx: Tx,
    execution: Execution,
    reason: str,
    now: float,
    key: str | None = None,
    details: dict[str, Any] | None = None,
    deadline: float | None = None,
    topic: str | None = None,
) -> WorkflowRow:
    """Rule of `DurableStore.wait_step`: `StepWaiting`; the lease is released. With a key
    (a durable wait), also a new wait row (`_check_wait_key`: a key is recorded once, or
    re-opened when a retried workflow asks its unanswered question again). A wait on a child
    run (`agentq.store.contract.children`) that has ended already is answered at once: a
    `StepResumed` with the child's outcome follows in the same transaction. Else a keyed
    wait that finds a kept message (on its `topic`, or the input kept for its key) is
    answered in the same transaction (`agentq.store.rules.messages.take_kept`)."""
    now, at = check_now(now)
    reason = check_text(reason, "reason")
    if topic is not None:
        topic = validate_key(topic, "topic")
        if key is None:
            raise ValueError(f"a receive's topic {topic!r} belongs to a keyed wait: give a key")
    if key is not None:
        key = validate_key(key, "wait key")
    details_value, details_text = check_object(details, "details")
    limit = None if deadline is None else check_number(deadline, "deadline")
    if key is None and (details is not None or deadline is not None):
        raise ValueError(
            "details and deadline belong to a keyed wait (ctx.wait_for_input): give a key, "
            f"got details={details!r:.60} and deadline={deadline!r}"
        )
    ex, wf, steps = fenced(tx, execution, "wait_step")
    data: dict[str, Any] = {"reason": reason}
    raw: dict[str, str] | None = None
    calls: dict[str, CallRow] = {}
    if key is not None:
        row = tx.load_call(ex.workflow_id, key)
        _check_wait_key(ex.workflow_id, key, reason, row)
        if row is not None:
            calls[key] = row  # asked again after a retry: the row is re-opened
        data.update(key=key, details=details_value, deadline=limit)
        if topic is not None:
            data["topic"] = topic
        raw = {"details": details_text}
    draft = Draft.build(
        _K.STEP_WAITING,
        ex.workflow_id,
        at,
        data,
        step=steps[ex.step_index],
        attempt=ex.attempt,
        worker_id=ex.worker_id,
        raw=raw,
    )
    drafts = [draft]
    child = None if key is None or key not in calls else child_of(calls[key])
    answer = None if child is None else child_outcome(tx, child)
    if answer is not None:  # a child run that ended before its parent waited: answered now
        drafts.append(Draft.build(
            _K.STEP_RESUMED, ex.workflow_id, at, {"input": answer, "key": key},
            step=steps[ex.step_index],
        ))
    if key is None or answer is not None:
        return apply(tx, Rows(wf, steps, calls), drafts)
    after = apply_rows(tx, Rows(wf, steps, calls), drafts)
    assert after.workflow is not None
    taken = take_kept(
        tx, after.workflow, after.steps[ex.step_index], after.calls[key], topic, at
    )
    return after.workflow if taken is None else taken
