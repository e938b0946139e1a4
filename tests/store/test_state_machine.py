"""Random histories of every verb against a plain-dict model, on every store (``advance_step``
is modelled as ``complete_step`` then the next step's ``claim_step`` by the same worker).

After each rule: the projection (workflows, steps, calls) equals the model, the log has the
model's number of events, and a replay of the log equals the live projection (a renewed
lease's or fence's expiry aside). A cancel leaves the running step fenced by its revoked lease,
through a retry, until `LeaseReleased` or its expiry (``cancel_hand_back_retry`` runs the whole
story). Claims run under a random crash budget (``max_recoveries``) beside stored retry times,
expired and dead leases taken back, and retries of failed or cancelled workflows. Durable calls
(start / complete / fail, and start again after a crash: a takeover of an expired lease), keyed
waits, resumes (with and without a key) and time-outs share a small pool of keys, so that key
conflicts happen too.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pg_cluster import Schemas

from agentq.errors import (
    EngineError,
    KeyConflictError,
    LeaseLostError,
    NotRetryableError,
    NotWaitingError,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowClosedError,
    WorkflowMismatchError,
)
from agentq.store import (
    HANDED_BACK_REASON,
    AlreadyCompleted,
    AlreadyWaiting,
    CallKind,
    CallState,
    Claimed,
    ClaimResult,
    DurableStore,
    Execution,
    HeldByOther,
    NotBefore,
    PostgresStore,
    StepState,
    WorkflowClosed,
    WorkflowState,
)
from agentq.store.rules.projection import replay

from .conftest import T0, make_store

pytestmark = pytest.mark.timeout(300)  # a safety net: 120 examples take ~120 s at load 11

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
    fence: float | None = None  # a lease a cancel revoked fences the step until then
    logged_fence: float | None = None  # as its cancel's event says (a renewal is not logged)
    output: Any = None
    resumed: bool = False
    resume_input: Any = None
    recoveries: int = 0
    retry_at: float | None = None
    wait_key: str | None = None
    wait_deadline: float | None = None


@dataclass
class MCall:
    kind: CallKind
    state: CallState
    step_index: int
    attempt: int
    first: int  # seq of its first event
    fingerprint: str | None = None
    runs: int = 1
    output: Any = None


@dataclass
class MWorkflow:
    steps: list[MStep] = field(default_factory=list)
    state: WorkflowState = WorkflowState.RUNNING
    calls: dict[str, MCall] = field(default_factory=dict)
    kept: dict[str, Any] = field(default_factory=dict)  # inputs an early resume kept, by key
    used: set[str] = field(default_factory=set)  # every key an input was ever kept for


KEYS = st.sampled_from(["k1", "k2", "k3"])
FINGERPRINTS = st.sampled_from(["f1", "f2", None])


class StoreMachine(RuleBasedStateMachine):
    kind = "memory"
    executions = Bundle("executions")

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.tmp = tempfile.mkdtemp(prefix="agentq-machine-")
        self.store: DurableStore = self.run(self.open_store())
        self.now = T0
        self.model: dict[str, MWorkflow] = {}
        self.inputs: dict[str, Any] = {}
        self.events = 0
        self.claimed: list[Execution] = []

    async def open_store(self) -> DurableStore:
        return await make_store(self.kind, Path(self.tmp))

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

    @initialize(target=executions)
    def begin(self) -> Any:
        """Every history starts with two workflows, one step of them claimed, so that the
        rules that need an attempt (calls, waits) have one from the start."""
        self.start("w1", None)
        self.start("w3", None)
        return self.claim_now("w3", "A", 3.0)

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
        """A workflow (rarely an unknown one) and a step, mostly the first in one of `states`,
        of a workflow that has one."""
        apt = sorted(w for w, wf in self.model.items() if any(s.state in states for s in wf.steps))
        if apt and data.draw(st.integers(0, 2)):
            wid = data.draw(st.sampled_from(apt))
        else:
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
        return self.claim_now(wid, worker, ttl, index, limit)

    def claim_now(
        self, wid: str, worker: str, ttl: float, index: int = 0, limit: int = 3,
        answer: ClaimResult | None = None,
    ) -> Any:
        """Claim step `index` and check the answer against the model (`answer`: what
        ``advance_step`` claimed already, checked the same way)."""
        call = (
            self.store.claim_step(wid, index, worker, ttl, self.now, max_recoveries=limit)
            if answer is None else _answered(answer)
        )
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
        # a claim past a fence (by its own worker, or once expired) ends it: `LeaseReleased`
        released = int(s.fence is not None and s.state is StepState.PENDING)
        if s.state is StepState.COMPLETED:
            assert result == AlreadyCompleted(s.output)
        elif wf.state.closed:
            assert isinstance(result, WorkflowClosed) and result.state is wf.state
        elif s.state is StepState.WAITING:
            assert isinstance(result, AlreadyWaiting)
        elif live:
            assert result == HeldByOther(s.worker or "", s.expires or 0.0)
        elif s.fence is not None and s.worker != worker and self.now <= s.fence:
            assert result == HeldByOther(s.worker or "", s.fence)  # its body may still run
        elif s.retry_at is not None and self.now < s.retry_at:
            assert result == NotBefore(s.retry_at)  # nothing recorded before the retry time
        elif s.recoveries + takeover > limit:  # lost to crashes too many times: fails
            assert result == WorkflowClosed(WorkflowState.FAILED, result.reason), result
            assert "crash" in (result.reason or "")
            self.events += 2 + takeover + released
            s.state, s.expires, s.fence = StepState.FAILED, None, None
            s.attempt, s.recoveries = max(s.attempt - takeover, 0), s.recoveries + takeover
            wf.state = WorkflowState.FAILED
        else:
            assert isinstance(result, Claimed), result
            self.events += 1 + takeover + released
            # a lost attempt (taken over) is re-admitted under its own number
            s.attempt = max(s.attempt - takeover, 0) + 1
            s.recoveries += takeover
            s.state, s.token, s.retry_at = StepState.LEASED, s.token + 1, None
            s.worker, s.fence = worker, None
            s.expires = s.started_expires = self.now + ttl
            ex = result.execution
            assert (ex.attempt, ex.lease_token, ex.expires_at) == (s.attempt, s.token, s.expires)
            assert (result.resumed, result.resume_input) == (s.resumed, s.resume_input)
            assert result.recoveries == s.recoveries
            self.claimed.append(ex)
            return multiple(ex)
        return multiple()

    def fenced(
        self, ex: Execution, after_cancel: bool = False
    ) -> tuple[MWorkflow, MStep, type[Exception] | None]:
        wf = self.model[ex.workflow_id]
        s = wf.steps[ex.step_index]
        if s.token != ex.lease_token or s.worker != ex.worker_id:
            return wf, s, LeaseLostError
        if after_cancel and (
            (wf.state is WorkflowState.CANCELLED and s.state is StepState.FAILED)
            or s.fence is not None  # retried since: the revoked lease still fences the step
        ):
            return wf, s, None
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

    @rule(
        target=executions,
        ex=executions,
        output=JSON,
        ttl=st.sampled_from([1.0, 3.0]),
        limit=st.sampled_from([0, 1, 3]),
    )
    def advance_step(self, ex: Execution, output: Any, ttl: float, limit: int) -> Any:
        """`complete` and `claim_now` of the next step by the same worker, in one verb."""
        wf, s, error = self.fenced(ex)
        call = self.store.advance_step(ex, output, self.now, lease_ttl=ttl, max_recoveries=limit)
        if error:
            self.expect(call, error)
            return multiple()
        row, claimed = self.run(call)
        s.state, s.output, s.expires = StepState.COMPLETED, output, None
        self.events += 1
        if ex.step_index == len(wf.steps) - 1:
            wf.state = WorkflowState.COMPLETED
            self.events += 1
            assert claimed is None and row.state is wf.state
            return multiple()
        assert claimed is not None and row.state is wf.state
        return self.claim_now(
            ex.workflow_id, ex.worker_id, ttl, ex.step_index + 1, limit, answer=claimed
        )

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

    def held(self, data: st.DataObject) -> Execution:
        """An execution, mostly one that still holds its lease (else the verb is refused);
        when none does, mostly a new claim of the next step of a running workflow."""
        held = [
            ex for ex in self.claimed
            if (s := self.model[ex.workflow_id].steps[ex.step_index]).state is StepState.LEASED
            and (s.token, s.worker) == (ex.lease_token, ex.worker_id)
        ]
        if not held and data.draw(st.integers(0, 3)):
            ready = [
                (wid, i)
                for wid, wf in sorted(self.model.items())
                if not wf.state.closed
                for i, s in enumerate(wf.steps)
                if s.state is StepState.PENDING
                and all(b.state is StepState.COMPLETED for b in wf.steps[:i])
            ]
            if ready:
                wid, index = data.draw(st.sampled_from(ready))
                self.claim_now(wid, "A", 3.0, index)
                return self.claimed[-1]
        if held and data.draw(st.integers(0, 7)):
            return data.draw(st.sampled_from(held))
        return data.draw(st.sampled_from(self.claimed))

    @precondition(lambda self: self.claimed)
    @rule(
        data=st.data(),
        key=st.one_of(st.none(), KEYS),
        deadline=st.sampled_from([None, 0.0, 1.0, 3.0]),
    )
    def wait(self, data: st.DataObject, key: str | None, deadline: float | None) -> None:
        self.wait_as(self.held(data), key, deadline)

    def wait_as(self, ex: Execution, key: str | None, deadline: float | None) -> bool:
        wf, s, error = self.fenced(ex)
        limit = None if key is None or deadline is None else self.now + deadline
        call = self.store.wait_step(ex, "input?", self.now, key=key, deadline=limit)
        c = None if key is None else wf.calls.get(key)
        # A wait left unanswered by a cancellation is asked again (same question) after a
        # retry; any other key recorded before is refused.
        again = c is not None and c.kind is CallKind.WAIT and c.state is CallState.WAITING
        if error is None and c is not None and not again:
            error = KeyConflictError
        if error:
            self.expect(call, error)
            return False
        self.run(call)
        self.events += 1
        s.state, s.expires, wf.state = StepState.WAITING, None, WorkflowState.WAITING
        s.wait_key, s.wait_deadline = key, limit
        if key is not None and c is not None:
            c.step_index, c.attempt, c.runs = ex.step_index, ex.attempt, c.runs + 1
        elif key is not None:
            wf.calls[key] = MCall(
                CallKind.WAIT, CallState.WAITING, ex.step_index, ex.attempt, self.events
            )
        if key is not None and key in wf.kept:  # an early resume's input answers it at once
            self.events += 1
            value = wf.kept.pop(key)
            answered = wf.calls[key]
            answered.state, answered.output = CallState.ANSWERED, value
            s.state, s.attempt, s.resumed, s.resume_input = StepState.PENDING, 0, True, value
            s.recoveries, s.retry_at = 0, None
            s.wait_key = s.wait_deadline = None
            wf.state = WorkflowState.RUNNING
        return True

    @precondition(lambda self: self.claimed)
    @rule(
        data=st.data(),
        key=KEYS,
        then=st.sampled_from(["resume", "resume with its key", "time out", "leave"]),
        value=JSON,
    )
    def ask(self, data: st.DataObject, key: str, then: str, value: Any) -> None:
        """A whole keyed wait: recorded, then answered, timed out (after its 1 s) or left."""
        ex = self.held(data)
        if not self.wait_as(ex, key, 1.0) or then == "leave":
            return
        if then == "time out":
            self.now += 1.0
            self.time_out_at(ex.workflow_id, ex.step_index)
        else:
            given = key if then == "resume with its key" else None
            self.resume_at(ex.workflow_id, ex.step_index, value, given)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), value=JSON, key=st.one_of(st.none(), st.none(), KEYS))
    def resume(self, data: st.DataObject, value: Any, key: str | None) -> None:
        wid, index = self.pick(data, StepState.WAITING)
        self.resume_at(wid, index, value, key)

    def resume_at(self, wid: str, index: int, value: Any, key: str | None) -> None:
        call = self.store.resume_step(wid, index, value, self.now, key=key)
        wf = self.model.get(wid)
        if wf is None:
            self.expect(call, UnknownWorkflowError)
        elif index >= len(wf.steps):
            self.expect(call, UnknownStepError)
        elif wf.steps[index].state is not StepState.WAITING and wf.state in (
            WorkflowState.CANCELLED, WorkflowState.FAILED
        ):
            self.expect(call, WorkflowClosedError)
        elif self.too_late(wf.steps[index], key) or self.timed_out_key(wf, index, key):
            self.expect(call, NotWaitingError)  # refused whether or not it was timed out
        elif key is not None and (
            wf.steps[index].state is not StepState.WAITING or key != wf.steps[index].wait_key
        ):  # an input for a wait the step is not on (yet): kept for it, or refused
            c = wf.calls.get(key)
            answered = c is not None and (
                c.kind is not CallKind.WAIT or c.state is CallState.ANSWERED
            )
            if wf.steps[index].state is StepState.COMPLETED or answered or key in wf.used:
                self.expect(call, NotWaitingError)
            else:
                self.run(call)
                self.events += 1
                wf.kept[key] = value
                wf.used.add(key)
        elif wf.steps[index].state is not StepState.WAITING:
            self.expect(call, NotWaitingError)
        else:
            self.run(call)
            self.events += 1
            s = wf.steps[index]
            if s.wait_key is not None:
                answered = wf.calls[s.wait_key]
                answered.state, answered.output = CallState.ANSWERED, value
            s.state, s.attempt, s.resumed, s.resume_input = StepState.PENDING, 0, True, value
            s.recoveries, s.retry_at = 0, None
            s.wait_key = s.wait_deadline = None
            wf.state = WorkflowState.RUNNING

    def timed_out_key(self, wf: MWorkflow, index: int, key: str | None) -> bool:
        """Whether `key` names a wait of step `index` that timed out (not the step's own
        current wait): a resume with it is refused."""
        s = wf.steps[index]
        if key is None or (s.state is StepState.WAITING and key == s.wait_key):
            return False
        c = wf.calls.get(key)
        return (
            c is not None and c.kind is CallKind.WAIT and c.step_index == index
            and c.state is CallState.TIMED_OUT
        )

    def too_late(self, s: MStep, key: str | None) -> bool:
        """Whether a resume now comes after the deadline of the keyed wait it answers."""
        return (
            s.wait_key is not None
            and s.wait_deadline is not None
            and s.wait_deadline <= self.now
            and key in (None, s.wait_key)
        )

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def time_out(self, data: st.DataObject) -> None:
        wid, index = self.pick(data, StepState.WAITING)
        self.time_out_at(wid, index)

    def time_out_at(self, wid: str, index: int) -> None:
        call = self.store.time_out_wait(wid, index, self.now)
        wf = self.model.get(wid)
        if wf is None:
            self.expect(call, UnknownWorkflowError)
            return
        if index >= len(wf.steps):
            self.expect(call, UnknownStepError)
            return
        s = wf.steps[index]
        due = (
            not wf.state.closed
            and s.state is StepState.WAITING
            and s.wait_key is not None
            and s.wait_deadline is not None
            and s.wait_deadline <= self.now
        )
        assert self.run(call) == due
        if due:
            assert s.wait_key is not None
            self.events += 1
            wf.calls[s.wait_key].state = CallState.TIMED_OUT
            s.state, s.attempt, s.recoveries = StepState.PENDING, 0, 0
            s.wait_key = s.wait_deadline = None
            wf.state = WorkflowState.RUNNING

    # A crash is a claim that takes an expired lease over; the new attempt then starts its
    # calls again (``rerun``) while the dead attempt's late outcomes are refused.

    @precondition(lambda self: self.claimed)
    @rule(
        data=st.data(),
        key=KEYS,
        fingerprint=FINGERPRINTS,
        outcome=st.sampled_from(["completed", "completed", "failed", "in doubt"]),
        output=JSON,
    )
    def call(
        self, data: st.DataObject, key: str, fingerprint: str | None, outcome: str, output: Any
    ) -> None:
        """A whole call: start, then complete, fail or leave it in doubt (a crash follows)."""
        ex = self.held(data)
        if self.start_call_as(ex, key, fingerprint) and outcome != "in doubt":
            self.end_call_as(ex, key, output, outcome == "completed")

    @precondition(lambda self: self.claimed)
    @rule(data=st.data(), key=KEYS, fingerprint=FINGERPRINTS)
    def start_call(self, data: st.DataObject, key: str, fingerprint: str | None) -> None:
        self.start_call_as(self.held(data), key, fingerprint)

    def start_call_as(self, ex: Execution, key: str, fingerprint: str | None) -> bool:
        wf, _, error = self.fenced(ex)
        c = wf.calls.get(key)
        call = self.store.start_call(
            ex, key, fingerprint=fingerprint, lane=None, label=None, now=self.now
        )
        if error is None and c is not None:
            if c.kind is CallKind.WAIT or (
                fingerprint is not None
                and c.fingerprint is not None
                and fingerprint != c.fingerprint
                and c.state is not CallState.FAILED  # a failed call starts again as it is now
            ):
                error = KeyConflictError
            elif c.state is CallState.COMPLETED:
                error = EngineError
        if error:
            self.expect(call, error)
            return False
        row = self.run(call)
        self.events += 1
        if c is None:
            c = wf.calls[key] = MCall(
                CallKind.CALL, CallState.STARTED, ex.step_index, ex.attempt, self.events,
                fingerprint,
            )
        else:
            assert self.run(self.store.load_events(after_seq=self.events - 1))[0].data[
                "rerun"] == (c.state is CallState.STARTED)
            c.state, c.step_index, c.attempt, c.output = (
                CallState.STARTED, ex.step_index, ex.attempt, None)
            c.runs += 1
            c.fingerprint = c.fingerprint if fingerprint is None else fingerprint
        assert (row.state, row.runs) == (CallState.STARTED, c.runs)
        return True

    @precondition(lambda self: self.claimed)
    @rule(data=st.data(), output=JSON, ok=st.booleans())
    def end_call(self, data: st.DataObject, output: Any, ok: bool) -> None:
        ex = self.held(data)
        wf = self.model[ex.workflow_id]
        started = sorted(k for k, c in wf.calls.items() if c.state is CallState.STARTED)
        key = data.draw(st.sampled_from([*started, *started, "k1", "k2", "k3"]))
        self.end_call_as(ex, key, output, ok)

    def end_call_as(self, ex: Execution, key: str, output: Any, ok: bool) -> None:
        wf, _, error = self.fenced(ex, after_cancel=True)
        c = wf.calls.get(key)
        if ok:
            call = self.store.complete_call(
                ex, key, output=output, usage=None, duration=0.5, now=self.now
            )
        else:
            call = self.store.fail_call(
                ex, key, reason="error", error=None, duration=0.5, now=self.now
            )
        if error is None:
            if c is not None and c.kind is CallKind.WAIT:
                error = KeyConflictError
            elif c is None or c.state is not CallState.STARTED or c.step_index != ex.step_index:
                error = EngineError
        if error:
            self.expect(call, error)
            return
        assert c is not None
        self.run(call)
        self.events += 1
        c.state = CallState.COMPLETED if ok else CallState.FAILED
        c.output, c.attempt = (output if ok else None), ex.attempt

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
                if s.state is StepState.LEASED:  # revoked, but it fences the step
                    s.fence = s.logged_fence = s.expires
                if s.state in (StepState.LEASED, StepState.WAITING):
                    s.state, s.expires = StepState.FAILED, None
                    s.wait_key = s.wait_deadline = None

    @rule(ex=executions, ttl=st.sampled_from([1.0, 3.0]))
    def renew(self, ex: Execution, ttl: float) -> None:
        s = self.model[ex.workflow_id].steps[ex.step_index]
        call = self.store.renew_lease(ex, ttl, self.now)
        mine = (s.token, s.worker) == (ex.lease_token, ex.worker_id)
        held = s.state is StepState.LEASED and mine
        fenced = s.fence is not None and mine  # a revoked lease: its fence is renewed
        if not held and not fenced:
            self.expect(call, LeaseLostError)
            return
        renewed = self.run(call)
        assert (renewed.expires_at, renewed.revoked) == (self.now + ttl, fenced)
        if fenced:
            s.fence = self.now + ttl
        else:
            s.expires = self.now + ttl

    def lost(self, s: MStep, crash: bool = True) -> None:
        """The model of `WorkerRecovered`: the attempt was lost to a crash (or handed back)."""
        self.events += 1
        s.state, s.expires = StepState.PENDING, None
        s.attempt, s.recoveries = max(s.attempt - 1, 0), s.recoveries + int(crash)

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

    @rule(ex=executions, reason=st.sampled_from([HANDED_BACK_REASON, "its process is gone"]))
    def release_dead(self, ex: Execution, reason: str) -> None:
        s = self.model[ex.workflow_id].steps[ex.step_index]
        mine = (s.token, s.worker) == (ex.lease_token, ex.worker_id)
        expected = s.state is StepState.LEASED and mine
        fenced = s.fence is not None and mine  # LeaseReleased lifts the fence
        assert self.run(self.store.release_dead(ex, self.now, reason)) == (expected or fenced)
        if fenced:
            self.events += 1
            s.fence = None
        elif expected:
            self.lost(s, crash=reason != HANDED_BACK_REASON)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), from_step=st.sampled_from([None, None, 0, 1, 2, 3]))
    def retry(self, data: st.DataObject, from_step: int | None) -> None:
        wid = data.draw(st.sampled_from([*sorted(self.model), "nope"]))
        self.retry_from(wid, from_step)

    def retry_from(self, wid: str, from_step: int | None) -> None:
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
            old = wf.steps[i]  # a fence (worker and expiry) outlives the retry
            wf.steps[i] = MStep(token=old.token, fence=old.fence, logged_fence=old.logged_fence,
                                worker=old.worker if old.fence is not None else None)

    @precondition(
        lambda self: any(s.wait_key for wf in self.model.values() for s in wf.steps)
    )
    @rule(data=st.data(), go=st.integers(0, 3))
    def ask_again_after_a_retry(self, data: st.DataObject, go: int) -> None:
        """Cancel a workflow waiting on a keyed wait, retry it, ask the same wait again."""
        if go:  # one time in four, as cancel
            return
        waiting = sorted(
            (wid, i) for wid, wf in self.model.items()
            for i, s in enumerate(wf.steps) if s.wait_key is not None
        )
        wid, index = data.draw(st.sampled_from(waiting))
        key = self.model[wid].steps[index].wait_key
        self.cancel(wid, 0)
        self.retry_from(wid, None)
        claimed = len(self.claimed)
        self.claim_now(wid, "A", 3.0, index)
        assert len(self.claimed) == claimed + 1  # a fresh step is claimable at once
        assert self.wait_as(self.claimed[-1], key, None)
        assert self.model[wid].calls[key or ""].runs >= 2

    @precondition(lambda self: self.claimed)
    @rule(
        data=st.data(),
        order=st.sampled_from(["hand back, retry", "retry, hand back", "retry"]),
        go=st.integers(0, 1),
    )
    def cancel_hand_back_retry(self, data: st.DataObject, order: str, go: int) -> None:
        """Cancel a running step's workflow, retry it, its worker hands the revoked lease back
        (before or after the retry, or never), another worker claims; then rebuild the
        projection (the invariants compare it with the model and with a replay)."""
        held = [
            ex for ex in self.claimed
            if (s := self.model[ex.workflow_id].steps[ex.step_index]).state is StepState.LEASED
            and (s.token, s.worker) == (ex.lease_token, ex.worker_id)
        ]
        if go or not held:
            return
        ex = data.draw(st.sampled_from(held))
        self.cancel(ex.workflow_id, 0)
        if order == "hand back, retry":
            self.release_dead(ex, HANDED_BACK_REASON)
        self.retry_from(ex.workflow_id, None)
        if order == "retry, hand back":
            self.release_dead(ex, HANDED_BACK_REASON)
        self.claim_now(ex.workflow_id, "B" if ex.worker_id == "A" else "A", 3.0, ex.step_index)
        self.rebuild()

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
                if s.fence is not None:
                    s.fence = s.logged_fence

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
                s.worker, s.expires if s.state is StepState.LEASED else s.fence)
            assert (row.resumed, row.resume_input) == (s.resumed, s.resume_input)
            assert (row.recoveries, row.retry_at) == (s.recoveries, s.retry_at)
            assert (row.wait_key, row.wait_deadline) == (s.wait_key, s.wait_deadline)
            if s.state is StepState.COMPLETED:
                assert row.output == s.output
        calls = self.run(self.store.calls())
        expected_calls = sorted(
            ((c.first, wid, key, c) for wid, wf in self.model.items()
             for key, c in wf.calls.items()),
            key=lambda t: t[0],
        )
        assert [(r.first_seq, r.workflow_id, r.key) for r in calls] == [
            (first, wid, key) for first, wid, key, _ in expected_calls]
        for row, (_, _, _, c) in zip(calls, expected_calls, strict=True):
            assert (row.kind, row.state, row.step_index, row.attempt) == (
                c.kind, c.state, c.step_index, c.attempt)
            assert (row.fingerprint, row.runs, row.output) == (c.fingerprint, c.runs, c.output)

    @invariant()
    def projection_is_a_replay_of_the_log(self) -> None:
        replayed = replay(self.run(self.store.load_events()))
        assert [rows.workflow for _, rows in replayed] == self.run(self.store.workflows())
        live = self.run(self.store.step_rows())
        model = [s for wf in self.model.values() for s in wf.steps]
        live = [
            replace(row, lease_expires_at=s.started_expires) if s.state is StepState.LEASED
            else replace(row, lease_expires_at=s.logged_fence) if s.fence is not None
            else row
            for row, s in zip(live, model, strict=True)
        ]
        assert [s for _, rows in replayed for _, s in sorted(rows.steps.items())] == live
        replayed_calls = [c for _, rows in replayed for c in rows.calls.values()]
        replayed_calls.sort(key=lambda c: c.first_seq)
        assert replayed_calls == self.run(self.store.calls())

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


class PostgresMachine(StoreMachine):
    """The machine on `PostgresStore`: each example on a schema of `pg_schemas`, emptied
    after it (see `test_postgres_store_machine`)."""

    kind = "postgres"
    schemas: ClassVar[Schemas | None] = None

    async def open_store(self) -> DurableStore:
        assert self.schemas is not None
        self.target = self.schemas.take()
        return await PostgresStore.open(self.target.dsn, schema=self.target.schema)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            assert self.schemas is not None
            self.schemas.give_back(self.target)


_SETTINGS: dict[str, Any] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
TestMemoryStoreMachine = StoreMachine.TestCase
TestMemoryStoreMachine.settings = settings(max_examples=120, stateful_step_count=50, **_SETTINGS)
TestSqliteStoreMachine = SqliteMachine.TestCase
TestSqliteStoreMachine.settings = settings(max_examples=60, stateful_step_count=50, **_SETTINGS)


def test_postgres_store_machine(pg_schemas: Schemas) -> None:
    """The same random histories on PostgreSQL (fewer: each verb is a round trip or five)."""
    PostgresMachine.schemas = pg_schemas
    try:
        run_state_machine_as_test(
            PostgresMachine,
            settings=settings(max_examples=10, stateful_step_count=40, **_SETTINGS),
        )
    finally:
        PostgresMachine.schemas = None


async def _answered(answer: ClaimResult) -> ClaimResult:
    """`answer`, as a claim's coroutine gives it (what ``advance_step`` claimed)."""
    return answer
