"""The replay's mapping onto agentq (ids, keys, lanes, reasons), approvals and crash plans."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from agentq import NotWaitingError, Priority, WorkflowEngine
from examples.bfcl_replay.approval import ApprovalPolicy, Decision, read_decision
from examples.bfcl_replay.crash import CrashPlan, KillPoint, marker_path
from examples.bfcl_replay.dataset import Task, parse_call
from examples.bfcl_replay.plan import (
    LANES,
    STEP_LANE,
    WHY_APPROVAL,
    approval_details,
    approval_key,
    approval_reason,
    call_key,
    call_label,
    describe_call,
    lane_of,
    needs_approval,
    step_name,
    task_id_of,
    workflow_id,
)
from examples.bfcl_replay.report import Summary, format_summary
from examples.bfcl_replay.services import KINDS, Kind


def test_ids_and_keys_are_deterministic_and_readable() -> None:
    assert workflow_id("multi_turn_base_12") == "bfcl/multi_turn_base_12"
    assert task_id_of("bfcl/multi_turn_base_12") == "multi_turn_base_12"
    assert step_name(3) == "turn-3"
    assert call_key("multi_turn_base_12", 2, 0) == "bfcl/multi_turn_base_12/2/0"
    assert approval_key("multi_turn_base_12", 2, 0) == "bfcl/multi_turn_base_12/2/0/approval"
    with pytest.raises(ValueError, match="not a BFCL replay workflow id"):
        task_id_of("other/1")


def test_reads_go_to_the_wide_low_lane_and_the_rest_to_the_narrow_high_lane() -> None:
    assert lane_of(Kind.READ) is Priority.LOW
    assert lane_of(Kind.WRITE) is lane_of(Kind.APPROVAL) is Priority.HIGH
    assert STEP_LANE is Priority.MEDIUM
    assert LANES[Priority.LOW].permits > LANES[Priority.HIGH].permits


def test_every_approval_function_says_why_it_needs_approval() -> None:
    approval = {name for table in KINDS.values() for name, k in table.items() if k is Kind.APPROVAL}
    assert set(WHY_APPROVAL) == approval


def test_an_approval_reason_lists_the_calls_and_what_they_do() -> None:
    order = parse_call("place_order(order_type='Buy', symbol='AAPL', price=150.0, amount=100)")
    send = parse_call("send_message(receiver_id='USR002', message='done')")
    assert needs_approval(order) and not needs_approval(parse_call("ls()"))
    reason = approval_reason("multi_turn_base_9", 2, [order, send], "Buy 100 AAPL\nand tell Bob")
    assert reason == (
        "multi_turn_base_9 turn 2 needs approval: TradingBot.place_order(order_type='Buy', "
        "symbol='AAPL', price=150.0, amount=100) moves money; MessageAPI.send_message("
        "receiver_id='USR002', message='done') sends a message — user: \"Buy 100 AAPL and tell "
        'Bob"'
    )


def test_a_call_is_labelled_and_its_approval_shows_the_tool_and_its_arguments() -> None:
    order = parse_call("place_order(order_type='Buy', symbol='AAPL', price=150.0, amount=100)")
    assert call_label(order) == {
        "kind": "tool",
        "tool": "place_order",
        "service": "approval",
        "class": "TradingBot",
    }
    assert call_label(parse_call("ls()"))["service"] == "read"
    assert approval_details(order) == {
        "tool": "place_order",
        "args": {"order_type": "Buy", "symbol": "AAPL", "price": 150.0, "amount": 100},
        "why": "moves money",
    }
    tweet = parse_call("post_tweet('hi', tags=('#a', '#b'))")
    assert approval_details(tweet) == {
        "tool": "post_tweet",
        "args": {"tags": ["#a", "#b"]},  # JSON: a tuple becomes a list
        "why": "publishes a post",
        "positional": ["hi"],
    }


def test_a_long_call_is_elided_in_the_middle() -> None:
    call = parse_call(f"post_tweet(content='{'x' * 300}', tags=['#end'])")
    text = describe_call(call, 80)
    assert len(text) == 80
    assert text.startswith("TwitterAPI.post_tweet(content='xxx") and text.endswith("['#end'])")


def test_a_resume_input_is_read_as_the_approval_panel_sends_it() -> None:
    assert read_decision({"approved": True, "note": "ok"}) == Decision(True, "ok")
    assert read_decision({"approved": False, "note": ""}) == Decision(False, "")
    assert read_decision(True) == Decision(True)
    assert not read_decision({"approve": True}).approved  # malformed: never lets a call through
    assert not read_decision("yes").approved


def test_the_headless_policy_answers_every_wait() -> None:
    policy = ApprovalPolicy()
    assert policy.decide("bfcl/t", "turn-0", "why", key="bfcl/t/0/1/approval") == {
        "approved": True,
        "note": "approve-all policy of the headless demo",
    }
    assert (policy.approved, policy.rejected, policy.name) == (0, 0, "approve-all")
    strict = ApprovalPolicy(approve=False)
    assert strict.decide("bfcl/t", "turn-0", "why")["approved"] is False
    assert strict.name == "reject-all"
    assert "engine.resume" in policy.describe() and "key=" in policy.describe()


class Resumer:
    """An engine's `resume`: answers the first resume of each (workflow, key); a second
    raises `NotWaitingError`, as when another process recorded the answer first."""

    def __init__(self) -> None:
        self.answered: dict[tuple[str, str | None], object] = {}

    async def resume(self, workflow_id: str, step: str, input: object, *, key: str | None) -> str:
        if (workflow_id, key) in self.answered:
            raise NotWaitingError(f"{workflow_id} {key} was answered")
        self.answered[(workflow_id, key)] = input
        return "resumed"


async def test_the_policy_counts_only_the_answers_it_recorded() -> None:
    engine = cast(WorkflowEngine, Resumer())
    mine, theirs = ApprovalPolicy(), ApprovalPolicy()
    assert await theirs.answer(engine, "bfcl/t", "turn-0", "why", key="k1") == "resumed"
    # Answered by the other process first: not this policy's approval.
    assert await mine.answer(engine, "bfcl/t", "turn-0", "why", key="k1") is None
    assert await mine.answer(engine, "bfcl/t", "turn-0", "why", key="k2") == "resumed"
    assert (mine.approved, theirs.approved) == (1, 1)  # 2 approvals, 2 counted, not 3
    strict = ApprovalPolicy(approve=False)
    assert await strict.answer(engine, "bfcl/u", "turn-0", "why", key="k1") == "resumed"
    assert await strict.answer(engine, "bfcl/u", "turn-0", "why", key="k1") is None
    assert (strict.approved, strict.rejected) == (0, 1)


def test_the_summary_names_calls_applied_by_other_runs() -> None:
    alone = format_summary(Summary(calls_applied_now=180, calls_applied_before=0))
    assert "180 applied by this run · 0 applied before it\n" in alone
    assert "other runs" not in alone
    shared = format_summary(
        Summary(calls_applied_now=180, calls_applied_before=0, calls_applied_elsewhere=20)
    )
    assert "180 applied by this run · 0 applied before it · 20 by other runs meanwhile" in shared


class Killed(Exception):
    pass


def _plan(tmp_path: Path, point: KillPoint, after: int) -> CrashPlan:
    def kill() -> None:
        raise Killed

    return CrashPlan(after, point, marker_path(tmp_path / "s.db", point, after), kill)


@pytest.mark.parametrize("point", list(KillPoint))
def test_a_crash_plan_fires_once_at_the_first_state_changing_call_after_n_applied(
    tmp_path: Path, point: KillPoint
) -> None:
    plan = _plan(tmp_path, point, 2)

    def call(key: str, kind: Kind) -> None:
        plan.before_apply(key, kind)
        plan.before_commit(key)
        plan.after_apply(key, kind, duplicate=False)

    call("a", Kind.WRITE)
    call("b", Kind.READ)
    call("c", Kind.READ)  # armed now, but reads never trigger it
    with pytest.raises(Killed):
        call("d", Kind.APPROVAL)
    assert plan.marker.name == f"s.db.crashed-{point.value}-2"
    assert '"key": "d"' in plan.marker.read_text()
    assert not plan.armed
    call("e", Kind.WRITE)  # fires once
    rerun = _plan(tmp_path, point, 2)
    assert not rerun.armed and "already happened" in rerun.describe()


def test_a_duplicate_does_not_count_as_applied(tmp_path: Path) -> None:
    plan = _plan(tmp_path, KillPoint.AFTER, 1)
    plan.before_apply("a", Kind.WRITE)
    plan.after_apply("a", Kind.WRITE, duplicate=True)
    assert plan.applied == 0
    with pytest.raises(ValueError, match="crash-after must be >= 0"):
        _plan(tmp_path, KillPoint.AFTER, -1)


def test_a_task_is_one_workflow_with_a_step_per_turn(bfcl_tasks: list[Task]) -> None:
    from examples.bfcl_replay.replay import ReplayEnv, build_workflow

    task = bfcl_tasks[12]
    workflow = build_workflow(task, ReplayEnv(host=None))  # type: ignore[arg-type]
    assert workflow.id == "bfcl/multi_turn_base_12"
    assert workflow.step_names == tuple(f"turn-{n}" for n in range(len(task.turns)))
    assert workflow.input == {
        "task": "multi_turn_base_12",
        "classes": list(task.involved_classes),
        "calls_per_turn": [len(texts) for texts in task.call_texts],
    }
