"""Stored fingerprints of format v2 compare what memory compares (issue 20 item 3).

Format v1 counted a function the call only uses (a partial's function, a helper) by its
name, so after a restart ``partial(make_tool("bob"), ...)`` was answered with alice's result.
v2 walks it as memory does; rows of format v1 written by older versions keep answering the
call they were written for, by the v1 rules.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from agentq import Cached, Job, KeyConflictError, Queue, SqliteStore
from agentq.clock import FakeClock
from agentq.queue import same_stored, stored_fingerprint
from agentq.retry import RetryPolicy
from agentq.store import DurableStore
from agentq.workflows import RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)

ran: list[tuple[str, str]] = []
"""A module-level log the tools append to (their state, not an input)."""


def make_tool(user: str) -> Any:
    async def tool(item: str) -> str:
        ran.append((user, item))
        return f"{user}:{item}"

    return tool


async def send_mail(to: str) -> str:
    ran.append(("mail", to))
    return f"mail sent to {to}"


user = "alice"


def greet() -> str:
    return f"hello {user}"


class Account:
    limit = 10


def test_a_factory_built_tool_differs_by_what_its_closure_holds() -> None:
    alice = functools.partial(make_tool("alice"), "balance")
    bob = functools.partial(make_tool("bob"), "balance")
    assert stored_fingerprint(alice) != stored_fingerprint(bob)
    assert stored_fingerprint(alice) == stored_fingerprint(
        functools.partial(make_tool("alice"), "balance")
    )
    # the gap of format v1, kept for the rows it wrote: the two were the same call
    assert stored_fingerprint(alice, version="v1") == stored_fingerprint(bob, version="v1")


def test_a_helper_reading_a_global_and_a_redefined_class_are_other_calls() -> None:
    global user, Account
    helper = stored_fingerprint(lambda: greet())
    klass = stored_fingerprint(functools.partial(send_mail, Account))
    old = Account
    user = "bob"
    try:
        assert stored_fingerprint(lambda: greet()) != helper

        class Account:  # type: ignore[no-redef]  # a notebook cell re-run with another body
            limit = 20

        assert stored_fingerprint(functools.partial(send_mail, Account)) != klass
    finally:
        user = "alice"
        Account = old
    assert stored_fingerprint(lambda: greet()) == helper


def test_what_a_used_function_writes_is_not_part_of_the_stored_call() -> None:
    def make_counter(label: str) -> Any:
        count = 0
        seen: dict[str, int] = {}

        async def counted(item: str) -> str:
            nonlocal count
            count += 1
            seen[item] = count
            return f"{label}:{item}"

        return counted

    tool = make_counter("a")
    before = stored_fingerprint(functools.partial(tool, "x"))
    tool.__closure__[0].cell_contents = 5  # type: ignore[index]  # as a run would leave it
    tool.__closure__[2].cell_contents["x"] = 1  # type: ignore[index]
    assert stored_fingerprint(functools.partial(tool, "x")) == before
    assert stored_fingerprint(functools.partial(make_counter("b"), "x")) != before


def _v1_text(fn: functools.partial[Any]) -> str:
    """The v1 text the older agentq stored for ``partial(module_function, *args)``, built by
    hand from that format: a partial's arguments, then its function by its names."""
    func = fn.func
    form = ["derived", [["partial", list(fn.args), []],
                        ["function", func.__module__, func.__qualname__]]]
    text = json.dumps(form, ensure_ascii=True, separators=(",", ":"))
    return "v1:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def test_v1_texts_are_still_checked_by_the_v1_rules() -> None:
    alice = functools.partial(send_mail, "alice")
    row = _v1_text(alice)
    assert stored_fingerprint(alice, version="v1") == row  # the crafted row is what v1 wrote
    assert same_stored(row, alice)
    assert not same_stored(row, functools.partial(send_mail, "bob"))
    assert same_stored(stored_fingerprint(alice), alice)
    assert not same_stored("v9:" + "0" * 64, alice)  # an unknown format: another call
    with pytest.raises(ValueError, match="v9"):
        stored_fingerprint(alice, version="v9")


