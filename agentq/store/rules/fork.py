"""The rule of `DurableStore.fork_workflow`: a new workflow whose history up to a point is
another's.

The fork's log is written in one transaction and stands alone (it never reads its parent
again, so sweeping or retrying the parent changes nothing in it):

1. ``WorkflowStarted`` with the parent's step names, input and definition;
2. ``WorkflowForked`` (``parent``, ``at``: the step index and name, and the call key or
   None; ``replaced``: the keys whose output was replaced);
3. for each step before ``at``'s step, in order: copies of its recorded calls and waits,
   then ``StepCompleted`` with the parent's output;
4. copies of the calls and waits of ``at``'s step recorded before ``at`` (in the order they
   were first recorded), and of the calls at ``at`` whose output `replace` gives.

A copy of a completed call is ``CallStarted`` + ``CallCompleted``; of an answered wait
``StepWaiting`` + ``StepResumed``; of a timed-out wait ``StepWaiting`` + ``WaitTimedOut``.
Every copy carries ``forked_from`` (the parent's id) in its data and no attempt or worker
(no attempt of the fork made it); a replaced output also carries ``replaced: true``. Calls
that failed or were left in doubt, and waits never answered, are not copied: the fork runs
them live. So a run of the fork answers every copied call from its own log and runs the
rest (``at`` on) live.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentq.errors import UnknownWorkflowError, WorkflowMismatchError
from agentq.events import EventKind
from agentq.keys import validate_key
from agentq.store.contract.checks import check_index, check_now, check_payload
from agentq.store.contract.rows import CallKind, CallRow, CallState, StepState, WorkflowRow
from agentq.store.rules.projection import Rows
from agentq.store.rules.tx import Draft, Tx, apply_rows, describe_step

__all__ = ["fork_workflow"]

_K = EventKind


def _replacements(replace: Mapping[str, Any] | None) -> dict[str, tuple[Any, str]]:
    """`replace` checked: keys valid, values JSON (value as read back, JSON text)."""
    if replace is None:
        return {}
    if not isinstance(replace, Mapping):
        raise TypeError(f"replace must be a mapping of call key to output, got {replace!r:.80}")
    return {
        validate_key(k, "replace key"): check_payload(v, f"replace[{k!r}]")
        for k, v in replace.items()
    }


def fork_workflow(
    tx: Tx,
    workflow_id: str,
    new_workflow_id: str,
    step: int,
    key: str | None,
    replace: Mapping[str, Any] | None,
    now: float,
) -> WorkflowRow:
    """Rule of `DurableStore.fork_workflow` (see the module docstring for what it writes).

    Raises:
        UnknownWorkflowError: No workflow `workflow_id`.
        WorkflowMismatchError: `new_workflow_id` exists (or is `workflow_id`).
        ValueError: `step` is not a step of the parent, a step before it did not complete,
            `key` is not a call or wait of that step, or a `replace` key is not a call or
            wait of that step recorded at or before `key` (each message names it).
        PayloadError: A `replace` value is not JSON or is too large.
    """
    workflow_id = validate_key(workflow_id, "workflow id")
    new_id = validate_key(new_workflow_id, "new workflow id")
    index = check_index(step)
    if key is not None:
        key = validate_key(key, "call key")
    values = _replacements(replace)
    now, at = check_now(now)
    parent, steps = tx.load(workflow_id, 0, 1 << 30)
    if parent is None:
        raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
    if new_id == workflow_id:
        raise WorkflowMismatchError(f"cannot fork workflow {workflow_id!r} into itself")
    names = parent.step_names
    if not 0 <= index < len(names):
        raise ValueError(
            f"cannot fork workflow {workflow_id!r} at step #{index}: it has {len(names)} "
            f"steps {list(names)!r}"
        )
    where = describe_step(workflow_id, index, names[index])
    for i in range(index):
        if steps[i].state is not StepState.COMPLETED:
            raise ValueError(
                f"cannot fork at {where}: the step before it, {names[i]!r} (#{i}), is "
                f"{steps[i].state}, not completed, so it has no output to copy"
            )
    calls = tx.load_calls(workflow_id)
    by_key = {row.key: row for row in calls}
    cut = None
    if key is not None:
        row = by_key.get(key)
        if row is None or row.step_index != index:
            shown = [r.key for r in calls if r.step_index == index][:20]
            raise ValueError(
                f"cannot fork at key {key!r} of {where}: no call or wait of that step has "
                f"this key (its keys: {shown!r})"
            )
        cut = row.first_seq
    for k in values:
        row = by_key.get(k)
        if row is None or row.step_index != index or (cut is not None and row.first_seq > cut):
            raise ValueError(_not_replaceable(k, row, where, names, key))
    before = [
        r for r in calls
        if r.step_index < index
        or (r.step_index == index and (r.key in values or (cut is not None and r.first_seq < cut)))
    ]
    existing, _ = tx.load(new_id)
    if existing is not None:
        raise WorkflowMismatchError(
            f"cannot fork workflow {workflow_id!r} into {new_id!r}: a workflow with that id "
            "exists (a workflow id names one run: use a new id for the fork)"
        )
    start = Draft.build(
        _K.WORKFLOW_STARTED,
        new_id,
        at,
        {"steps": list(names), "input": parent.input, "definition": parent.definition},
    )
    rows = apply_rows(tx, Rows(None, {}), [start])
    forked = {
        "parent": workflow_id,
        "at": {"step": index, "step_name": names[index], "key": key},
        "replaced": sorted(values),
    }
    drafts = [Draft.build(_K.WORKFLOW_FORKED, new_id, at, forked)]
    for i in range(index + 1):
        own = rows.steps[i]
        for call in before:
            if call.step_index == i:
                drafts += _copies(call, new_id, own, at, workflow_id, values.get(call.key))
        if i < index:
            drafts.append(Draft.build(
                _K.STEP_COMPLETED, new_id, at,
                {"output": steps[i].output, "forked_from": workflow_id}, step=own,
            ))
    after = apply_rows(tx, rows, drafts).workflow
    assert after is not None
    return after


def _not_replaceable(
    k: str, row: CallRow | None, where: str, names: tuple[str, ...], at_key: str | None
) -> str:
    """Say why replace key `k` (its parent row `row`) cannot be replaced at the fork point."""
    if row is None:
        return f"replace key {k!r} is not a call or wait recorded by the workflow"
    own = f"{names[row.step_index]!r} (#{row.step_index})" if 0 <= row.step_index < len(
        names
    ) else f"#{row.step_index}"
    point = where if at_key is None else f"key {at_key!r} of {where}"
    return (
        f"replace key {k!r} (a {row.kind} of step {own}) is not at or before the fork point "
        f"({point}): only the calls and waits of the fork point's step recorded up to it can "
        "be replaced (an earlier step's output is copied as recorded: fork at that step to "
        "replace its calls)"
    )


def _copies(
    call: CallRow, new_id: str, own: Any, at: float, parent: str, value: tuple[Any, str] | None
) -> list[Draft]:
    """The events that record `call` (a row of the parent) in the fork, or none."""
    mark = {"forked_from": parent}
    raw = None if value is None else {"output" if call.kind is CallKind.CALL else "input": value[1]}
    if call.kind is CallKind.CALL:
        if value is None and call.state is not CallState.COMPLETED:
            return []  # failed or in doubt: the fork runs it live
        started = {
            "key": call.key, "lane": call.lane, "attempt": None, "label": call.label,
            # not compared (None): the fork's own run of the step makes its calls with the
            # fork's values (``ctx.workflow_id`` is the fork's id), and a copy is what the
            # parent recorded, answered as it is
            "fingerprint": None, "rerun": False, **mark,
        }
        done: dict[str, Any] = {
            "key": call.key,
            "output": call.output if value is None else value[0],
            "duration": 0.0 if call.duration is None or value is not None else call.duration,
            "usage": None if value is not None else call.usage,
            "label": call.label, "lane": call.lane, "attempt": None, **mark,
        }
        if value is not None:
            done["replaced"] = True
        return [
            Draft.build(_K.CALL_STARTED, new_id, at, started, step=own),
            Draft.build(_K.CALL_COMPLETED, new_id, at, done, step=own, raw=raw),
        ]
    if value is None and call.state not in (CallState.ANSWERED, CallState.TIMED_OUT):
        return []  # never answered: the fork asks again
    asked = {
        "reason": call.reason, "key": call.key, "details": call.details,
        "deadline": call.deadline, **mark,
    }
    events = [Draft.build(_K.STEP_WAITING, new_id, at, asked, step=own)]
    if value is None and call.state is CallState.TIMED_OUT:
        events.append(Draft.build(_K.WAIT_TIMED_OUT, new_id, at, {"key": call.key, **mark},
                                  step=own))
    else:
        answer: dict[str, Any] = {
            "input": call.output if value is None else value[0], "key": call.key, **mark
        }
        if value is not None:
            answer["replaced"] = True
        events.append(Draft.build(_K.STEP_RESUMED, new_id, at, answer, step=own, raw=raw))
    return events
