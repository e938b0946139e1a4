"""``agentq resume-lane STORE LANE``: lift a lane's stored ``Retry-After`` pause.

A rate-limit failure (HTTP 429 with ``Retry-After``) of a job in a lane whose budgets a
store shares pauses that lane for every process on the store (``docs/lanes.md``). This lifts
the stored pause through the store's own verb (`agentq.RateLedger.resume_lane`, one
transaction): each process's queue starts that lane's jobs again within about a second.
A lane not paused changes nothing and says so (exit code 0).
"""

from __future__ import annotations

import click

from agentq import Priority, RateLedger
from agentq.cli.group import STORE, run_on, say, settings
from agentq.cli.target import Refused
from agentq.store import DurableStore

__all__ = ["resume_lane"]


@click.command("resume-lane")
@STORE
@click.argument("lane", metavar="LANE", type=click.Choice([p.value for p in Priority]))
@click.pass_context
def resume_lane(ctx: click.Context, store: str, lane: str) -> None:
    """Lift LANE's stored Retry-After pause: every process starts its jobs again."""

    async def work(s: DurableStore) -> None:
        if not isinstance(s, RateLedger):
            raise Refused(f"{store!r} keeps no rate windows (no RateLedger verbs)")
        if await s.resume_lane(lane, settings(ctx).clock.time()):
            say(f"lifted the pause of lane {lane!r}: every process on the store starts its "
                "jobs again within about a second")
        else:
            say(f"lane {lane!r} is not paused in the store: nothing changed")

    run_on(store, work)
