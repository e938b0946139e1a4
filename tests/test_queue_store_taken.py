"""Queue(store=...): the call a stored outcome describes, and a store closed under the queue.

- F8: the stored fingerprint is the call's as the push claimed its key (what memory
  compares), not as its globals are when the body returns.
- F6: a store closed while jobs are in flight costs one log line, not a traceback a job.
"""

from __future__ import annotations

import pytest

from agentq.errors import KeyConflictError
from agentq.outcomes import Completed
from agentq.queue import Cached, Job, Queue, Queued
from agentq.store import MemoryStore

pytestmark = pytest.mark.timeout(30)

user = "alice"  # the global the jobs below read; their bodies rebind it while they run


async def send(to: str) -> str:
    global user
    user = "bob"  # rebound while the job runs, after its push
    return f"sent to {to}"


def greet() -> Job:
    return Job("greet", lambda: send(user))  # one code object for every push


@pytest.fixture(autouse=True)
def _reset_user() -> None:
    global user
    user = "alice"


@pytest.mark.parametrize("nowait", [False, True])
async def test_the_stored_call_is_the_one_pushed_not_the_globals_at_completion(
    nowait: bool,
) -> None:
    global user
    store = MemoryStore()
    async with Queue(store=store) as first:
        if nowait:
            accepted = first.push_nowait(greet())
            assert isinstance(accepted, Queued)
            assert await accepted.handle == Completed("sent to alice")
        else:
            assert await first.push_and_wait(greet()) == "sent to alice"
        assert user == "bob"
        user = "alice"
        assert await first.push(greet()) == Cached("sent to alice")  # memory: same call
    async with Queue(store=store) as restarted:  # the store agrees with memory
        user = "bob"
        with pytest.raises(KeyConflictError, match="stored outcome"):
            await restarted.push(greet())  # another call: never alice's answer
        user = "alice"
        assert await restarted.push(greet()) == Cached("sent to alice")
