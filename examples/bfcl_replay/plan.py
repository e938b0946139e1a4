"""How the replay maps BFCL's tasks onto agentq: ids, idempotency keys, lanes, retries, approvals.

Pure and deterministic: the same task always gives the same workflow id, step names and keys,
so a restarted process (or a rerun of the same command) finds its earlier work.

============================  ================================================================
workflow id                   ``bfcl/<task id>``, e.g. ``bfcl/multi_turn_base_12``
step name                     ``turn-<n>``: one step per user turn (0-based)
key of a call                 ``bfcl/<task id>/<turn>/<index>``: the durable call's key in
                              agentq's log (``ctx.call``) and the idempotency key the service
                              host deduplicates on
key of an approval            ``bfcl/<task id>/<turn>/<index>/approval``: the key of the
                              ``ctx.wait_for_input`` asking a person to approve that call
============================  ================================================================

Lanes (`LANES`): the engine's step attempts run in the MEDIUM lane; inside a step each tool
call is a durable call whose job runs in the lane of its kind:

- reads (`Kind.READ`) in a wide LOW lane: 8 permits. They never change what another call
  observes, so running many at once is harmless.
- state-changing calls (`Kind.WRITE`) and calls that need approval (`Kind.APPROVAL`) in a
  narrow HIGH lane: 2 permits. Few writes are in flight at any moment, so the work a crash can
  interrupt is small, and they are never held up behind a burst of reads.
- step attempts in the MEDIUM lane: 16 permits, one per turn being worked on.

A step works on one turn and runs its calls one after another (a turn's calls depend on each
other's effects), so at most MEDIUM-permits calls are in flight in all; the capacities leave
room for every one of them. The lanes are independent: a busy lane never starves another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentq import Backoff, LaneConfig, Priority, RetryPolicy

from .dataset import Call
from .jsontypes import JsonObject
from .services import KINDS, Kind, kind_of
from .snapshot import to_json_result

WORKFLOW_PREFIX = "bfcl/"
"""Prefix of every workflow id of the replay."""

STEP_PERMITS = 16
"""Step attempts that may run at once (the MEDIUM lane's permits)."""



def step_lanes(steps: int = STEP_PERMITS) -> Mapping[Priority, LaneConfig]:
    """Return the queue's lanes (see the module docstring) with `steps` permits (>= 1) in the
    steps' lane: how many turns are worked on at once (``--concurrency``; a run group starts
    every member and this lane admits their steps)."""
    return {
        Priority.HIGH: LaneConfig(capacity=2 * STEP_PERMITS, permits=2),
        Priority.MEDIUM: LaneConfig(capacity=16 * STEP_PERMITS, permits=steps),
        Priority.LOW: LaneConfig(capacity=2 * STEP_PERMITS, permits=8),
    }


LANES: Mapping[Priority, LaneConfig] = step_lanes()
"""The queue's lanes (see the module docstring)."""

STEP_LANE = Priority.MEDIUM
"""The lane of the engine's step attempts."""

CALL_RETRY = RetryPolicy(max_attempts=8, backoff=Backoff.exponential(0.001, 0.02, jitter=0.5))
"""Each call job's policy: up to 8 attempts, 1 ms doubling to 20 ms between them (half of each
delay jittered). A transient error leaves nothing applied, so a retry is always safe; eight
failures in a row at a 20 % error rate happen about once in 400,000 calls."""

STEP_RETRY = RetryPolicy(max_attempts=3, backoff=Backoff.fixed(0.05))
"""Each step's policy, for what the call jobs could not absorb (a call whose retries ran out):
the retried step makes the same durable calls again; those that completed are answered from
agentq's log (never sent to the service host again), and only the failed one runs again."""

WHY_APPROVAL: Mapping[str, str] = {
    "place_order": "moves money",
    "cancel_order": "moves money",
    "fund_account": "moves money",
    "withdraw_funds": "moves money",
    "book_flight": "moves money (books travel)",
    "cancel_booking": "moves money (cancels travel)",
    "purchase_insurance": "moves money (buys insurance)",
    "contact_customer_support": "sends a message to customer support",
    "send_message": "sends a message",
    "post_tweet": "publishes a post",
    "retweet": "publishes a post",
    "comment": "publishes a comment",
    "mention": "notifies someone",
}
"""Why each `Kind.APPROVAL` function needs a person's approval, as shown in the wait reason."""

_OWNERS: Mapping[str, str] = {name: cls for cls, table in KINDS.items() for name in table}


def workflow_id(task_id: str) -> str:
    """Return the workflow id of a task: ``bfcl/<task id>``."""
    return f"{WORKFLOW_PREFIX}{task_id}"


def task_id_of(workflow: str) -> str:
    """Return the task id of a replay workflow id (the inverse of `workflow_id`).

    Raises:
        ValueError: The id is not a replay workflow id.
    """
    if not workflow.startswith(WORKFLOW_PREFIX):
        raise ValueError(f"not a BFCL replay workflow id: {workflow!r}")
    return workflow[len(WORKFLOW_PREFIX) :]


def step_name(turn: int) -> str:
    """Return the step name of a turn: ``turn-<n>``."""
    return f"turn-{turn}"


def call_key(task_id: str, turn: int, index: int) -> str:
    """Return the idempotency key of a call: ``bfcl/<task id>/<turn>/<index>``."""
    return f"{WORKFLOW_PREFIX}{task_id}/{turn}/{index}"


def approval_key(task_id: str, turn: int, index: int) -> str:
    """Return the key of the wait approving a call: ``bfcl/<task id>/<turn>/<index>/approval``.

    A key is either a call's or a wait's in agentq's log, so the approval's key is the call's
    key with a suffix.
    """
    return f"{call_key(task_id, turn, index)}/approval"


def call_label(call: Call) -> JsonObject:
    """Return the label stored with a call's events in agentq's log.

    ``{"kind": "tool", "tool": <function>, "service": <read|write|approval>, "class":
    <service class>}``: what the calls projection and frames show beside the key.

    Raises:
        UnknownFunctionError: No service offers the function.
    """
    kind = kind_of(call.function)
    label: JsonObject = {"kind": "tool", "tool": call.function, "service": kind.value}
    owner = _OWNERS.get(call.function)
    if owner is not None:
        label["class"] = owner
    return label


def approval_details(call: Call) -> JsonObject:
    """Return the details shown with a call's approval wait.

    ``{"tool": <function>, "args": {<keyword arguments>}, "why": <what it does>}``, plus
    ``"positional": [...]`` when the call has positional arguments. Values are converted to
    JSON as results are (`snapshot.to_json_result`: tuples become lists).
    """
    details: JsonObject = {
        "tool": call.function,
        "args": to_json_result(dict(call.kwargs)),
        "why": WHY_APPROVAL.get(call.function, "needs approval"),
    }
    if call.args:
        details["positional"] = to_json_result(list(call.args))
    return details


def lane_of(kind: Kind) -> Priority:
    """Return the lane of a call of this kind: LOW for reads, HIGH for the others."""
    return Priority.LOW if kind is Kind.READ else Priority.HIGH


def needs_approval(call: Call) -> bool:
    """Whether a call needs a person's approval (its function is of `Kind.APPROVAL`).

    Raises:
        UnknownFunctionError: No service offers the function.
    """
    return kind_of(call.function) is Kind.APPROVAL


def describe_call(call: Call, limit: int = 120) -> str:
    """Return a call as a person reads it: ``TradingBot.place_order(symbol='AAPL', ...)``.

    Args:
        call: The call.
        limit: Longest text returned, in characters (the middle of a longer one is elided).
    """
    owner = _OWNERS.get(call.function)
    text = " ".join(call.text.split())
    text = f"{owner}.{text}" if owner else text
    if len(text) <= limit:
        return text
    head = limit - 12
    return f"{text[:head]}…{text[-11:]}"


def approval_reason(task_id: str, turn: int, calls: Sequence[Call], request: str = "") -> str:
    """Return the wait reason asking to approve calls of a turn (the replay asks one call at a
    time: `calls` holds one).

    Example:
        ``multi_turn_base_12 turn 2 needs approval: TradingBot.place_order(order_type='Buy',
        symbol='AAPL', price=150.0, amount=100) moves money — user: "Buy 100 AAPL …"``

    Args:
        task_id: The task.
        turn: The turn (0-based).
        calls: The calls needing approval, in order.
        request: The user's text of the turn (quoted, shortened).
    """
    listed = "; ".join(
        f"{describe_call(call)} {WHY_APPROVAL.get(call.function, 'needs approval')}"
        for call in calls
    )
    reason = f"{task_id} turn {turn} needs approval: {listed}"
    said = " ".join(request.split())
    if said:
        said = said if len(said) <= 100 else said[:99] + "…"
        reason += f' — user: "{said}"'
    return reason
