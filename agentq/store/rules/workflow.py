"""Rules a caller makes by workflow id: start, resume a step, time a wait out, cancel, retry.

These verbs hold no lease: they come from whoever drives the workflow (the engine starting a
run, a person approving a wait, a cancel button), not from the worker running a step. Each is
the rule of the `DurableStore` verb of the same name, run by a store inside one transaction
(see `agentq.store.rules.tx` for the order every rule works in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentq.difference import first_difference
from agentq.errors import (
    NotRetryableError,
    NotWaitingError,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowClosedError,
    WorkflowMismatchError,
)
from agentq.events import EventKind, utc
from agentq.keys import validate_key
from agentq.store.contract.checks import (
    check_index,
    check_now,
    check_number,
    check_payload,
    check_text,
)
from agentq.store.contract.children import (
    CHILD_WAIT_PREFIX,
    child_of,
    engine_wait,
    waited_child,
)
from agentq.store.contract.rows import CallRow, StepRow, StepState, WorkflowRow, WorkflowState
from agentq.store.rules.links import ended_children
from agentq.store.rules.messages import keep_input
from agentq.store.rules.projection import Rows
from agentq.store.rules.tx import (
    Draft,
    Tx,
    apply,
    cancel_draft,
    describe_closed,
    describe_step,
    load_step,
    timed_out_draft,
)

__all__ = [
    "cancel_workflow",
    "resume_step",
    "retry_workflow",
    "start_workflow",
    "time_out_wait",
    "time_out_workflow",
]

_K = EventKind


def start_workflow(
    tx: Tx,
    workflow_id: str,
    step_names: Sequence[str],
    input: Any,
    now: float,
    definition: str | None = None,
    trace: Mapping[str, str] | None = None,
    run_at: float | None = None,
    deadline: float | None = None,
    parent: Mapping[str, Any] | None = None,
) -> tuple[WorkflowRow, bool]:
    """Rule of `DurableStore.start_workflow`; also checks the ids and names.

    `run_at` and `deadline` are recorded in `WorkflowStarted` only when given; an existing
    workflow keeps its own (they are not compared). `parent` ({workflow_id, step, key}: the
    parent's step and wait key) is recorded in the `WorkflowStarted` of a child run
    (`agentq.store.rules.children.start_child`).

    Raises:
        InvalidKeyError / TypeError: A bad workflow id, step name or definition name, or a
            `trace` that is not a dict of str to str.
        ValueError: No steps, or duplicate step names.
        WorkflowMismatchError: The id exists with other step names, another input or
            another definition (None included: a plain workflow is not a definition's).
    """
    workflow_id = validate_key(workflow_id, "workflow id")
    if definition is not None:
        definition = validate_key(definition, "definition name")
    if isinstance(step_names, str) or not isinstance(step_names, Sequence):
        raise TypeError(f"step_names must be a sequence of str, got {step_names!r:.80}")
    names = tuple(validate_key(n, "step name") for n in step_names)
    if not names:
        raise ValueError(f"workflow {workflow_id!r} has no steps")
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"workflow {workflow_id!r} has duplicate step names: {dupes}")
    now, at = check_now(now)
    value, text = check_payload(input, "input")
    if trace is not None and (
        not isinstance(trace, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in trace.items())
    ):
        raise TypeError(f"trace must be a dict of str to str, or None; got {trace!r:.80}")
    run_at = None if run_at is None else check_number(run_at, "run_at")
    deadline = None if deadline is None else check_number(deadline, "deadline")
    existing, _ = tx.load(workflow_id)
    if existing is not None:
        if existing.definition != definition:
            raise WorkflowMismatchError(
                f"workflow {workflow_id!r} exists {_made_from(existing.definition)}, not "
                f"{_made_from(definition)}; a workflow id names one run: use a new id"
            )
        if existing.step_names != names:
            raise WorkflowMismatchError(
                f"workflow {workflow_id!r} exists with steps {list(existing.step_names)!r}, "
                f"not {list(names)!r}"
            )
        if existing.input != value:
            raise WorkflowMismatchError(
                f"workflow {workflow_id!r} exists with another input (stored vs given: "
                f"{first_difference(existing.input, value, 'input')}); a workflow id names "
                "one run: use a new id for new input"
            )
        return existing, False
    data: dict[str, Any] = {"steps": list(names), "input": value, "definition": definition}
    if trace:
        data["trace"] = dict(trace)
    if run_at is not None:
        data["run_at"] = run_at
    if deadline is not None:
        data["deadline"] = deadline
    if parent is not None:
        data["parent"] = dict(parent)
    draft = Draft.build(_K.WORKFLOW_STARTED, workflow_id, at, data, raw={"input": text})
    return apply(tx, Rows(None, {}), [draft]), True


def _made_from(definition: str | None) -> str:
    return "as a plain workflow" if definition is None else f"from definition {definition!r}"


def _wait_row(tx: Tx, step: StepRow) -> dict[str, CallRow]:
    """The row of the keyed wait `step` is on (to answer or time out), if any."""
    if step.wait_key is None:
        return {}
    row = tx.load_call(step.workflow_id, step.wait_key)
    return {} if row is None else {step.wait_key: row}


def resume_step(
    tx: Tx, workflow_id: str, step_index: int, input: Any, now: float, key: str | None = None
) -> WorkflowRow:
    """Rule of `DurableStore.resume_step`: `StepResumed`; the step is pending with attempt 0
    (its next claim is attempt 1) while its fencing token keeps increasing.

    A step that is not waiting raises `NotWaitingError` naming its state, except in a
    cancelled or failed workflow, which raises `WorkflowClosedError` (a waiting step never
    belongs to a closed workflow: cancellation ends the wait). With a `key` the step does
    not wait on (yet), the input is kept for the wait of that key instead
    (`agentq.store.rules.messages.keep_input`: a ``MessageSent`` with no topic, which that
    wait takes when it starts; refused with `NotWaitingError` if the step has completed,
    the wait was answered or an input is kept for it already). The event records the key of
    the wait it answered whenever the wait had one, given or not.

    A resume after the wait's deadline (``deadline <= now``) is refused, whether or not the
    wait was timed out yet: `NotWaitingError` saying the wait timed out at its deadline
    (UTC), nothing recorded. The same when `key` names a wait already timed out. The caller
    (the engine) then times the wait out (`time_out_wait`), so the outcome never depends on
    whether an engine happened to be alive at the deadline.
    """
    workflow_id = validate_key(workflow_id, "workflow id")
    index = check_index(step_index)
    now, at = check_now(now)
    if key is not None:
        key = validate_key(key, "wait key")
    value, text = check_payload(input, "input")
    wf, steps = load_step(tx, workflow_id, index)
    step = steps[index]
    where = describe_step(workflow_id, index, step.step_name)
    with_key = "" if key is None else f" with wait key {key!r}"
    _refuse_child_wait(tx, step, where, key)
    if step.state is not StepState.WAITING and wf.state in (
        WorkflowState.CANCELLED, WorkflowState.FAILED
    ):
        raise WorkflowClosedError(f"cannot resume {where}: {describe_closed(wf)}")
    late = _timed_out(tx, step, key, now)
    if late is not None:
        wait_key, deadline = late
        raise NotWaitingError(
            f"cannot resume {where}{with_key}: its wait {wait_key!r} timed out at "
            f"{utc(deadline).isoformat(timespec='milliseconds')} (its deadline passed before "
            "this input arrived; the step continues with InputTimeout)"
        )
    if key is not None and (step.state is not StepState.WAITING or key != step.wait_key):
        return keep_input(tx, wf, step, key, value, text, at)  # for the wait `key`, later
    if step.state is not StepState.WAITING:
        raise NotWaitingError(
            f"cannot resume {where}{with_key}: it is {step.state}, not waiting"
        )
    data: dict[str, Any] = {"input": value}
    if step.wait_key is not None:
        data["key"] = step.wait_key
    draft = Draft.build(_K.STEP_RESUMED, workflow_id, at, data, step=step, raw={"input": text})
    return apply(tx, Rows(wf, steps, _wait_row(tx, step)), [draft])


def _refuse_child_wait(tx: Tx, step: StepRow, where: str, key: str | None) -> None:
    """Raise `NotWaitingError` if the resume would answer a wait on a child run (key
    ``child:<key>``): only the child's end answers it, so the message names the child run to
    answer instead. A key with the prefix and no wait row yet is refused too (no child wait
    takes a kept input)."""
    wait_key = key if key is not None else step.wait_key
    said = engine_wait(wait_key)
    if said is not None:  # a sleep's or a receive's wait: no input answers it
        raise NotWaitingError(f"cannot resume {where} with wait key {wait_key!r}: it is {said}")
    if wait_key is None or not wait_key.startswith(CHILD_WAIT_PREFIX):
        return
    row = tx.load_call(step.workflow_id, wait_key)
    child = None if row is None else child_of(row)
    if row is not None and child is None:
        return  # a plain wait whose key happens to start with the prefix
    if child is None:
        child = waited_child(step.workflow_id, wait_key)
    elif row is not None and row.state != "waiting":  # the child ended: nothing to answer
        raise NotWaitingError(
            f"cannot resume {where} with wait key {wait_key!r}: it is {row.state}, not "
            f"waiting (its child run {child!r} ended)"
        )
    raise NotWaitingError(
        f"cannot resume {where} with wait key {wait_key!r}: it waits for its child run "
        f"{child!r}; answer that run (its end answers this wait)"
    )


def _timed_out(tx: Tx, step: StepRow, key: str | None, now: float) -> tuple[str, float] | None:
    """The (key, deadline) of the wait a resume at `now` comes too late for, else None: the
    step's current wait once its deadline passed, or the wait `key` names if it timed out."""
    if (
        step.state is StepState.WAITING
        and step.wait_key is not None
        and step.wait_deadline is not None
        and step.wait_deadline <= now
        and key in (None, step.wait_key)
    ):
        return step.wait_key, step.wait_deadline
    if key is None or (step.state is StepState.WAITING and key == step.wait_key):
        return None
    row = tx.load_call(step.workflow_id, key)
    if (
        row is not None
        and row.kind == "wait"
        and row.step_index == step.step_index
        and row.state == "timed_out"
        and row.deadline is not None
    ):
        return key, row.deadline
    return None


def time_out_wait(tx: Tx, workflow_id: str, step_index: int, now: float) -> bool:
    """Rule of `DurableStore.time_out_wait`: `WaitTimedOut` if the step waits on a keyed wait
    whose deadline is ``<= now``; the step is pending with attempt 0, like after a resume."""
    workflow_id = validate_key(workflow_id, "workflow id")
    index = check_index(step_index)
    now, at = check_now(now)
    wf, steps = load_step(tx, workflow_id, index)
    step = steps[index]
    if (
        wf.state.closed
        or step.state is not StepState.WAITING
        or step.wait_key is None
        or step.wait_deadline is None
        or step.wait_deadline > now
    ):
        return False
    draft = Draft.build(_K.WAIT_TIMED_OUT, workflow_id, at, {"key": step.wait_key}, step=step)
    apply(tx, Rows(wf, steps, _wait_row(tx, step)), [draft])
    return True


def time_out_workflow(tx: Tx, workflow_id: str, now: float) -> bool:
    """Rule of `DurableStore.time_out_workflow`: `WorkflowFailed` (reason
    ``WorkflowTimedOut: ...``, data ``deadline``) once, if the workflow is open and its
    deadline is ``<= now``; its leased and waiting steps fail, which revokes their leases."""
    workflow_id = validate_key(workflow_id, "workflow id")
    now, at = check_now(now)
    wf, steps = tx.load(workflow_id, 0, 1 << 30)
    if wf is None:
        raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
    if wf.state.closed or wf.deadline is None or wf.deadline > now:
        return False
    apply(tx, Rows(wf, steps), [timed_out_draft(wf, at)])
    return True


def cancel_workflow(tx: Tx, workflow_id: str, reason: str, now: float) -> bool:
    """Rule of `DurableStore.cancel_workflow`: `WorkflowCancelled` once; leased and waiting
    steps become failed ("cancelled"), which revokes their leases. A revoked lease still
    fences its step until it is released (``fenced_until`` in the event: its expiry now)."""
    workflow_id = validate_key(workflow_id, "workflow id")
    reason = check_text(reason, "reason")
    now, at = check_now(now)
    wf, steps = tx.load(workflow_id, 0, 1 << 30)
    if wf is None:
        raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
    if wf.state.closed:
        return False
    apply(tx, Rows(wf, steps), [cancel_draft(workflow_id, steps, reason, at)])
    return True


def retry_workflow(tx: Tx, workflow_id: str, from_step: int | None, now: float) -> WorkflowRow:
    """Rule of `DurableStore.retry_workflow`: `WorkflowRetried`; the workflow runs again from
    `from_step` (default: its first step that did not complete).

    The steps before `from_step` must have completed; they keep their outputs. The steps from
    `from_step` on become pending as if never run, their fencing tokens kept (so a stale
    worker's write is still refused). Each ``child:`` wait row still waiting on a child that
    has ended (a parent cancelled with its child, a child that ended after its parent
    closed) is answered with the child's outcome (`ChildEnded`, as the end of a child answers
    an open parent), whether or not the retried steps start that child again. A retried
    child leaves its parent alone: the parent's attempt that starts it again re-opens its
    wait row on it (`agentq.store.rules.links.rejoin`).

    Raises:
        UnknownWorkflowError / UnknownStepError: No such workflow or step.
        NotRetryableError: The workflow is running, waiting or completed, or a step before
            `from_step` has not completed.
    """
    workflow_id = validate_key(workflow_id, "workflow id")
    first = None if from_step is None else check_index(from_step)
    now, at = check_now(now)
    wf, steps = tx.load(workflow_id, 0, 1 << 30)
    if wf is None:
        raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
    if wf.state not in (WorkflowState.FAILED, WorkflowState.CANCELLED):
        raise NotRetryableError(
            f"cannot retry workflow {workflow_id!r}: it is {wf.state}; only a failed or "
            "cancelled workflow runs again"
        )
    unfinished = next(
        (i for i in sorted(steps) if steps[i].state is not StepState.COMPLETED), None
    )
    if unfinished is None:  # pragma: no cover - a failed workflow has a step that is not done
        unfinished = len(wf.step_names) - 1
    if first is None:
        first = unfinished
    elif not 0 <= first < len(wf.step_names):
        raise UnknownStepError(
            f"workflow {workflow_id!r} has no {describe_step(workflow_id, first)}: it has "
            f"{len(wf.step_names)} steps {list(wf.step_names)!r}"
        )
    elif first > unfinished:
        blocked = steps[unfinished]
        raise NotRetryableError(
            f"cannot retry workflow {workflow_id!r} from "
            f"{describe_step(workflow_id, first, wf.step_names[first])}: the step before it, "
            f"{blocked.step_name!r} (#{unfinished}), is {blocked.state}, not completed; "
            f"retry from step #{unfinished} or earlier"
        )
    draft = Draft.build(
        _K.WORKFLOW_RETRIED,
        workflow_id,
        at,
        {"from_step": first, "previous_state": str(wf.state), "previous_reason": wf.reason},
        step=steps[first],
    )
    rows, ended = ended_children(tx, workflow_id, steps, at)
    return apply(tx, Rows(wf, steps, rows), [draft, *ended])
