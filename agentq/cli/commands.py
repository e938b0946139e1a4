"""The ``agentq`` commands: ls, show, events, approve, reject, cancel, retry, export (and
``serve`` and ``sweep``, from modules of their own).

``serve`` and ``send`` are modules of their own, imported here so that they register.

Each registers on the group of `agentq.cli.group` (exit codes, literal output, opening the
STORE are there); ``ls`` and ``events`` print a page at a time (`agentq.cli.pages`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from agentq.cli import actions, views
from agentq.cli.conversation import messages_json, messages_view
from agentq.cli.export import check_html_target, export_parquet, export_static_html
from agentq.cli.group import STORE, WORKFLOW, Settings, cli, run_on, say, settings
from agentq.cli.lanes import resume_lane
from agentq.cli.members import group_listing
from agentq.cli.pages import DEFAULT_LIMIT, Page, event_page, workflow_page
from agentq.cli.params import WholeNumber, json_value
from agentq.cli.schedules import schedules
from agentq.cli.send import send
from agentq.cli.serve import serve
from agentq.cli.sweep import sweep
from agentq.cli.target import DSN_PREFIXES, is_dsn
from agentq.events import EventKind
from agentq.store import DurableStore, WorkflowState, child_of
from agentq.widgets import is_agent_run, load_conversation

__all__ = ["Settings", "cli", "main", "store_title"]


def _all_option(noun: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option("--all", "show_all", is_flag=True,
                        help=f"Every one of the {noun}, in one listing (no pages).")


def _limit_option(noun: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(
        "--limit", type=WholeNumber(1, f"the {noun} of a page"), default=DEFAULT_LIMIT,
        show_default=True,
        help=f"At most N {noun} (a page); when more follow, the last line names the next page.",
    )


def _limit(ctx: click.Context, limit: int, show_all: bool) -> int | None:
    if not show_all:
        return limit
    if ctx.get_parameter_source("limit") is not ParameterSource.DEFAULT:
        raise click.UsageError("give --limit or --all, not both")
    return None


def _print_page(ctx: click.Context, page: Page[Any], noun: str, lines: Sequence[str] | None,
                table: Any) -> None:
    """Print a page: JSON `lines` on stdout (the footer on stderr), or the `table` and the
    footer below it."""
    footer = page.footer(noun)
    if lines is not None:
        for line in lines:
            click.echo(line)
        if footer is not None:
            say(footer, err=True)
        return
    console = settings(ctx).console()
    console.print(table)
    if footer is not None:
        say(footer)


@cli.command("ls")
@STORE
@click.option("--state", type=click.Choice([s.value for s in WorkflowState]),
              help="Only workflows in this state.")
@click.option("--after", metavar="WORKFLOW_ID",
              help="Only workflows that started after this one (the next page).")
@click.option("--group", "group_id", metavar="GROUP_ID",
              help="Only the members of this run group, in the order submitted (all of them, "
                   "no pages), and the group's summary line.")
@_limit_option("workflows")
@_all_option("workflows")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def ls(
    ctx: click.Context, store: str, state: str | None, after: str | None, group_id: str | None,
    limit: int, show_all: bool, as_json: bool,
) -> None:
    """List the workflows, in the order they started, a page at a time (or the members of a
    run group with --group)."""
    rows_wanted = _limit(ctx, limit, show_all)
    if group_id is not None and after is not None:
        raise click.UsageError("give --group or --after, not both (a group is listed whole)")

    async def members(s: DurableStore) -> None:
        found = await group_listing(
            s, group_id or "", None if state is None else WorkflowState(state), not as_json
        )
        if as_json:
            for row in found.rows:
                click.echo(views.workflow_line(row))
            say(found.summary, err=True)
            return
        settings(ctx).console().print(views.workflows_table(found.rows, found.steps))
        say(found.summary)

    async def work(s: DurableStore) -> None:
        if group_id is not None:
            await members(s)
            return
        page, steps = await workflow_page(
            s, None if state is None else WorkflowState(state), after, rows_wanted,
            with_steps=not as_json,
        )
        lines = None
        if as_json:
            lines = [views.workflow_line(row) for row in page.rows]
        _print_page(ctx, page, "workflows", lines,
                    None if as_json else views.workflows_table(page.rows, steps))

    run_on(store, work)


@cli.command()
@STORE
@WORKFLOW
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object: the workflow, step and call rows, every field, and an "
              "agent run's messages.")
@click.pass_context
def show(ctx: click.Context, store: str, workflow_id: str, as_json: bool) -> None:
    """Show one workflow: its steps, the waits with their details, its durable calls, its
    parent and child runs, whether its end-of-run hooks were delivered; an agent run's
    messages (prompt, model text, tool calls with their arguments and returns)."""

    async def work(s: DurableStore) -> None:
        wf = await actions.find_workflow(s, workflow_id)
        steps = await s.step_rows(wf.workflow_id)
        calls = await s.calls(wf.workflow_id)
        hooks = await s.hooks(wf.workflow_id)
        started = await s.load_events(wf.workflow_id, limit=1)
        link = started[0].data.get("parent") if started else None
        parent = link.get("workflow_id") if isinstance(link, dict) else None
        if as_json:
            messages = (messages_json(await load_conversation(s, wf.workflow_id, depth=0))
                        if is_agent_run(wf) else None)
            click.echo(views.workflow_json(wf, steps, calls, parent, hooks, messages))
            return
        first = await s.load_events(wf.workflow_id, limit=2)  # a fork's 2nd: WorkflowForked
        forked = next((e.data for e in first if e.kind is EventKind.WORKFLOW_FORKED), None)
        kids = [await s.get_workflow(c) for r in calls if (c := child_of(r)) is not None]
        states = {k.workflow_id: k.state.value for k in kids if k is not None}
        view = views.workflow_view(wf, steps, calls, parent, forked, hooks, states)
        console = settings(ctx).console()
        console.print(view)
        if is_agent_run(wf):  # a DurableAgent run: its conversation, as the notebook reads it
            console.print(messages_view(await load_conversation(s, wf.workflow_id, depth=0)))

    run_on(store, work)


@cli.command()
@STORE
@click.argument("workflow_id", metavar="[WORKFLOW_ID]", required=False)
@click.option("--after", type=WholeNumber(0, "an event's sequence number"), default=0,
              show_default=True, help="Only events with a sequence number above N.")
@_limit_option("events")
@_all_option("events")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line, with each event's whole data.")
@click.pass_context
def events(
    ctx: click.Context, store: str, workflow_id: str | None, after: int, limit: int,
    show_all: bool, as_json: bool,
) -> None:
    """Print the event log (of one workflow, or all), by sequence number, a page at a time."""
    rows_wanted = _limit(ctx, limit, show_all)

    async def work(s: DurableStore) -> None:
        if workflow_id is not None:
            await actions.find_workflow(s, workflow_id)
        page = await event_page(s, workflow_id, after, rows_wanted)
        lines = [views.event_json(event) for event in page.rows] if as_json else None
        _print_page(ctx, page, "events", lines,
                    None if as_json else views.events_table(page.rows))

    run_on(store, work)


def _decide(
    ctx: click.Context, store: str, workflow_id: str, step: str | None, value: Any,
    note: str, approved: bool,
) -> None:
    if value is not None and note:
        raise click.UsageError("give either --input or --note, not both")
    payload = actions.approval_input(approved, note) if value is None else value
    verb = "approval" if approved else "rejection"

    async def work(s: DurableStore) -> None:
        row = await actions.resume(s, settings(ctx).clock, workflow_id, step, payload)
        key = "" if row.wait_key is None else f" (wait {row.wait_key!r})"
        say(
            f"recorded the {verb} of step {row.step_name!r}{key} of workflow "
            f"{row.workflow_id!r}; the engine serving it continues the workflow"
        )

    run_on(store, work)


def _default_help(approved: bool) -> str:
    return json.dumps(actions.approval_input(approved, "NOTE"))


def _decision(approved: bool) -> Callable[[Callable[..., None]], click.Command]:
    def make(fn: Callable[..., None]) -> click.Command:
        fn = click.pass_context(fn)
        fn = click.option("--note", default="", help="Text sent with the default input.")(fn)
        fn = click.option(
            "--input", "value", callback=json_value, metavar="JSON",
            help=f"The resume input as JSON (default: {_default_help(approved)}).",
        )(fn)
        fn = click.option("--step", help="The waiting step (name or index); default: the "
                          "one step that waits.")(fn)
        return cli.command(fn.__name__)(STORE(WORKFLOW(fn)))

    return make


@_decision(approved=True)
def approve(
    ctx: click.Context, store: str, workflow_id: str, step: str | None, value: Any, note: str
) -> None:
    """Record an approval of a waiting step (its resume input)."""
    _decide(ctx, store, workflow_id, step, value, note, approved=True)


@_decision(approved=False)
def reject(
    ctx: click.Context, store: str, workflow_id: str, step: str | None, value: Any, note: str
) -> None:
    """Record a rejection of a waiting step (its resume input)."""
    _decide(ctx, store, workflow_id, step, value, note, approved=False)


@cli.command()
@STORE
@WORKFLOW
@click.option("--reason", default="cancelled from the command line", show_default=True)
@click.pass_context
def cancel(ctx: click.Context, store: str, workflow_id: str, reason: str) -> None:
    """Cancel a running or waiting workflow (a running attempt's result is refused)."""

    async def work(s: DurableStore) -> None:
        await actions.cancel(s, settings(ctx).clock, workflow_id, reason)
        say(f"cancelled workflow {workflow_id!r}")

    run_on(store, work)


@cli.command()
@STORE
@WORKFLOW
@click.option("--from-step", help="Run again from this step (name or index); default: the "
              "first step that did not complete.")
@click.pass_context
def retry(ctx: click.Context, store: str, workflow_id: str, from_step: str | None) -> None:
    """Record a retry of a failed or cancelled workflow; its serving engine runs it."""

    async def work(s: DurableStore) -> None:
        await actions.retry(s, settings(ctx).clock, workflow_id, from_step)
        say(
            f"recorded a retry of workflow {workflow_id!r}; the engine serving it runs it"
        )

    run_on(store, work)


@cli.command()
@STORE
@click.option("--parquet", "parquet", type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="Write events/steps/calls.parquet into DIR.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              metavar="FILE", help="Write the dashboard views as one static HTML file.")
@click.option("--workflows", type=WholeNumber(1, "workflows"), default=50, show_default=True,
              help="HTML: the latest N workflows drawn as trees and in the timeline.")
@click.option("--nodes", type=WholeNumber(1, "tree nodes"), default=1000, show_default=True,
              help="HTML: at most N tree nodes (each with its detail) in the file.")
@click.pass_context
def export(
    ctx: click.Context, store: str, parquet: Path | None, html_file: str | None, workflows: int,
    nodes: int,
) -> None:
    """Export the store: Parquet frames, a static HTML dashboard, or both.

    --workflows and --nodes shape the HTML page only: given without --html, they are refused.
    An --html FILE that is the store's own file (or its -wal/-shm) is refused before anything
    is written.
    """
    if parquet is None and html_file is None:
        raise click.UsageError("give --parquet DIR, --html FILE, or both")
    if html_file == "":
        raise click.BadParameter("'' is not a file name", param_hint="'--html'")
    html = None if html_file is None else Path(html_file)
    if html is None:
        for name in ("workflows", "nodes"):
            if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT:
                raise click.UsageError(f"--{name} applies to --html only")

    async def work(s: DurableStore) -> list[Path]:
        written: list[Path] = []
        if html is not None:
            check_html_target(s, html)
        if parquet is not None:
            written += await export_parquet(s, parquet)
        if html is not None:
            now = settings(ctx).clock.time()
            written.append(await export_static_html(s, html, now, store_title(store),
                                                    workflows=workflows, nodes=nodes))
        return written

    for path in run_on(store, work):
        say(f"wrote {path}")


def store_title(target: str) -> str:
    """How the page names a store: a file's name, or a DSN without its user and password."""
    if target.startswith(DSN_PREFIXES):
        scheme, _, rest = target.partition("://")
        return f"{scheme}://{rest.rpartition('@')[2]}"
    if is_dsn(target):
        return " ".join(p for p in target.split() if not p.startswith(("password=", "user=")))
    return Path(target).name


cli.add_command(serve)  # agentq serve MODULE:ATTR, a worker process (agentq.cli.serve)
cli.add_command(schedules)  # agentq schedules STORE (agentq.cli.schedules)
cli.add_command(sweep)  # agentq sweep STORE --ended-before T, retention (agentq.cli.sweep)
cli.add_command(send)  # agentq send STORE WORKFLOW_ID TOPIC JSON (agentq.cli.send)
cli.add_command(resume_lane)  # agentq resume-lane STORE LANE (agentq.cli.lanes)


def main() -> None:
    """Run the command line (the ``agentq`` console script and ``python -m agentq``)."""
    cli(prog_name="agentq")
