"""The durable store's transition rules, written once and shared by every store.

Each write verb of `DurableStore` is a plain synchronous function here, over a small `Tx`
(read a workflow row and step rows, append an event, write rows). A store runs the function
inside one atomic transaction of its backend and commits only if it returns; so every store
accepts, refuses and records exactly the same things.

Every rule works in the same order:

1. check its arguments (`TypeError` / `ValueError`, `InvalidKeyError` for ids) and encode its
   JSON values with `agentq.codec` (`PayloadError`) — before anything is read or written;
2. read the rows it needs and check the state, raising the specific `EngineError` or
   `LeaseLostError`, with a message naming the workflow, the step and the actual state;
3. build its events, append them, fold them through `agentq.store.projection.project` and
   write the rows that changed.

The argument checks live in `agentq.store.checks`, the projection in
`agentq.store.projection`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agentq.errors import (
    EngineError,
    LeaseLostError,
    NotWaitingError,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowClosedError,
    WorkflowMismatchError,
)
from agentq.events import Event, EventKind, utc
from agentq.keys import validate_key
from agentq.outcomes import ErrorInfo
from agentq.store.base import (
    AlreadyCompleted,
    AlreadyWaiting,
    Claimed,
    ClaimResult,
    Execution,
    HeldByOther,
    StepRow,
    StepState,
    WorkflowClosed,
    WorkflowRow,
    WorkflowState,
)
from agentq.store.checks import (
    check_error,
    check_execution,
    check_index,
    check_now,
    check_number,
    check_payload,
    check_text,
    check_ttl,
)
from agentq.store.projection import Rows, project

__all__ = [
    "Draft",
    "Tx",
    "cancel_workflow",
    "claim_step",
    "complete_step",
    "fail_step",
    "release_expired",
    "renew_lease",
    "resume_step",
    "start_workflow",
    "wait_step",
]

_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_K = EventKind


@dataclass(frozen=True, slots=True)
class Draft:
    """An event about to be appended: everything but its sequence number.

    Attributes:
        kind, workflow_id, step_index, step_name, attempt, worker_id: As in `Event`.
        at: Unix seconds (already rounded to the microsecond, as `Event.at` holds it).
        data: The kind's values (JSON, as they will read back).
        data_json: `data` as compact JSON text, what a store writes.
    """

    kind: EventKind
    workflow_id: str
    at: float
    step_index: int | None
    step_name: str | None
    attempt: int | None
    worker_id: str | None
    data: dict[str, Any]
    data_json: str

    def event(self, seq: int) -> Event:
        """Return the `Event` this draft becomes once the store gave it `seq`."""
        return Event(
            seq,
            utc(self.at),
            self.kind,
            self.workflow_id,
            self.step_index,
            self.step_name,
            self.attempt,
            self.worker_id,
            self.data,
        )


class Tx(Protocol):
    """What a rule needs from one open transaction of a store."""

    def load(
        self, workflow_id: str, first: int = 0, last: int = -1
    ) -> tuple[WorkflowRow | None, dict[int, StepRow]]:
        """Return the workflow's row (or None) and its step rows ``first``..``last``."""
        ...

    def append(self, draft: Draft) -> Event:
        """Append an event; return it with the next sequence number of the log."""
        ...

    def put_workflow(self, row: WorkflowRow, started_seq: int | None) -> None:
        """Insert a new workflow row (`started_seq` given) or update one (None).

        An update changes only ``state``, ``reason``, ``updated_at`` and ``last_seq`` (the
        last two follow from the log: a store may derive them from it instead of writing).
        """
        ...

    def put_step(self, row: StepRow, new: bool) -> None:
        """Insert (`new`) or replace the step row."""
        ...


# ---------------------------------------------------------------- building blocks


def _where(workflow_id: str, index: int, name: str | None = None) -> str:
    return f"step {name!r} (#{index}) of workflow {workflow_id!r}" if name else (
        f"step #{index} of workflow {workflow_id!r}"
    )


def _closed(wf: WorkflowRow) -> str:
    return f"workflow {wf.workflow_id!r} is {wf.state}" + (
        f" ({wf.reason})" if wf.reason else ""
    )


