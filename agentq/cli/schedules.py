"""``agentq schedules STORE``: list the stored schedules (``engine.schedule``).

Name, definition, spec (``cron …`` or ``every …s``), next tick (UTC), the last tick's
instance and the input, as a table, or one JSON object per line with ``--json``. Registered on
the group by `agentq.cli.commands`.
"""

from __future__ import annotations

import click

from agentq.cli import views
from agentq.cli.group import STORE, run_on, settings
from agentq.store import DurableStore

__all__ = ["schedules"]


@click.command()
@STORE
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def schedules(ctx: click.Context, store: str, as_json: bool) -> None:
    """List the schedules, by name: spec, next tick, last instance."""

    async def work(s: DurableStore) -> None:
        rows = await s.schedules()
        if as_json:
            for row in rows:
                click.echo(views.schedule_line(row))
            return
        settings(ctx).console().print(views.schedules_table(rows))

    run_on(store, work)
