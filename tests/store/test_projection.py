"""`project` builds the hot step transitions field by field: the same rows as the rule
written with `dataclasses.replace`, for a step whose every field is set."""

from __future__ import annotations

import dataclasses

from agentq.events import Event, EventKind, utc
from agentq.outcomes import ErrorInfo
from agentq.store.contract.rows import StepRow, StepState, WorkflowRow, WorkflowState
from agentq.store.rules.projection import Rows, project

T0 = 1_767_225_600.0

STEP = StepRow(
    "wf", 1, "b", StepState.PENDING, attempt=2, worker_id="old", lease_token=7,
    lease_expires_at=T0 - 5, output={"old": 1}, reason="earlier", error=ErrorInfo("E", "m", "tb"),
    resume_input=[1], resumed=True, retry_at=T0 - 1, started_at=T0 - 100,
    finished_at=T0 - 50, recoveries=1, wait_key="k", wait_details={"d": 1},
    wait_deadline=T0 + 100,
)
WF = WorkflowRow("wf", WorkflowState.RUNNING, ("a", "b"), None, None, T0 - 200, T0 - 50, 9, None)


def step_after(kind: EventKind, data: dict[str, object], step: StepRow = STEP) -> StepRow:
    event = Event(10, utc(T0), kind, "wf", 1, "b", 3, "w2", data)
    return project(event, Rows(WF, {1: step})).steps[1]


def test_step_started_changes_exactly_the_lease_fields() -> None:
    assert step_after(EventKind.STEP_STARTED, {"lease_token": 8, "expires_at": T0 + 30}) == (
        dataclasses.replace(
            STEP, state=StepState.LEASED, attempt=3, worker_id="w2", lease_token=8,
            lease_expires_at=T0 + 30, reason=None, retry_at=None, finished_at=None,
        )
    )
    fresh = dataclasses.replace(STEP, started_at=None)
    started = step_after(EventKind.STEP_STARTED, {"lease_token": 8, "expires_at": 1}, fresh)
    assert started.started_at == T0


def test_step_completed_changes_exactly_the_outcome_fields() -> None:
    assert step_after(EventKind.STEP_COMPLETED, {"output": [2]}) == dataclasses.replace(
        STEP, state=StepState.COMPLETED, output=[2], lease_expires_at=None, reason=None,
        retry_at=None, finished_at=T0,
    )
