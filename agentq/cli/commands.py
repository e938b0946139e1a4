"""The ``agentq`` command group (click): ls, show, events, approve, reject, cancel, retry, export.

Every command takes the STORE first (a SQLite path or a PostgreSQL DSN, see
`agentq.cli.target.open_store`), opens it, does one thing and closes it. Exit codes: 0 done,
1 refused or not found (one line on stderr, starting ``agentq:``), 2 a usage error (click's:
an unknown option, a bad ``--state``, ``--input`` that is not JSON).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from click.core import ParameterSource
from rich.console import Console

from agentq.cli import actions, views
from agentq.cli.export import check_html_target, export_parquet, export_static_html
from agentq.cli.serve import serve
from agentq.cli.target import DSN_PREFIXES, Refused, is_dsn, open_store
from agentq.clock import Clock, SystemClock
from agentq.errors import AgentqError
from agentq.events import EventKind
from agentq.store import DurableStore, WorkflowState

__all__ = ["Settings", "cli", "main"]

T = TypeVar("T")


@dataclass
class Settings:
    """What the commands share: the clock ("now" for the verbs that record) and the console.

    Tests pass their own as ``CliRunner().invoke(cli, args, obj=Settings(clock=FakeClock()))``.
    """

    clock: Clock = field(default_factory=SystemClock)
    schema: str = "agentq"
    """The PostgreSQL schema of agentq's tables (``--pg-schema``)."""
    width: int | None = None
    """Console width in characters; default the terminal's (140 when not a terminal)."""

    def console(self) -> Console:
        """A console on the current stdout (so that click's test runner captures it)."""
        width = self.width
        if width is None and not sys.stdout.isatty():
            width = shutil.get_terminal_size((140, 24)).columns
        return Console(file=sys.stdout, width=width, highlight=False, soft_wrap=False)


def _fail(message: object) -> NoReturn:
    first, *more = str(message).strip().splitlines() or [""]
    # one line, as promised: a driver's hint on further lines ("Is the server running…?")
    # is joined onto it
    click.echo(f"agentq: {' '.join([first, *(m.strip() for m in more if m.strip())])}", err=True)
    sys.exit(1)


def _run(target: str, work: Callable[[DurableStore], Awaitable[T]]) -> T:
    """Open `target`, await ``work(store)``, close the store; a refusal exits with code 1."""

    schema = _settings(click.get_current_context()).schema

    async def main() -> T:
        store = await open_store(target, schema=schema)
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except Refused as exc:
        _fail(exc)
    except AgentqError as exc:  # a store failure, a schema from a newer agentq, ...
        _fail(f"{type(exc).__name__}: {exc}")


def _settings(ctx: click.Context) -> Settings:
    settings = ctx.ensure_object(Settings)
    assert isinstance(settings, Settings)
    return settings


def _json_value(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not JSON ({exc.msg} at character {exc.pos}): {value!r}"
        ) from None


STORE = click.argument("store", metavar="STORE")
WORKFLOW = click.argument("workflow_id", metavar="WORKFLOW_ID")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--pg-schema", default=None, metavar="NAME",
              help="The PostgreSQL schema of agentq's tables (default: agentq).")
@click.pass_context
def cli(ctx: click.Context, pg_schema: str | None) -> None:
    """Look into an agentq store and record decisions in it.

    STORE is the path of an agentq SQLite file (never created here) or a PostgreSQL DSN
    (postgresql://...). approve, reject, cancel and retry only record: the engine that
    serves the workflow (where its definition is registered) continues it.
    """
    settings = _settings(ctx)
    if pg_schema is not None:
        settings.schema = pg_schema


