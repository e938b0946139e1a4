"""A DurableAgent gives what a plain pydantic-ai Agent gives on the same script
(bench/agent_parity.py): the typed output, the messages (timestamps and ids aside), the usage,
the tool runs, and with an event-stream handler the same events in the same order; read back
by a fresh engine, the same output, messages and usage with no tool run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.agent_parity import Outcome, durable, normalized, plain

pytestmark = pytest.mark.timeout(60)


def assert_same(base: Outcome, other: Outcome) -> None:
    assert other.output == base.output and type(other.output) is type(base.output)
    assert normalized(other.messages) == normalized(base.messages)
    assert other.usage == base.usage


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_durable_run_gives_what_a_plain_run_gives(tmp_path: Path, streamed: bool) -> None:
    base = await plain(streamed)
    live, read = await durable(tmp_path / "parity.db", streamed)
    assert_same(base, live)
    assert sorted(live.ran) == sorted(base.ran) == ["lookup(1)", "lookup(2)", "refund(2)"]
    assert live.events == base.events  # with a handler: deltas included, nothing twice
    assert (len(base.events) > 20) is streamed
    assert_same(base, read)
    assert read.ran == []  # read back from the log: no tool ran again
    # what differs from a plain run by design: the ids, derived from the durable run's id
    assert {m.run_id for m in live.messages} == {m.run_id for m in read.messages} == {"parity"}
    conversation = {m.conversation_id for m in live.messages}
    assert len(conversation) == 1 and {m.conversation_id for m in read.messages} == conversation
