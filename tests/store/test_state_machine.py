"""Random histories of every verb against a plain-dict model, on every store.

After each rule: the projection equals the model, the log has the model's number of events,
and a replay of the log equals the live projection (a renewed lease's expiry aside).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
)

from agentq.errors import (
    EngineError,
    LeaseLostError,
    NotRetryableError,
    NotWaitingError,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowClosedError,
    WorkflowMismatchError,
)
from agentq.store import (
    AlreadyCompleted,
    AlreadyWaiting,
    Claimed,
    DurableStore,
    Execution,
    HeldByOther,
    NotBefore,
    StepState,
    WorkflowClosed,
    WorkflowState,
)
from agentq.store.projection import replay

from .conftest import T0, make_store

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")
IDS = tuple(f"w{i}" for i in range(1, 9))
STEPS = {wid: 1 + i % 3 for i, wid in enumerate(IDS)}  # w1: 1 step, w2: 2, w3: 3, …
JSON = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.text(max_size=3),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(0, 2), max_size=2),
)


@dataclass
class MStep:
    state: StepState = StepState.PENDING
    attempt: int = 0
    token: int = 0
    worker: str | None = None
    expires: float | None = None
    started_expires: float | None = None  # as its StepStarted event says
    output: Any = None
    resumed: bool = False
    resume_input: Any = None
    recoveries: int = 0
    retry_at: float | None = None


@dataclass
class MWorkflow:
    steps: list[MStep] = field(default_factory=list)
    state: WorkflowState = WorkflowState.RUNNING


class StoreMachine(RuleBasedStateMachine):
    kind = "memory"
    executions = Bundle("executions")

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.tmp = tempfile.mkdtemp(prefix="agentq-machine-")
        self.store: DurableStore = self.run(make_store(self.kind, Path(self.tmp)))
        self.now = T0
        self.model: dict[str, MWorkflow] = {}
        self.inputs: dict[str, Any] = {}
        self.events = 0

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)

    def expect(self, coro: Coroutine[Any, Any, Any], error: type[Exception]) -> None:
        n = self.events
        try:
            self.run(coro)
        except error:
            pass
        else:
            raise AssertionError(f"expected {error.__name__}")
        assert self.run(self.store.last_seq()) == n

    def teardown(self) -> None:
        try:
            self.run(self.store.close())
        finally:
            self.runner.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------ rules

    @rule(wid=st.sampled_from(IDS), value=JSON)
    def start(self, wid: str, value: Any) -> None:
        names = [f"s{i}" for i in range(STEPS[wid])]
        known = self.inputs.get(wid, value)
        if json.loads(json.dumps(known)) != json.loads(json.dumps(value)):
            # A workflow id names one run: another input is refused, appending nothing.
            self.expect(self.store.start_workflow(wid, names, value, self.now),
                        WorkflowMismatchError)
            value = known
        row, created = self.run(self.store.start_workflow(wid, names, value, self.now))
        assert created == (wid not in self.model) and row.workflow_id == wid
        if created:
            self.model[wid] = MWorkflow([MStep() for _ in names])
            self.inputs[wid] = row.input
            self.events += 1

    def pick(self, data: st.DataObject, *states: StepState) -> tuple[str, int]:
        """A workflow (rarely an unknown one) and a step, mostly the first in one of `states`."""
        wid = data.draw(st.sampled_from([*sorted(self.model), "nope"]))
        wf = self.model.get(wid)
        n = len(wf.steps) if wf else 1
        steps = wf.steps if wf else []
        target = next((i for i, s in enumerate(steps) if s.state in states), 0)
        return wid, data.draw(st.sampled_from([target, target, target, *range(n + 1)]))

    @rule(seconds=st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds

    @precondition(lambda self: self.model)
    @rule(
        target=executions,
        data=st.data(),
        worker=st.sampled_from(["A", "B"]),
        ttl=st.sampled_from([1.0, 3.0]),
        limit=st.sampled_from([0, 1, 3]),
    )
    def claim(self, data: st.DataObject, worker: str, ttl: float, limit: int) -> Any:
        wid, index = self.pick(data, StepState.PENDING, StepState.LEASED)
        call = self.store.claim_step(wid, index, worker, ttl, self.now, max_recoveries=limit)
        wf = self.model.get(wid)
        if wf is None:
            self.expect(call, UnknownWorkflowError)
            return multiple()
        if index >= len(wf.steps):
            self.expect(call, UnknownStepError)
            return multiple()
        s = wf.steps[index]
        before = wf.steps[index - 1] if index else None
        blocked = before is not None and before.state is not StepState.COMPLETED
        live = s.state is StepState.LEASED and s.expires is not None and self.now <= s.expires
        if blocked and s.state is StepState.PENDING and not wf.state.closed:
            self.expect(call, EngineError)
            return multiple()
        result = self.run(call)
        takeover = int(s.state is StepState.LEASED)
        if s.state is StepState.COMPLETED:
            assert result == AlreadyCompleted(s.output)
        elif wf.state.closed:
            assert isinstance(result, WorkflowClosed) and result.state is wf.state
        elif s.state is StepState.WAITING:
            assert isinstance(result, AlreadyWaiting)
        elif live:
            assert result == HeldByOther(s.worker or "", s.expires or 0.0)
        elif s.retry_at is not None and self.now < s.retry_at:
            assert result == NotBefore(s.retry_at)  # nothing recorded before the retry time
        elif s.recoveries + takeover > limit:  # lost to crashes too many times: fails
            assert result == WorkflowClosed(WorkflowState.FAILED, result.reason), result
            assert "crash" in (result.reason or "")
            self.events += 2 + takeover
            s.state, s.expires = StepState.FAILED, None
            s.attempt, s.recoveries = max(s.attempt - takeover, 0), s.recoveries + takeover
            wf.state = WorkflowState.FAILED
        else:
            assert isinstance(result, Claimed), result
            self.events += 1 + takeover
            # a lost attempt (taken over) is re-admitted under its own number
            s.attempt = max(s.attempt - takeover, 0) + 1
            s.recoveries += takeover
            s.state, s.token, s.retry_at = StepState.LEASED, s.token + 1, None
            s.worker = worker
            s.expires = s.started_expires = self.now + ttl
            ex = result.execution
            assert (ex.attempt, ex.lease_token, ex.expires_at) == (s.attempt, s.token, s.expires)
            assert (result.resumed, result.resume_input) == (s.resumed, s.resume_input)
            assert result.recoveries == s.recoveries
            return multiple(ex)
        return multiple()

    def fenced(self, ex: Execution) -> tuple[MWorkflow, MStep, type[Exception] | None]:
        wf = self.model[ex.workflow_id]
        s = wf.steps[ex.step_index]
        if s.token != ex.lease_token or s.worker != ex.worker_id:
            return wf, s, LeaseLostError
        if wf.state.closed:
            return wf, s, WorkflowClosedError
        if s.state is not StepState.LEASED:
            return wf, s, LeaseLostError
        return wf, s, None

    @rule(ex=executions, output=JSON)
    def complete(self, ex: Execution, output: Any) -> None:
        wf, s, error = self.fenced(ex)
        call = self.store.complete_step(ex, output, self.now)
        if error:
            self.expect(call, error)
            return
        row = self.run(call)
        s.state, s.output, s.expires = StepState.COMPLETED, output, None
        self.events += 1
        if ex.step_index == len(wf.steps) - 1:
            wf.state = WorkflowState.COMPLETED
            self.events += 1
        assert row.state is wf.state

    @rule(ex=executions, retry=st.sampled_from([True, True, True, False]))
    def fail(self, ex: Execution, retry: bool) -> None:
        wf, s, error = self.fenced(ex)
        call = self.store.fail_step(ex, "error", None, self.now, self.now + 1 if retry else None)
        if error:
            self.expect(call, error)
            return
        self.run(call)
        self.events += 2
        s.expires = None
        if retry:
            s.state, s.retry_at = StepState.PENDING, self.now + 1
        else:
            s.state, wf.state = StepState.FAILED, WorkflowState.FAILED

    @rule(ex=executions)
    def wait(self, ex: Execution) -> None:
        wf, s, error = self.fenced(ex)
        call = self.store.wait_step(ex, "input?", self.now)
        if error:
            self.expect(call, error)
            return
        self.run(call)
        self.events += 1
        s.state, s.expires, wf.state = StepState.WAITING, None, WorkflowState.WAITING

    @precondition(lambda self: self.model)
    @rule(data=st.data(), value=JSON)
    def resume(self, data: st.DataObject, value: Any) -> None:
        wid, index = self.pick(data, StepState.WAITING)
        call = self.store.resume_step(wid, index, value, self.now)
        wf = self.model.get(wid)
        if wf is None:
            self.expect(call, UnknownWorkflowError)
        elif index >= len(wf.steps):
            self.expect(call, UnknownStepError)
        elif wf.steps[index].state is not StepState.WAITING:
            closed = wf.state in (WorkflowState.CANCELLED, WorkflowState.FAILED)
            self.expect(call, WorkflowClosedError if closed else NotWaitingError)
        else:
            self.run(call)
            self.events += 1
            s = wf.steps[index]
            s.state, s.attempt, s.resumed, s.resume_input = StepState.PENDING, 0, True, value
            s.recoveries, s.retry_at = 0, None
            wf.state = WorkflowState.RUNNING

    @rule(wid=st.sampled_from([*IDS, "nope"]), go=st.integers(0, 3))
    def cancel(self, wid: str, go: int) -> None:
        if go:  # cancel one time in four: it ends a workflow for good
            return
        call = self.store.cancel_workflow(wid, "stop", self.now)
        wf = self.model.get(wid)
        if wf is None:
            self.expect(call, UnknownWorkflowError)
            return
        assert self.run(call) == (not wf.state.closed)
        if not wf.state.closed:
            self.events += 1
            wf.state = WorkflowState.CANCELLED
            for s in wf.steps:
                if s.state in (StepState.LEASED, StepState.WAITING):
                    s.state, s.expires = StepState.FAILED, None

    @rule(ex=executions, ttl=st.sampled_from([1.0, 3.0]))
    def renew(self, ex: Execution, ttl: float) -> None:
        s = self.model[ex.workflow_id].steps[ex.step_index]
        call = self.store.renew_lease(ex, ttl, self.now)
        held = s.state is StepState.LEASED and (s.token, s.worker) == (ex.lease_token, ex.worker_id)
        if not held:
            self.expect(call, LeaseLostError)
            return
        assert self.run(call).expires_at == self.now + ttl
        s.expires = self.now + ttl

    def lost(self, s: MStep) -> None:
        """The model of `WorkerRecovered`: the attempt was lost to a crash."""
        self.events += 1
        s.state, s.expires = StepState.PENDING, None
        s.attempt, s.recoveries = max(s.attempt - 1, 0), s.recoveries + 1

    @rule(ex=executions)
    def release(self, ex: Execution) -> None:
        s = self.model[ex.workflow_id].steps[ex.step_index]
        expected = (
            s.state is StepState.LEASED
            and (s.token, s.worker) == (ex.lease_token, ex.worker_id)
            and s.expires is not None
            and self.now > s.expires
        )
        assert self.run(self.store.release_expired(ex, self.now)) == expected
        if expected:
            self.lost(s)

    @rule(ex=executions)
    def release_dead(self, ex: Execution) -> None:
        s = self.model[ex.workflow_id].steps[ex.step_index]
        expected = s.state is StepState.LEASED and (s.token, s.worker) == (
            ex.lease_token, ex.worker_id)
        assert self.run(self.store.release_dead(ex, self.now, "its process is gone")) == expected
        if expected:
            self.lost(s)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), from_step=st.sampled_from([None, None, 0, 1, 2, 3]))
    def retry(self, data: st.DataObject, from_step: int | None) -> None:
        wid = data.draw(st.sampled_from([*sorted(self.model), "nope"]))
        call = self.store.retry_workflow(wid, from_step, self.now)
        wf = self.model.get(wid)
        if wf is None:
            self.expect(call, UnknownWorkflowError)
            return
        if wf.state not in (WorkflowState.FAILED, WorkflowState.CANCELLED):
            self.expect(call, NotRetryableError)
            return
        unfinished = next(
            i for i, s in enumerate(wf.steps) if s.state is not StepState.COMPLETED)
        first = unfinished if from_step is None else from_step
        if first >= len(wf.steps):
            self.expect(call, UnknownStepError)
            return
        if first > unfinished:
            self.expect(call, NotRetryableError)
            return
        row = self.run(call)
        assert row.state is WorkflowState.RUNNING and row.reason is None
        self.events += 1
        wf.state = WorkflowState.RUNNING
        for i in range(first, len(wf.steps)):
            wf.steps[i] = MStep(token=wf.steps[i].token)

    @rule()
    def recover(self) -> None:
        expired = self.run(self.store.expired_leases(self.now))
        expected = sorted(
            (s.expires, wid, i)
            for wid, wf in self.model.items()
            for i, s in enumerate(wf.steps)
            if s.state is StepState.LEASED and s.expires is not None and self.now > s.expires
        )
        assert [(e.expires_at, e.workflow_id, e.step_index) for e in expired] == expected
        for ex in expired:
            self.release(ex)

    @rule()
    def rebuild(self) -> None:
        self.run(self.store.rebuild_projection())
        for wf in self.model.values():
            for s in wf.steps:
                if s.state is StepState.LEASED:
                    s.expires = s.started_expires

    # ------------------------------------------------------------ invariants

    @invariant()
    def projection_is_the_model(self) -> None:
        assert self.run(self.store.last_seq()) == self.events
        rows = self.run(self.store.workflows())
        assert [(r.workflow_id, r.state) for r in rows] == [
            (wid, wf.state) for wid, wf in self.model.items()]
        steps = self.run(self.store.step_rows())
        expected = [(wid, i, s) for wid, wf in self.model.items() for i, s in enumerate(wf.steps)]
        assert len(steps) == len(expected)
        for row, (wid, i, s) in zip(steps, expected, strict=True):
            assert (row.workflow_id, row.step_index) == (wid, i)
            assert (row.state, row.attempt, row.lease_token) == (s.state, s.attempt, s.token)
            assert (row.worker_id, row.lease_expires_at) == (
                s.worker, s.expires if s.state is StepState.LEASED else None)
            assert (row.resumed, row.resume_input) == (s.resumed, s.resume_input)
            assert (row.recoveries, row.retry_at) == (s.recoveries, s.retry_at)
            if s.state is StepState.COMPLETED:
                assert row.output == s.output

    @invariant()
    def projection_is_a_replay_of_the_log(self) -> None:
        replayed = replay(self.run(self.store.load_events()))
        assert [rows.workflow for _, rows in replayed] == self.run(self.store.workflows())
        live = self.run(self.store.step_rows())
        model = [s for wf in self.model.values() for s in wf.steps]
        live = [
            replace(row, lease_expires_at=s.started_expires) if s.state is StepState.LEASED
            else row
            for row, s in zip(live, model, strict=True)
        ]
        assert [s for _, rows in replayed for _, s in sorted(rows.steps.items())] == live

    @invariant()
    def leases_follow_the_rules(self) -> None:
        for wf in self.model.values():
            active = [s for s in wf.steps if s.state in (StepState.LEASED, StepState.WAITING)]
            assert len(active) <= 1 and not (wf.state.closed and active)
            first_open = next(
                (i for i, s in enumerate(wf.steps) if s.state is not StepState.COMPLETED),
                len(wf.steps),
            )
            assert all(s.state is StepState.PENDING for s in wf.steps[first_open + 1:])


class SqliteMachine(StoreMachine):
    kind = "sqlite"


_SETTINGS: dict[str, Any] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
TestMemoryStoreMachine = StoreMachine.TestCase
TestMemoryStoreMachine.settings = settings(max_examples=120, stateful_step_count=50, **_SETTINGS)
TestSqliteStoreMachine = SqliteMachine.TestCase
TestSqliteStoreMachine.settings = settings(max_examples=60, stateful_step_count=50, **_SETTINGS)