@cli.command("ls")
@STORE
@click.option("--state", type=click.Choice([s.value for s in WorkflowState]),
              help="Only workflows in this state.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def ls(ctx: click.Context, store: str, state: str | None, as_json: bool) -> None:
    """List the workflows, in the order they started."""

    async def work(s: DurableStore) -> None:
        rows = await s.workflows(None if state is None else WorkflowState(state))
        if as_json:
            for row in rows:
                click.echo(json.dumps({
                    "workflow_id": row.workflow_id, "definition": row.definition,
                    "state": row.state.value,
                    "steps": list(row.step_names), "reason": row.reason,
                    "created_at": row.created_at, "updated_at": row.updated_at,
                    "last_seq": row.last_seq,
                }, ensure_ascii=False))
            return
        _settings(ctx).console().print(views.workflows_table(rows, await s.step_rows()))

    _run(store, work)


@cli.command()
@STORE
@WORKFLOW
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object: the workflow, step and call rows, every field.")
@click.pass_context
def show(ctx: click.Context, store: str, workflow_id: str, as_json: bool) -> None:
    """Show one workflow: its steps, the waits with their details, its durable calls."""

    async def work(s: DurableStore) -> None:
        wf = await actions.find_workflow(s, workflow_id)
        steps = await s.step_rows(wf.workflow_id)
        calls = await s.calls(wf.workflow_id)
        if as_json:
            click.echo(views.workflow_json(wf, steps, calls))
            return
        first = await s.load_events(wf.workflow_id, limit=2)  # a fork's 2nd: WorkflowForked
        forked = next((e.data for e in first if e.kind is EventKind.WORKFLOW_FORKED), None)
        _settings(ctx).console().print(views.workflow_view(wf, steps, calls, forked))

    _run(store, work)


@cli.command()
@STORE
@click.argument("workflow_id", metavar="[WORKFLOW_ID]", required=False)
@click.option("--after", type=click.IntRange(min=0), default=0, show_default=True,
              help="Only events with a sequence number above this.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="At most this many events.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line, with each event's whole data.")
@click.pass_context
def events(
    ctx: click.Context, store: str, workflow_id: str | None, after: int, limit: int | None,
    as_json: bool,
) -> None:
    """Print the event log (of one workflow, or all), by sequence number."""

    async def work(s: DurableStore) -> None:
        if workflow_id is not None:
            await actions.find_workflow(s, workflow_id)
        found = await s.load_events(workflow_id, after_seq=after, limit=limit)
        if as_json:
            for event in found:
                click.echo(views.event_json(event))
            return
        _settings(ctx).console().print(views.events_table(found))

    _run(store, work)


def _decide(
    ctx: click.Context, store: str, workflow_id: str, step: str | None, value: Any,
    note: str, approved: bool,
) -> None:
    if value is not None and note:
        raise click.UsageError("give either --input or --note, not both")
    payload = actions.approval_input(approved, note) if value is None else value
    verb = "approval" if approved else "rejection"

    async def work(s: DurableStore) -> None:
        row = await actions.resume(s, _settings(ctx).clock, workflow_id, step, payload)
        key = "" if row.wait_key is None else f" (wait {row.wait_key!r})"
        click.echo(
            f"recorded the {verb} of step {row.step_name!r}{key} of workflow "
            f"{row.workflow_id!r}; the engine serving it continues the workflow"
        )

    _run(store, work)


def _default_help(approved: bool) -> str:
    return json.dumps(actions.approval_input(approved, "NOTE"))


def _decision(approved: bool) -> Callable[[Callable[..., None]], click.Command]:
    def make(fn: Callable[..., None]) -> click.Command:
        fn = click.pass_context(fn)
        fn = click.option("--note", default="", help="Text sent with the default input.")(fn)
        fn = click.option(
            "--input", "value", callback=_json_value, metavar="JSON",
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
        await actions.cancel(s, _settings(ctx).clock, workflow_id, reason)
        click.echo(f"cancelled workflow {workflow_id!r}")

    _run(store, work)


@cli.command()
@STORE
@WORKFLOW
@click.option("--from-step", help="Run again from this step (name or index); default: the "
              "first step that did not complete.")
@click.pass_context
def retry(ctx: click.Context, store: str, workflow_id: str, from_step: str | None) -> None:
    """Record a retry of a failed or cancelled workflow; its serving engine runs it."""

    async def work(s: DurableStore) -> None:
        await actions.retry(s, _settings(ctx).clock, workflow_id, from_step)
        click.echo(
            f"recorded a retry of workflow {workflow_id!r}; the engine serving it runs it"
        )

    _run(store, work)


@cli.command()
@STORE
@click.option("--parquet", "parquet", type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="Write events/steps/calls.parquet into DIR.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              metavar="FILE", help="Write the dashboard views as one static HTML file.")
@click.option("--workflows", type=click.IntRange(min=1), default=50, show_default=True,
              help="HTML: the latest N workflows drawn as trees and in the timeline.")
@click.option("--nodes", type=click.IntRange(min=1), default=1000, show_default=True,
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
            now = _settings(ctx).clock.time()
            written.append(await export_static_html(s, html, now, store_title(store),
                                                    workflows=workflows, nodes=nodes))
        return written

    for path in _run(store, work):
        click.echo(f"wrote {path}")


def store_title(target: str) -> str:
    """How the page names a store: a file's name, or a DSN without its user and password."""
    if target.startswith(DSN_PREFIXES):
        scheme, _, rest = target.partition("://")
        return f"{scheme}://{rest.rpartition('@')[2]}"
    if is_dsn(target):
        return " ".join(p for p in target.split() if not p.startswith(("password=", "user=")))
    return Path(target).name


cli.add_command(serve)  # agentq serve MODULE:ATTR, a worker process (agentq.cli.serve)


def main() -> None:
    """Run the command line (the ``agentq`` console script and ``python -m agentq``)."""
    cli(prog_name="agentq")