async def test_after_a_restart_bob_is_refused_not_answered_with_alices_result(
    tmp_path: Path,
) -> None:
    """The user's order: push for alice, restart (a new Queue on the same SqliteStore), push
    for bob under the same key: KeyConflictError, not alice's result."""
    db = tmp_path / "queue.db"
    ran.clear()
    async with SqliteStore(db) as store, Queue(store=store) as queue:
        assert await queue.push_and_wait(
            Job("k", functools.partial(make_tool("alice"), "balance"))
        ) == "alice:balance"
    async with SqliteStore(db) as store, Queue(store=store) as queue:
        with pytest.raises(KeyConflictError, match="another call"):
            await queue.push(Job("k", functools.partial(make_tool("bob"), "balance")))
        again = Job("k", functools.partial(make_tool("alice"), "balance"))
        assert await queue.push(again) == Cached("alice:balance")
    assert ran == [("alice", "balance")]


async def test_after_a_max_keys_eviction_bob_is_refused(tmp_path: Path) -> None:
    ran.clear()
    async with SqliteStore(tmp_path / "queue.db") as store, Queue(
        store=store, max_keys=1
    ) as queue:
        await queue.push_and_wait(Job("k", functools.partial(make_tool("alice"), "x")))
        await queue.push_and_wait(Job("other", functools.partial(send_mail, "carol")))
        assert queue.state("k") is None  # evicted from memory, read back from the store
        with pytest.raises(KeyConflictError):
            await queue.push(Job("k", functools.partial(make_tool("bob"), "x")))
    assert ran == [("alice", "x"), ("mail", "carol")]


async def test_a_v1_row_written_by_the_old_code_still_answers_the_same_call(
    tmp_path: Path,
) -> None:
    ran.clear()
    alice = functools.partial(send_mail, "alice")
    async with SqliteStore(tmp_path / "queue.db") as store:
        await store.save_job("mail-42", fingerprint=_v1_text(alice),
                             output="mail sent to alice", completed_at=1.0, expires_at=None)
        async with Queue(store=store) as queue:
            assert await queue.push(Job("mail-42", alice)) == Cached("mail sent to alice")
            await queue.forget("mail-42")  # memory and store: read back again below
        await store.save_job("mail-42", fingerprint=_v1_text(alice),
                             output="mail sent to alice", completed_at=2.0, expires_at=None)
        async with Queue(store=store) as queue:
            with pytest.raises(KeyConflictError):
                await queue.push(Job("mail-42", functools.partial(send_mail, "bob")))
    assert ran == []


async def test_a_durable_call_recorded_with_a_v1_text_is_answered_on_a_retry(
    store: DurableStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step whose call an older agentq recorded (a v1 text in the log) is retried by this
    one: the call is answered from the log, not refused as "recorded for another call"."""
    from agentq.workflows import calls as calls_module

    real = calls_module.stored_fingerprint
    old_code = {"on": True}

    def stored_as(fn: Any, explicit: Any = None) -> str:
        return real(fn, explicit, "v1" if old_code["on"] else "v2")

    monkeypatch.setattr(calls_module, "stored_fingerprint", stored_as)
    ran.clear()

    async def body(ctx: StepContext) -> str:
        out: str = await ctx.call(Job("mail", functools.partial(send_mail, "alice")))
        if old_code["on"]:
            old_code["on"] = False  # the process is upgraded, the step retried
            raise ConnectionError("the step fails once after its call")
        return out

    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        try:
            wf = Workflow("wf-v1", [StepDef("s", body, retry=RetryPolicy(2))])
            result = await engine.run(wf)
        finally:
            await engine.close()
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.output == "mail sent to alice"
    assert ran == [("mail", "alice")]  # answered from the log on the retry
    rows = await store.calls("wf-v1")
    assert [row.fingerprint[:3] for row in rows] == ["v1:"]  # type: ignore[index]
