"""``agentq send STORE WORKFLOW_ID TOPIC JSON [--key K]``: send a message to a workflow.

The message is recorded through the store's own verb (`DurableStore.send_message`, one
transaction): kept until a ``ctx.receive(TOPIC)`` of the workflow takes it, or delivered at
once to a step waiting on such a receive, which the engine serving the workflow then
continues (a plain workflow: the program that registered it, at its next ``run`` or
``recover``). A send with a ``--key`` used before records nothing and says so (exit code 0:
sending twice is safe). A refusal of the store (no such workflow, an ended one) exits 1.
"""

from __future__ import annotations

from typing import Any

import click

from agentq.cli.group import STORE, WORKFLOW, run_on, say, settings
from agentq.cli.params import json_value
from agentq.cli.target import Refused
from agentq.errors import EngineError
from agentq.store import DurableStore

__all__ = ["send"]


@click.command()
@STORE
@WORKFLOW
@click.argument("topic", metavar="TOPIC")
@click.argument("payload", metavar="JSON", callback=json_value)
@click.option("--key", default=None, metavar="K",
              help="An idempotency key: a send with a key used before records nothing.")
@click.pass_context
def send(
    ctx: click.Context, store: str, workflow_id: str, topic: str, payload: Any, key: str | None
) -> None:
    """Send a message (JSON) to a workflow on TOPIC; a step takes it with ctx.receive."""

    async def work(s: DurableStore) -> None:
        try:
            sent = await s.send_message(
                workflow_id, topic, payload, settings(ctx).clock.time(), key=key
            )
        except EngineError as exc:  # no such workflow, an ended one
            raise Refused(str(exc)) from exc
        if not sent.sent:
            say(f"a message with key {key!r} was sent to workflow {workflow_id!r} before: "
                "nothing recorded")
        elif sent.delivered_to is None:
            say(f"sent a message on topic {topic!r} to workflow {workflow_id!r}; it is kept "
                "until a receive takes it")
        else:
            say(f"sent a message on topic {topic!r} to workflow {workflow_id!r}, delivered to "
                f"step #{sent.delivered_to}; the engine serving it continues it")

    run_on(store, work)
