"""The ``agentq`` click group and what every command shares: settings, opening the STORE,
the one-line refusals, literal output.

Every command takes the STORE first (a SQLite path or a PostgreSQL DSN, see
`agentq.cli.target.open_store`) and opens it with `run_on`. Exit codes: 0 done, 1 refused or
not found (one line on stderr, starting ``agentq:``), 2 a usage error (click's: an unknown
option, a bad ``--state``, ``--input`` that is not JSON, a number that is not one,
``--pg-schema`` with a SQLite path).

Everything printed goes through `agentq.cli.literal` (stored strings and the values a user
typed are printed literally, their control characters made visible): views as rich `Text`,
messages through `say` and `fail`, click's usage errors through `LiteralGroup`. A new command
goes in a module of its own: it decorates a function with ``@cli.command()``, opens the store
with `run_on` and prints with `say`; ``agentq.cli.__init__`` imports that module.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console

from agentq.cli.literal import visible
from agentq.cli.target import Refused, is_dsn, open_store
from agentq.clock import Clock, SystemClock
from agentq.errors import AgentqError
from agentq.store import DurableStore

__all__ = ["LiteralGroup", "STORE", "Settings", "WORKFLOW", "cli", "fail", "run_on", "say",
           "settings"]

T = TypeVar("T")


@dataclass
class Settings:
    """What the commands share: the clock ("now" for the verbs that record) and the console.

    Tests pass their own as ``CliRunner().invoke(cli, args, obj=Settings(clock=FakeClock()))``.
    """

    clock: Clock = field(default_factory=SystemClock)
    schema: str | None = None
    """The PostgreSQL schema of agentq's tables (``--pg-schema``); None: not given, so
    ``agentq`` for a DSN (and a SQLite path is accepted)."""
    width: int | None = None
    """Console width in characters; default the terminal's (140 when not a terminal)."""

    def console(self) -> Console:
        """A console on the current stdout (so that click's test runner captures it)."""
        width = self.width
        if width is None and not sys.stdout.isatty():
            width = shutil.get_terminal_size((140, 24)).columns
        # the views hold no markup (every stored string is a Text): markup and emoji codes
        # are off all the same
        return Console(file=sys.stdout, width=width, highlight=False, soft_wrap=False,
                       markup=False, emoji=False)


def say(message: str, *, err: bool = False) -> None:
    """Print one message line, literally (`visible`)."""
    click.echo(visible(message), err=err)


def fail(message: object) -> NoReturn:
    """Print ``agentq: <message>`` as one literal line on stderr and exit with code 1."""
    first, *more = str(message).strip().splitlines() or [""]
    # one line, as promised: a driver's hint on further lines ("Is the server running…?")
    # is joined onto it
    say(f"agentq: {' '.join([first, *(m.strip() for m in more if m.strip())])}", err=True)
    sys.exit(1)


def run_on(target: str, work: Callable[[DurableStore], Awaitable[T]]) -> T:
    """Open the STORE `target`, await ``work(store)``, close the store; the one way a
    command reaches its store.

    Returns:
        What `work` returns.

    Raises:
        click.UsageError: ``--pg-schema`` was given with a SQLite path (exit code 2).
        SystemExit: Code 1 after one line on stderr when the store is refused or `work`
            raises `Refused` or another `AgentqError`.
    """
    schema = settings(click.get_current_context()).schema
    if schema is not None and not is_dsn(target):
        raise click.UsageError(
            f"--pg-schema applies to a PostgreSQL DSN, not to the SQLite file {target!r}"
        )

    async def main() -> T:
        store = await open_store(target, schema=schema or "agentq")
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except Refused as exc:
        fail(exc)
    except AgentqError as exc:  # a store failure, a schema from a newer agentq, ...
        fail(f"{type(exc).__name__}: {exc}")


def settings(ctx: click.Context) -> Settings:
    """The `Settings` of this run (the test's ``obj``, else made with the defaults)."""
    found = ctx.ensure_object(Settings)
    assert isinstance(found, Settings)
    return found


@contextmanager
def _literal_errors() -> Iterator[None]:
    try:
        yield
    except click.ClickException as exc:  # "No such option: --<what was typed>"...
        # click types `message` Final, but rewriting it before click shows it is the one
        # place every usage error passes through
        exc.message = visible(exc.message)  # type: ignore[misc]
        raise


class LiteralGroup(click.Group):
    """click's group whose usage errors print the values a user typed literally: an unknown
    option, a bad choice or number, extra arguments (their messages through `visible`)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """click's, with the messages of its usage errors made literal."""
        with _literal_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        """click's (parses and runs the subcommand), its usage errors made literal."""
        with _literal_errors():
            return super().invoke(ctx)


def _version() -> str:
    try:
        return version("agentq")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


STORE = click.argument("store", metavar="STORE")
WORKFLOW = click.argument("workflow_id", metavar="WORKFLOW_ID")


@click.group(cls=LiteralGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--pg-schema", default=None, metavar="NAME",
              help="The PostgreSQL schema of agentq's tables (default: agentq); a DSN only.")
@click.version_option(_version(), "--version", prog_name="agentq", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, pg_schema: str | None) -> None:
    """Look into an agentq store and record decisions in it.

    STORE is the path of an agentq SQLite file (never created here) or a PostgreSQL DSN
    (postgresql://...). approve, reject, cancel and retry only record: the engine that
    serves the workflow (where its definition is registered) continues it.
    """
    found = settings(ctx)
    if pg_schema is not None:
        found.schema = pg_schema