def _draft(
    kind: EventKind,
    workflow_id: str,
    at: float,
    data: dict[str, Any],
    *,
    step: StepRow | None = None,
    attempt: int | None = None,
    worker_id: str | None = None,
    raw: dict[str, str] | None = None,
) -> Draft:
    # `raw` holds JSON text already made by `encode`, spliced in rather than encoded twice.
    if raw:
        spliced = ",".join(f'"{k}":{t}' for k, t in raw.items())  # keys are plain names
        rest = {k: v for k, v in data.items() if k not in raw}
        text = f"{_JSON.encode(rest)[:-1]},{spliced}}}" if rest else f"{{{spliced}}}"
    else:
        text = _JSON.encode(data)
    return Draft(
        kind,
        workflow_id,
        at,
        None if step is None else step.step_index,
        None if step is None else step.step_name,
        attempt,
        worker_id,
        data,
        text,
    )


def _apply(tx: Tx, rows: Rows, drafts: Sequence[Draft]) -> WorkflowRow:
    """Append `drafts`, fold them through `project`, write the rows that changed."""
    after = rows
    for draft in drafts:
        after = project(tx.append(draft), after)
    wf = after.workflow
    assert wf is not None
    if rows.workflow is None:
        tx.put_workflow(wf, wf.last_seq)
    else:
        tx.put_workflow(wf, None)
    for index, row in after.steps.items():
        before = rows.steps.get(index)
        if row is not before:
            tx.put_step(row, before is None)
    return wf


def _load(
    tx: Tx, workflow_id: str, index: int, *, first: int | None = None
) -> tuple[WorkflowRow, dict[int, StepRow]]:
    """Read the workflow and its steps `first`..`index`, or raise Unknown*Error."""
    wf, steps = tx.load(workflow_id, index if first is None else first, index)
    if wf is None:
        raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
    if not 0 <= index < len(wf.step_names):
        raise UnknownStepError(
            f"workflow {workflow_id!r} has no {_where(workflow_id, index)}: it has "
            f"{len(wf.step_names)} steps {list(wf.step_names)!r}"
        )
    if index not in steps:  # pragma: no cover - a corrupt projection
        raise UnknownStepError(f"{_where(workflow_id, index)} has no row in the projection")
    return wf, steps


def _fenced(tx: Tx, execution: object, verb: str) -> tuple[Execution, WorkflowRow,
                                                          dict[int, StepRow]]:
    """Load the execution's rows and check that it still holds its lease (fencing)."""
    ex = check_execution(execution)
    wf, steps = _load(tx, ex.workflow_id, ex.step_index)
    step = steps[ex.step_index]
    if step.lease_token != ex.lease_token or step.worker_id != ex.worker_id:
        where = _where(ex.workflow_id, ex.step_index, step.step_name)
        raise LeaseLostError(
            f"{verb} refused for {where}: lease #{ex.lease_token} of worker {ex.worker_id!r} "
            f"was taken over by lease #{step.lease_token} of worker {step.worker_id!r} "
            f"(the step is {step.state})"
        )
    if wf.state.closed:
        where = _where(ex.workflow_id, ex.step_index, step.step_name)
        raise WorkflowClosedError(f"{verb} refused for {where}: {_closed(wf)}")
    if step.state is not StepState.LEASED:
        where = _where(ex.workflow_id, ex.step_index, step.step_name)
        raise LeaseLostError(
            f"{verb} refused for {where}: lease #{ex.lease_token} of worker {ex.worker_id!r} "
            f"no longer holds it (the step is {step.state})"
        )
    return ex, wf, steps


# ---------------------------------------------------------------- the verbs


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


def start_workflow(
    tx: Tx, workflow_id: str, step_names: Sequence[str], input: Any, now: float
) -> tuple[WorkflowRow, bool]:
    """Rule of `DurableStore.start_workflow`; also checks the ids and names.

    Raises:
        InvalidKeyError / TypeError: A bad workflow id or step name.
        ValueError: No steps, or duplicate step names.
        WorkflowMismatchError: The id exists with other step names or another input.
    """
    workflow_id = validate_key(workflow_id, "workflow id")
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
    existing, _ = tx.load(workflow_id)
    if existing is not None:
        if existing.step_names != names:
            raise WorkflowMismatchError(
                f"workflow {workflow_id!r} exists with steps {list(existing.step_names)!r}, "
                f"not {list(names)!r}"
            )
        if existing.input != value:
            raise WorkflowMismatchError(
                f"workflow {workflow_id!r} exists with another input "
                f"({_short(existing.input)}, not {_short(value)}); a workflow id names one "
                "run: use a new id for new input"
            )
        return existing, False
    draft = _draft(
        _K.WORKFLOW_STARTED,
        workflow_id,
        at,
        {"steps": list(names), "input": value},
        raw={"input": text},
    )
    return _apply(tx, Rows(None, {}), [draft]), True


