"""The replay's tool calls are durable calls: keyed approvals, labels, answers from the log."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agentq import (
    EventKind,
    Job,
    LaneConfig,
    MemoryStore,
    Priority,
    Queue,
    RunStatus,
    StepContext,
    StepDef,
    StepStatus,
    Workflow,
    WorkflowEngine,
)
from agentq.store import SqliteStore
from examples.bfcl_replay.approval import ApprovalPolicy
from examples.bfcl_replay.dataset import Call, Task
from examples.bfcl_replay.errors import TransientToolError
from examples.bfcl_replay.jsontypes import JsonValue
from examples.bfcl_replay.plan import (
    CALL_RETRY,
    LANES,
    STEP_LANE,
    approval_key,
    call_key,
    workflow_id,
)
from examples.bfcl_replay.replay import ReplayEnv, build_workflows, drive, waiting_on
from examples.bfcl_replay.servicehost import Applied, ServiceHost


@dataclass
class Replay:
    engine: WorkflowEngine
    store: SqliteStore
    env: ReplayEnv
    workflows: list[Workflow]


@asynccontextmanager
async def _replay(tmp_path: Path, tasks: list[Task], host: ServiceHost) -> AsyncIterator[Replay]:
    async with Queue(LANES) as queue, SqliteStore(tmp_path / "agentq.db") as store:
        engine = WorkflowEngine(queue, store, lease_ttl=2.0, priority=STEP_LANE)
        env = ReplayEnv(host)
        workflows = build_workflows(tasks, env)
        for workflow in workflows:
            engine.register_workflow(workflow)
        try:
            yield Replay(engine, store, env, workflows)
        finally:
            await engine.close()


def _task(tasks: list[Task], task_id: str) -> Task:
    return next(task for task in tasks if task.id == task_id)


async def test_each_call_needing_approval_waits_under_its_own_key_before_its_turn_runs(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    # Turn 0 of task 198: get_flight_cost, book_flight*, cancel_booking*, authenticate_twitter,
    # post_tweet* (* needs approval): three waits, then the five calls.
    task = _task(bfcl_tasks, "multi_turn_base_198")
    with ServiceHost(tmp_path / "services.db", [task]) as host:
        async with _replay(tmp_path, [task], host) as run:
            workflow = run.workflows[0]
            result = await run.engine.run(workflow)
            asked = []
            while result.status is RunStatus.WAITING and result.step == "turn-0":
                key, details = await waiting_on(run.engine, workflow, "turn-0")
                assert key is not None and details is not None
                asked.append((key, details["tool"]))
                assert host.results(task.id) == {}  # nothing of the turn runs before approvals
                # an answer under another key is kept for a later wait, and runs nothing now
                other = f"another/{len(asked)}"
                kept = await run.engine.resume(workflow.id, "turn-0", True, key=other)
                assert kept.status is RunStatus.WAITING and host.results(task.id) == {}
                answer = {"approved": True, "note": f"ok {len(asked)}"}
                result = await run.engine.resume(workflow.id, "turn-0", answer, key=key)
            assert asked == [
                (approval_key(task.id, 0, 1), "book_flight"),
                (approval_key(task.id, 0, 2), "cancel_booking"),
                (approval_key(task.id, 0, 4), "post_tweet"),
            ]
            status = (await run.engine.status(workflow.id))[0]
            assert isinstance(status, StepStatus.Completed)
            assert status.output["approval"] == "ok 1; ok 2; ok 3"
            assert len(status.output["results"]) == 5
            # The log: three answered waits with their details, five completed labelled calls,
            # each started once; the waits were answered from the log on each re-run.
            rows = {row.key: row for row in await run.store.calls(workflow.id)}
            wait = rows[approval_key(task.id, 0, 1)]
            assert (wait.kind, wait.state) == ("wait", "answered")
            assert wait.output == {"approved": True, "note": "ok 1"}
            assert wait.details is not None and wait.details["tool"] == "book_flight"
            assert "access_token" in wait.details["args"]
            calls = [rows[call_key(task.id, 0, index)] for index in range(5)]
            assert [(row.state, row.runs) for row in calls] == [("completed", 1)] * 5
            assert calls[1].label == {
                "kind": "tool",
                "tool": "book_flight",
                "service": "approval",
                "class": "TravelAPI",
            }
            assert calls[0].label is not None and calls[0].label["service"] == "read"
            assert (calls[0].lane, calls[1].lane) == (str(Priority.LOW), str(Priority.HIGH))
            assert run.env.approvals_read == 1 + 2 + 3  # 3 re-runs: 1, then 2, then 3 answered
            assert run.engine.answered_from_log == run.env.approvals_read  # no call twice
        assert host.stats().duplicates == 0


async def test_a_rejected_approval_fails_the_workflow_with_nothing_of_its_turn_applied(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    task = _task(bfcl_tasks, "multi_turn_base_198")
    with ServiceHost(tmp_path / "services.db", [task]) as host:
        async with _replay(tmp_path, [task], host) as run:
            workflow = run.workflows[0]
            result = await run.engine.run(workflow)
            for answer in (True, True, {"approved": False, "note": "too expensive"}):
                key, _ = await waiting_on(run.engine, workflow, "turn-0")
                result = await run.engine.resume(workflow.id, "turn-0", answer, key=key)
            assert result.status is RunStatus.FAILED
            assert str(result.reason).startswith(
                "turn 0 call 4 not approved (too expensive): TwitterAPI.post_tweet("
            )
            assert host.results(task.id) == {}
            assert [row.kind for row in await run.store.calls(workflow.id)] == ["wait"] * 3


class FlakyHost(ServiceHost):
    """A service host on which one key fails transiently `times` times, then works."""

    def __init__(self, path: Path, tasks: list[Task], key: str, times: int) -> None:
        super().__init__(path, tasks)
        self.flaky, self.left, self.sent = key, times, 0
        self.lock = threading.Lock()

    def apply(self, task_id: str, idempotency_key: str, call: Call) -> Applied:
        with self.lock:
            self.sent += 1
            if idempotency_key == self.flaky and self.left > 0:
                self.left -= 1
                raise TransientToolError(f"flaky {idempotency_key}")
        return super().apply(task_id, idempotency_key, call)


async def test_a_retried_turn_answers_completed_calls_from_the_log_and_reruns_the_failed_one(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    # Turn 1 of task 3 makes four writes; the third fails transiently more often than its
    # job's policy allows, so the step's own policy runs the turn again.
    task = _task(bfcl_tasks, "multi_turn_base_3")
    flaky = call_key(task.id, 1, 2)
    calls = sum(len(texts) for texts in task.call_texts)
    with FlakyHost(tmp_path / "services.db", [task], flaky, CALL_RETRY.max_attempts) as host:
        async with _replay(tmp_path, [task], host) as run:
            result = await drive(run.engine, run.workflows[0], ApprovalPolicy())
            assert result.status is RunStatus.COMPLETED, result.reason
            rows = {row.key: row for row in await run.store.calls(workflow_id(task.id))}
            events = await run.store.load_events(workflow_id(task.id))
            retried = [e for e in events if e.kind is EventKind.RETRY_SCHEDULED]
            answered = run.engine.answered_from_log - run.env.approvals_read
    assert len(retried) == 1 and retried[0].step_name == "turn-1"
    assert answered == 2  # calls 0 and 1 of turn 1, completed in the first attempt
    assert (rows[flaky].runs, rows[flaky].state) == (2, "completed")
    assert [rows[call_key(task.id, 1, i)].runs for i in (0, 1, 3)] == [1, 1, 1]
    assert host.stats().duplicates == 0  # nothing reached the service host twice
    assert host.stats().applied == calls
    assert host.sent == calls + CALL_RETRY.max_attempts
    starts = [e for e in events if e.kind is EventKind.CALL_STARTED and e.data["key"] == flaky]
    assert [e.data["rerun"] for e in starts] == [False, False]  # failed, not in doubt


async def test_durable_calls_made_from_steps_are_bounded_by_their_own_lane() -> None:
    # A durable call from inside a step (a job of the MEDIUM lane) runs through its own lane,
    # so that lane's permits bound it: what the replay's lane configuration relies on.
    running, peak, lock = 0, 0, threading.Lock()

    def call() -> str:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return "ok"

    async def step(ctx: StepContext) -> JsonValue:
        output: JsonValue = await ctx.call(Job("call", call, Priority.LOW))
        return output

    async with Queue({Priority.LOW: LaneConfig(capacity=10, permits=1)}) as queue:
        engine = WorkflowEngine(queue, MemoryStore())
        runs = [engine.run(Workflow(f"w{i}", [StepDef("s", step)])) for i in range(4)]
        results = await asyncio.gather(*runs)
        await engine.close()
    assert [r.output for r in results] == ["ok"] * 4
    assert peak == 1
    assert queue.stats()[Priority.LOW].completed == 4
