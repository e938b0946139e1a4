"""The DurableStore contract for child runs (``start_child``), on every store.

A parent's attempt starts a child once (the child's `WorkflowStarted` and the parent's
`ChildStarted` in one transaction); the transaction that ends the child answers the parent's
wait on it; a wait that comes after the end is answered at once; a cancel goes down to the
children; the ``calls`` rows rebuild from the log.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agentq.errors import KeyConflictError, LeaseLostError, WorkflowMismatchError
from agentq.store import (
    CallState,
    ChildStart,
    DurableStore,
    Execution,
    StepState,
    WorkflowClosed,
    WorkflowState,
    shown_call,
)

from .conftest import T0, claim, kinds, start

pytestmark = pytest.mark.timeout(60)

KID = ("work",)


async def spawn(
    store: DurableStore, ex: Execution, key: str = "kid", input: Any = 1, now: float = T0
) -> ChildStart:
    return await store.start_child(
        ex, key, definition="kid-def", step_names=KID, input=input, now=now
    )


async def park(store: DurableStore, ex: Execution, start: ChildStart) -> Any:
    return await store.wait_step(
        ex, start.wait.reason or "", T0 + 1, key=start.wait.key, details=start.wait.details
    )


async def test_start_child_stores_child_and_link_once(store: DurableStore) -> None:
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    first = await spawn(store, ex)
    assert first.created and first.outcome is None
    assert first.child.workflow_id == "p/kid" and first.child.definition == "kid-def"
    assert first.wait.key == "child:kid" and first.wait.state is CallState.WAITING
    assert first.wait.details == {"child": "p/kid", "definition": "kid-def"}
    started = (await store.load_events("p/kid"))[0]
    assert started.data["parent"] == {"workflow_id": "p", "step": 0, "key": "child:kid"}
    assert await kinds(store, "p") == ["WorkflowStarted", "StepStarted", "ChildStarted"]
    seq = await store.last_seq()
    again = await spawn(store, ex)
    assert not again.created and again.wait == first.wait and again.outcome is None
    assert await store.last_seq() == seq  # nothing appended
    with pytest.raises(WorkflowMismatchError):
        await spawn(store, ex, input=2)  # another input for the same child
    assert await store.last_seq() == seq


async def test_the_end_of_the_child_answers_the_waiting_parent(store: DurableStore) -> None:
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    st = await spawn(store, ex)
    row = await park(store, ex, st)
    assert row.state is WorkflowState.WAITING
    step = (await store.step_rows("p"))[0]
    assert step.state is StepState.WAITING and step.lease_expires_at is None
    kid = await claim(store, "p/kid")
    await store.complete_step(kid, {"sum": 3}, T0 + 2)
    events = await store.load_events()
    assert [(e.workflow_id, str(e.kind)) for e in events[-3:]] == [
        ("p/kid", "StepCompleted"), ("p/kid", "WorkflowCompleted"), ("p", "StepResumed")
    ]
    answer = {"child": "p/kid", "state": "completed", "output": {"sum": 3}}
    assert events[-1].data == {"input": answer, "key": "child:kid"}
    step = (await store.step_rows("p"))[0]
    assert step.state is StepState.PENDING and step.resume_input == answer
    [wait] = await store.calls("p")
    assert wait.state is CallState.ANSWERED and wait.output == answer
    assert wait.runs == 1  # one start: the step parking on it is no run of it
    parent = await store.get_workflow("p")
    assert parent is not None and parent.state is WorkflowState.RUNNING


async def test_a_wait_after_the_child_ended_is_answered_at_once(store: DurableStore) -> None:
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    await spawn(store, ex)
    kid = await claim(store, "p/kid")
    await store.fail_step(kid, "broken", None, T0 + 1, None)
    assert (await kinds(store, "p"))[-1] == "ChildEnded"  # not waiting: the row answered
    seq = await store.last_seq()
    again = await spawn(store, ex)
    assert await store.last_seq() == seq  # answered already: nothing appended
    assert again.outcome == {"child": "p/kid", "state": "failed", "reason": "broken"}
    assert again.wait.state is CallState.ANSWERED and again.wait.output == again.outcome
    row = await park(store, ex, again)  # a step that parks on it anyway: answered at once
    assert row.state is WorkflowState.RUNNING
    assert (await kinds(store, "p"))[-2:] == ["StepWaiting", "StepResumed"]
    [wait] = await store.calls("p")
    assert wait.state is CallState.ANSWERED and wait.output == again.outcome
    assert wait.runs == 1  # parking on it (re-opened, answered at once) is no run of it
    step = (await store.step_rows("p"))[0]
    assert step.state is StepState.PENDING and step.resume_input == again.outcome
    before = await store.calls("p")
    await store.rebuild_projection()
    assert await store.calls("p") == before


async def test_a_child_that_ends_while_a_call_awaits_it_ends_the_wait_row(
    store: DurableStore,
) -> None:
    """The parent's step runs (a durable call awaits the child, `ctx.start_child`): the
    transaction that ends the child answers the parent's wait row with a `ChildEnded`, and
    leaves the step (leased) and the parent (running) alone; no listing shows it waiting."""
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    await spawn(store, ex)
    await store.complete_step(await claim(store, "p/kid"), {"sum": 3}, T0 + 2)
    events = await store.load_events()
    assert [(e.workflow_id, str(e.kind)) for e in events[-3:]] == [
        ("p/kid", "StepCompleted"), ("p/kid", "WorkflowCompleted"), ("p", "ChildEnded")
    ]
    answer = {"child": "p/kid", "state": "completed", "output": {"sum": 3}}
    ended = events[-1]
    assert ended.data == {"input": answer, "key": "child:kid"}
    assert (ended.step_index, ended.attempt, ended.worker_id) == (0, None, None)
    [wait] = await store.calls("p")
    assert wait.state is CallState.ANSWERED and wait.output == answer
    assert wait.finished_at == T0 + 2 and wait.duration == 2.0
    step = (await store.step_rows("p"))[0]
    assert step.state is StepState.LEASED and step.lease_token == ex.lease_token
    parent = await store.get_workflow("p")
    assert parent is not None and parent.state is WorkflowState.RUNNING
    rows = {r[5]: r for r in await store.event_rows("p")}
    assert rows["ChildEnded"][10] == '{"child":"p/kid","state":"completed","output":{"sum":3}}'
    assert rows["ChildEnded"][11] == "child:kid"
    await store.complete_step(ex, "done", T0 + 3)  # the attempt still holds its lease
    before = await store.calls("p")
    await store.rebuild_projection()
    assert await store.calls("p") == before


async def test_a_retry_answers_the_wait_rows_left_by_children_that_ended(
    store: DurableStore,
) -> None:
    """A parent cancelled with its child keeps the child's wait row waiting (the parent is
    closed); its retry answers the row with the child's outcome (`ChildEnded`, in the retry's
    transaction) whether or not the retried step starts the child again, and a later start of
    the same child appends nothing. A child still open keeps its row waiting."""
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    await spawn(store, ex)
    await spawn(store, ex, "open")
    assert await store.cancel_workflow("p", "enough", T0 + 1)
    await store.retry_workflow("p/open", None, T0 + 2)  # retried alone: open again
    assert {w.key: w.state for w in await store.calls("p")} == {
        "child:kid": CallState.WAITING, "child:open": CallState.WAITING
    }
    seq = await store.last_seq()
    await store.retry_workflow("p", None, T0 + 20)
    cancelled = {"child": "p/kid", "state": "cancelled",
                 "reason": "its parent workflow 'p' was cancelled"}
    events = [e for e in await store.load_events("p") if e.seq > seq]
    assert [str(e.kind) for e in events] == ["WorkflowRetried", "ChildEnded"]
    assert events[1].data == {"input": cancelled, "key": "child:kid"}
    assert (events[1].step_index, events[1].attempt, events[1].worker_id) == (0, None, None)
    wait, still = await store.calls("p")
    assert (wait.key, wait.state, wait.output) == ("child:kid", CallState.ANSWERED, cancelled)
    assert wait.finished_at == T0 + 20
    assert (still.key, still.state) == ("child:open", CallState.WAITING)
    parent = await store.get_workflow("p")
    assert parent is not None and parent.state is WorkflowState.RUNNING
    assert shown_call(parent, wait) == ("answered", wait.finished_at)
    before = await store.calls("p")
    await store.rebuild_projection()
    assert await store.calls("p") == before
    ex = await claim(store, "p", now=T0 + 21)
    seq = await store.last_seq()
    again = await spawn(store, ex, now=T0 + 22)
    assert again.outcome == cancelled and again.wait == wait
    assert await store.last_seq() == seq  # nothing appended


async def test_a_cancel_goes_down_to_the_open_children(store: DurableStore) -> None:
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    await spawn(store, ex, "a")
    await spawn(store, ex, "b")
    done = await claim(store, "p/b")
    await store.complete_step(done, 7, T0)
    grand = await spawn(store, await claim(store, "p/a"), "g")  # a grandchild
    assert grand.child.workflow_id == "p/a/g"
    seq = await store.last_seq()
    assert await store.cancel_workflow("p", "enough", T0 + 1)
    cancelled = [e for e in await store.load_events() if e.seq > seq]
    assert [(e.workflow_id, str(e.kind)) for e in cancelled] == [
        ("p", "WorkflowCancelled"), ("p/a", "WorkflowCancelled"), ("p/a/g", "WorkflowCancelled")
    ]
    states = {w.workflow_id: w.state for w in await store.workflows()}
    assert states == {
        "p": WorkflowState.CANCELLED,
        "p/a": WorkflowState.CANCELLED,
        "p/b": WorkflowState.COMPLETED,
        "p/a/g": WorkflowState.CANCELLED,
    }
    assert (await store.step_rows("p/a"))[0].state is StepState.FAILED  # lease revoked
    by_id = {e.workflow_id: e.data for e in cancelled}
    assert by_id["p/a"] == {  # a cancel of its own: its revoked lease fences the step
        "reason": "its parent workflow 'p' was cancelled", "fenced_until": T0 + 10.0
    }
    assert by_id["p/a/g"] == {"reason": "its parent workflow 'p/a' was cancelled"}


async def test_start_child_refusals_write_nothing(store: DurableStore) -> None:
    await start(store, "p", ("s",))
    await start(store, "p/taken", ("x",))
    ex = await claim(store, "p")
    seq = await store.last_seq()
    with pytest.raises(ValueError, match="no '/'"):
        await spawn(store, ex, "a/b")
    with pytest.raises(WorkflowMismatchError, match="not as child run"):
        await spawn(store, ex, "taken")
    stale = dataclasses.replace(ex, lease_token=ex.lease_token + 1)
    with pytest.raises(LeaseLostError):
        await spawn(store, stale)
    await store.wait_step(ex, "a question", T0, key="child:q")
    assert await store.last_seq() == seq + 1  # only the wait
    await store.resume_step("p", 0, "x", T0, key="child:q")
    ex3 = await claim(store, "p")
    with pytest.raises(KeyConflictError):
        await spawn(store, ex3, "q")


async def test_the_calls_rows_rebuild_from_the_log(store: DurableStore) -> None:
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    st = await spawn(store, ex)
    await park(store, ex, st)
    await store.complete_step(await claim(store, "p/kid"), 5, T0 + 2)
    before = await store.calls("p")
    await store.rebuild_projection()
    assert await store.calls("p") == before


@pytest.mark.parametrize("by", ["time_out_workflow", "claim"])
async def test_a_deadline_goes_down_to_the_open_children_as_a_cancel(
    store: DurableStore, by: str
) -> None:
    """A parent failed by its deadline (`time_out_workflow`, or the claim that finds it
    passed) cancels its open children in the same transaction, down the tree."""
    made, _ = await store.start_workflow("p", ("s", "t"), None, T0, deadline=T0 + 60)
    assert made.deadline == T0 + 60
    ex = await claim(store, "p")
    await spawn(store, ex, "a")
    grand = await spawn(store, await claim(store, "p/a"), "g")
    assert grand.child.workflow_id == "p/a/g"
    seq = await store.last_seq()
    if by == "time_out_workflow":
        assert await store.time_out_workflow("p", T0 + 60)
    else:
        await store.complete_step(ex, "S", T0 + 1)
        assert isinstance(await store.claim_step("p", 1, "w1", 10.0, T0 + 61), WorkflowClosed)
    ended = [e for e in await store.load_events() if e.seq > seq and e.step_index is None]
    assert [(e.workflow_id, str(e.kind)) for e in ended] == [
        ("p", "WorkflowFailed"), ("p/a", "WorkflowCancelled"), ("p/a/g", "WorkflowCancelled")
    ]
    by_id = {e.workflow_id: e.data for e in ended}
    assert by_id["p/a"]["reason"] == "its parent workflow 'p' timed out (its deadline passed)"
    assert by_id["p/a/g"] == {"reason": "its parent workflow 'p/a' was cancelled"}
    states = {w.workflow_id: w.state for w in await store.workflows()}
    assert states == {
        "p": WorkflowState.FAILED, "p/a": WorkflowState.CANCELLED, "p/a/g": WorkflowState.CANCELLED
    }


async def test_a_failure_without_deadline_leaves_the_children_running(store: DurableStore) -> None:
    """Only a cancel or a deadline goes down: a parent whose step failed (it may be retried
    and join the same children) leaves them open."""
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    await spawn(store, ex, "a")
    await store.fail_step(ex, "broken", None, T0 + 1, None)
    states = {w.workflow_id: w.state for w in await store.workflows()}
    assert states == {"p": WorkflowState.FAILED, "p/a": WorkflowState.RUNNING}


async def test_a_child_that_ends_after_its_parent_closed_leaves_the_parent_alone(
    store: DurableStore,
) -> None:
    """A closed workflow's log ends with its end (an ended workflow receives nothing): the
    child that completes after its parent failed appends nothing to the parent; the parent's
    wait row stays waiting and is shown with the parent's state. A retry of the parent then
    answers it with the child's outcome (`ChildEnded` in the retry's transaction)."""
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    await spawn(store, ex)
    await store.fail_step(ex, "broken", None, T0 + 1, None)
    parent_log, [wait] = await kinds(store, "p"), await store.calls("p")
    parent = await store.get_workflow("p")
    kid = await claim(store, "p/kid", now=T0 + 2)
    await store.complete_step(kid, {"sum": 3}, T0 + 3)
    assert await kinds(store, "p") == parent_log and parent_log[-1] == "WorkflowFailed"
    assert await store.calls("p") == [wait] and wait.state is CallState.WAITING
    assert await store.get_workflow("p") == parent and parent is not None
    assert shown_call(parent, wait) == ("failed", parent.updated_at)
    await store.retry_workflow("p", None, T0 + 20)
    assert (await kinds(store, "p"))[-2:] == ["WorkflowRetried", "ChildEnded"]
    again = await spawn(store, await claim(store, "p", now=T0 + 21), now=T0 + 22)
    answer = {"child": "p/kid", "state": "completed", "output": {"sum": 3}}
    assert again.outcome == answer and again.wait.output == answer
    assert again.wait.state is CallState.ANSWERED and again.wait.finished_at == T0 + 20


async def test_a_retried_child_is_rejoined_only_by_its_parents_attempt(
    store: DurableStore,
) -> None:
    """A child retried while its parent is open leaves the parent's answered wait row alone
    (the parent may have read the answer and moved on); the parent's attempt that starts
    the child again re-opens it (`ChildStarted` again, in that attempt's transaction), so
    the child's next end answers the parent again; the rows rebuild from the log."""
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    await spawn(store, ex)
    kid = await claim(store, "p/kid")
    await store.fail_step(kid, "broken", None, T0 + 1, None)
    [first] = await store.calls("p")
    assert first.state is CallState.ANSWERED and first.output["state"] == "failed"
    parent_log = await kinds(store, "p")
    await store.retry_workflow("p/kid", None, T0 + 2)
    assert await kinds(store, "p") == parent_log  # the retry alone re-opens nothing
    assert await store.calls("p") == [first]
    seq = await store.last_seq()
    again = await spawn(store, ex, now=T0 + 3)  # the parent's attempt joins it: still open
    added = [(e.workflow_id, str(e.kind), e.attempt) for e in await store.load_events()
             if e.seq > seq]
    assert added == [("p", "ChildStarted", ex.attempt)]
    [wait] = await store.calls("p")
    assert (wait.state, wait.output, wait.finished_at) == (CallState.WAITING, None, None)
    assert wait.details == first.details and wait.runs == 2 and wait.started_at == T0 + 3
    assert again.outcome is None and again.wait == wait and not again.created
    assert (await spawn(store, ex, now=T0 + 4)).wait == wait  # once: it waits now
    await store.complete_step(await claim(store, "p/kid", now=T0 + 4), 9, T0 + 5)
    [done] = await store.calls("p")
    assert done.state is CallState.ANSWERED and done.output["output"] == 9
    assert (await kinds(store, "p"))[-1] == "ChildEnded"
    before = await store.calls("p")
    await store.rebuild_projection()
    assert await store.calls("p") == before


async def test_a_child_retried_after_its_parent_moved_on_leaves_it_alone(
    store: DurableStore,
) -> None:
    """The parent's first step read its child's failure and moved on; a retry of the child
    while the parent's next step runs, and the child's end, append nothing to the parent,
    whose row stays answered: it completes with no row waiting."""
    await start(store, "p", ("s", "t"))
    ex = await claim(store, "p")
    await spawn(store, ex)
    await store.fail_step(await claim(store, "p/kid"), "broken", None, T0 + 1, None)
    await store.complete_step(ex, "gave up", T0 + 2)
    nxt = await claim(store, "p", 1, now=T0 + 2)
    parent_log = await kinds(store, "p")
    [row] = await store.calls("p")
    await store.retry_workflow("p/kid", None, T0 + 3)
    assert await store.calls("p") == [row] and row.state is CallState.ANSWERED
    await store.complete_step(await claim(store, "p/kid", now=T0 + 4), 9, T0 + 5)
    await store.complete_step(nxt, "done", T0 + 6)
    assert await kinds(store, "p") == [*parent_log, "StepCompleted", "WorkflowCompleted"]
    assert await store.calls("p") == [row]
    assert (await store.get_workflow("p")).state is WorkflowState.COMPLETED  # type: ignore[union-attr]


async def test_a_child_retried_and_ended_again_answers_the_parent_that_rejoins_it(
    store: DurableStore,
) -> None:
    """A child whose end answered its parent is retried and ends again before the parent's
    attempt starts it again: that `start_child` re-opens the row and answers it with the
    child's new outcome in one transaction (`ChildStarted`, `ChildEnded`)."""
    await start(store, "p", ("s",))
    ex = await claim(store, "p")
    await spawn(store, ex)
    await store.fail_step(await claim(store, "p/kid"), "broken", None, T0 + 1, None)
    await store.retry_workflow("p/kid", None, T0 + 2)
    await store.complete_step(await claim(store, "p/kid", now=T0 + 3), 9, T0 + 4)
    seq = await store.last_seq()
    again = await spawn(store, ex, now=T0 + 5)
    added = [str(e.kind) for e in await store.load_events("p") if e.seq > seq]
    assert added == ["ChildStarted", "ChildEnded"]
    answer = {"child": "p/kid", "state": "completed", "output": 9}
    assert again.outcome == answer and again.wait.output == answer
    assert again.wait.state is CallState.ANSWERED and again.wait.runs == 2
    seq = await store.last_seq()
    assert (await spawn(store, ex, now=T0 + 6)).wait == again.wait
    assert await store.last_seq() == seq  # answered with what it has: nothing appended
    before = await store.calls("p")
    await store.rebuild_projection()
    assert await store.calls("p") == before