def claim_step(
    tx: Tx, workflow_id: str, step_index: int, worker_id: str, lease_ttl: float, now: float
) -> ClaimResult:
    """Rule of `DurableStore.claim_step`: a compare-and-swap on the step's row.

    A lease is live while ``now <= expires_at``, so it is never taken over at the tick it
    expires. A step can be claimed only once every earlier step has completed.
    """
    workflow_id = validate_key(workflow_id, "workflow id")
    index = check_index(step_index)
    worker_id = validate_key(worker_id, "worker id")
    ttl = check_ttl(lease_ttl)
    now, at = check_now(now)
    expires_at = now + ttl
    if not math.isfinite(expires_at):
        raise ValueError(f"now + lease_ttl overflows: {now!r} + {ttl!r}")
    wf, steps = _load(tx, workflow_id, index, first=max(index - 1, 0))
    step = steps[index]
    if step.state is StepState.COMPLETED:
        return AlreadyCompleted(step.output)
    if wf.state.closed or step.state is StepState.FAILED:
        return WorkflowClosed(wf.state, wf.reason)
    if step.state is StepState.WAITING:
        return AlreadyWaiting(step.reason or "")
    if index > 0 and steps[index - 1].state is not StepState.COMPLETED:
        before = steps[index - 1]
        raise EngineError(
            f"cannot claim {_where(workflow_id, index, step.step_name)}: the step before it, "
            f"{before.step_name!r} (#{index - 1}), is {before.state}, not completed"
        )
    drafts: list[Draft] = []
    if step.state is StepState.LEASED:
        held_until = step.lease_expires_at if step.lease_expires_at is not None else math.inf
        if now <= held_until:
            return HeldByOther(step.worker_id or "", held_until)
        drafts.append(
            _draft(
                _K.WORKER_RECOVERED,
                workflow_id,
                at,
                {
                    "previous_worker": step.worker_id,
                    "lease_token": step.lease_token,
                    "expired_at": held_until,
                },
                step=step,
                attempt=step.attempt,
                worker_id=worker_id,
            )
        )
    token, attempt = step.lease_token + 1, step.attempt + 1
    drafts.append(
        _draft(
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
    _apply(tx, Rows(wf, {index: step}), drafts)
    execution = Execution(
        workflow_id, index, step.step_name, worker_id, token, attempt, expires_at
    )
    return Claimed(execution, step.resume_input, step.resumed)


def renew_lease(tx: Tx, execution: Execution, lease_ttl: float, now: float) -> Execution:
    """Rule of `DurableStore.renew_lease`: a lease still held (even expired but not yet taken
    over) is extended; no event is appended."""
    ttl = check_ttl(lease_ttl)
    now, _ = check_now(now)
    ex = check_execution(execution)
    wf, steps = _load(tx, ex.workflow_id, ex.step_index)
    step = steps[ex.step_index]
    held = (
        step.state is StepState.LEASED
        and step.lease_token == ex.lease_token
        and step.worker_id == ex.worker_id
    )
    if not held:
        why = _closed(wf) if wf.state.closed else (
            f"the step is {step.state} under lease #{step.lease_token} of worker "
            f"{step.worker_id!r}"
        )
        raise LeaseLostError(
            f"cannot renew lease #{ex.lease_token} of worker {ex.worker_id!r} on "
            f"{_where(ex.workflow_id, ex.step_index, step.step_name)}: {why}"
        )
    expires_at = now + ttl
    tx.put_step(replace(step, lease_expires_at=expires_at), False)
    return replace(ex, expires_at=expires_at)


def complete_step(tx: Tx, execution: Execution, output: Any, now: float) -> WorkflowRow:
    """Rule of `DurableStore.complete_step`: `StepCompleted`, and `WorkflowCompleted` (with
    every step's output) after the last step."""
    now, at = check_now(now)
    value, text = check_payload(output, "output")
    ex, wf, steps = _fenced(tx, execution, "complete_step")
    step = steps[ex.step_index]
    drafts = [
        _draft(
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
        _, steps = tx.load(ex.workflow_id, 0, last)
        outputs = [steps[i].output for i in range(last)] + [value]
        drafts.append(_draft(_K.WORKFLOW_COMPLETED, ex.workflow_id, at, {"outputs": outputs}))
    return _apply(tx, Rows(wf, steps), drafts)


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
    ex, wf, steps = _fenced(tx, execution, "fail_step")
    step = steps[ex.step_index]
    failed = _draft(
        _K.STEP_FAILED,
        ex.workflow_id,
        at,
        {"reason": reason, "error": info},
        step=step,
        attempt=ex.attempt,
        worker_id=ex.worker_id,
    )
    if retry is None:
        follow = _draft(_K.WORKFLOW_FAILED, ex.workflow_id, at, {"reason": reason}, step=step)
    else:
        follow = _draft(
            _K.RETRY_SCHEDULED,
            ex.workflow_id,
            at,
            {"retry_at": retry, "delay": max(retry - now, 0.0)},
            step=step,
            attempt=ex.attempt,
            worker_id=ex.worker_id,
        )
    return _apply(tx, Rows(wf, steps), [failed, follow])


def wait_step(tx: Tx, execution: Execution, reason: str, now: float) -> WorkflowRow:
    """Rule of `DurableStore.wait_step`: `StepWaiting`; the lease is released."""
    now, at = check_now(now)
    reason = check_text(reason, "reason")
    ex, wf, steps = _fenced(tx, execution, "wait_step")
    draft = _draft(
        _K.STEP_WAITING,
        ex.workflow_id,
        at,
        {"reason": reason},
        step=steps[ex.step_index],
        attempt=ex.attempt,
        worker_id=ex.worker_id,
    )
    return _apply(tx, Rows(wf, steps), [draft])


def resume_step(
    tx: Tx, workflow_id: str, step_index: int, input: Any, now: float
) -> WorkflowRow:
    """Rule of `DurableStore.resume_step`: `StepResumed`; the step is pending with attempt 0
    (its next claim is attempt 1) while its fencing token keeps increasing.

    A step that is not waiting raises `NotWaitingError` naming its state, except in a
    cancelled or failed workflow, which raises `WorkflowClosedError` (a waiting step never
    belongs to a closed workflow: cancellation ends the wait).
    """
    workflow_id = validate_key(workflow_id, "workflow id")
    index = check_index(step_index)
    now, at = check_now(now)
    value, text = check_payload(input, "input")
    wf, steps = _load(tx, workflow_id, index)
    step = steps[index]
    if step.state is not StepState.WAITING:
        where = _where(workflow_id, index, step.step_name)
        if wf.state in (WorkflowState.CANCELLED, WorkflowState.FAILED):
            raise WorkflowClosedError(f"cannot resume {where}: {_closed(wf)}")
        raise NotWaitingError(f"cannot resume {where}: it is {step.state}, not waiting")
    draft = _draft(
        _K.STEP_RESUMED, workflow_id, at, {"input": value}, step=step, raw={"input": text}
    )
    return _apply(tx, Rows(wf, steps), [draft])


def cancel_workflow(tx: Tx, workflow_id: str, reason: str, now: float) -> bool:
    """Rule of `DurableStore.cancel_workflow`: `WorkflowCancelled` once; leased and waiting
    steps become failed ("cancelled"), which revokes their leases."""
    workflow_id = validate_key(workflow_id, "workflow id")
    reason = check_text(reason, "reason")
    now, at = check_now(now)
    wf, steps = tx.load(workflow_id, 0, 1 << 30)
    if wf is None:
        raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
    if wf.state.closed:
        return False
    draft = _draft(_K.WORKFLOW_CANCELLED, workflow_id, at, {"reason": reason})
    _apply(tx, Rows(wf, steps), [draft])
    return True


def release_expired(tx: Tx, execution: Execution, now: float) -> bool:
    """Rule of `DurableStore.release_expired`: `WorkerRecovered` if the lease named by
    `execution` is still the step's and has expired (``now > expires_at``, using the stored
    expiry, which a renewal may have moved)."""
    now, at = check_now(now)
    ex = check_execution(execution)
    wf, steps = _load(tx, ex.workflow_id, ex.step_index)
    step = steps[ex.step_index]
    if (
        step.state is not StepState.LEASED
        or step.lease_token != ex.lease_token
        or step.worker_id != ex.worker_id
        or step.lease_expires_at is None
        or now <= step.lease_expires_at
    ):
        return False
    draft = _draft(
        _K.WORKER_RECOVERED,
        ex.workflow_id,
        at,
        {
            "previous_worker": step.worker_id,
            "lease_token": step.lease_token,
            "expired_at": step.lease_expires_at,
        },
        step=step,
        attempt=step.attempt,
    )
    _apply(tx, Rows(wf, steps), [draft])
    return True
