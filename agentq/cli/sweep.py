"""``agentq sweep STORE --ended-before T [--state S ...]``: retention from the command line.

Runs `DurableStore.sweep` on the STORE and prints what it removed in one line. ``T`` is a
point in time, in one of two forms that cannot be mistaken for each other:

- an age, back from now: a whole number and a unit, ``s`` (seconds), ``m`` (minutes), ``h``
  (hours), ``d`` (days) or ``w`` (weeks): ``--ended-before 30d`` removes what ended more
  than 30 days ago;
- an ISO-8601 date and time with its zone: ``2026-01-01T00:00:00Z`` or
  ``2026-01-01T09:00+09:00`` (a time without a zone is refused: its zone would be a guess).

Anything else is a usage error naming the value (exit code 2).
"""

from __future__ import annotations

import re
from datetime import datetime

import click

from agentq.cli.group import STORE, run_on, say, settings
from agentq.store import DurableStore, SweepReport

__all__ = ["ended_before", "sweep"]

_AGE = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_ENDED = ("completed", "failed", "cancelled")
_MAX_AGE = 1000 * 366 * 86400  # an age back at most ~1000 years: a date can still show it


def ended_before(text: str, now: float) -> float:
    """The cutoff `text` names (an age back from `now`, or an ISO-8601 time with a zone),
    as Unix seconds.

    Raises:
        click.BadParameter: Neither form, a time without a zone, or an age of more than
            ~1000 years (the message quotes it).
    """
    value = text.strip()
    age = _AGE.fullmatch(value)
    if age is not None:
        seconds = int(age[1]) * _UNITS[age[2]]
        if seconds > _MAX_AGE:
            raise click.BadParameter(
                f"{text!r} is an age of more than 1000 years",
                param_hint="'--ended-before'",
            )
        return now - seconds
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        when = None
    if when is None:
        raise click.BadParameter(
            f"{text!r} is neither an age (30d, 12h, 90m, 45s, 2w) nor an ISO-8601 time with "
            "its zone (2026-01-01T00:00:00Z)",
            param_hint="'--ended-before'",
        )
    if when.tzinfo is None or when.utcoffset() is None:
        raise click.BadParameter(
            f"{text!r} has no zone: give one (2026-01-01T00:00:00Z, +02:00) or an age (30d)",
            param_hint="'--ended-before'",
        )
    return when.timestamp()


def _said(report: SweepReport, cutoff: float) -> str:
    try:
        when = datetime.fromtimestamp(cutoff).astimezone().isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):  # beyond what a date holds
        when = f"{cutoff!r} (Unix seconds)"
    noun = "workflow" if report.workflows == 1 else "workflows"
    return (
        f"swept {report.workflows} {noun} that ended before {when} "
        f"({report.events} events, {report.calls} calls and waits)"
    )


@click.command("sweep")
@STORE
@click.option("--ended-before", "ended", metavar="T", required=True,
              help="Remove what ended before T: an age back from now (30d, 12h, 90m, 45s, "
              "2w) or an ISO-8601 time with its zone (2026-01-01T00:00:00Z).")
@click.option("--state", "states", multiple=True, type=click.Choice(_ENDED),
              help="An ended state to remove (repeat for several); default: completed and "
              "cancelled (failed workflows are kept unless asked for).")
@click.pass_context
def sweep(ctx: click.Context, store: str, ended: str, states: tuple[str, ...]) -> None:
    """Remove ended workflows with their events, calls and job outcomes (retention).

    Never a running or waiting workflow, nor a child run whose parent is still stored. A
    SQLite file does not shrink by itself: its freed pages are reused; run VACUUM on it (at a
    quiet moment) to give the space back.
    """
    cutoff = ended_before(ended, settings(ctx).clock.time())

    async def work(s: DurableStore) -> None:
        report = await (
            s.sweep(ended_before=cutoff, states=states) if states
            else s.sweep(ended_before=cutoff)
        )
        say(_said(report, cutoff))

    run_on(store, work)
