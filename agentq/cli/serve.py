"""``agentq serve MODULE:ATTR``: a worker process that serves the engine a user's module makes.

ATTR (an attribute of the module, dotted paths allowed) is one of:

- a `WorkflowEngine`: served, then closed with its queue and store (the command owns them);
- a callable returning one (or an awaitable of one): called once the event loop runs, then
  as above;
- an async context manager yielding one (``@contextlib.asynccontextmanager``), or a callable
  returning such a manager: entered, its engine served, then exited; the manager owns the
  queue and the store.

Signals (`Stopper`): the first SIGTERM or SIGINT sets the stop event of
`WorkflowEngine.serve` (the engine takes no more work, not even a run's next step, says in
one line which steps are still running, lets them go on for at most ``--grace`` seconds,
then interrupts what is left and hands its leases back) and the command exits 0. A second
signal ends the process at once: one line, no traceback, exit code 128 + the signal's
number (130 for SIGINT, 143 for SIGTERM); leases still held are then taken back at once by
a serving engine on this host (its pid is gone) and by any other once they expire.

Exit codes: 0 stopped by a signal (or served to its end), 1 the target cannot be loaded or
is not an engine with definitions, or serving failed (one line, ``agentq:``), 2 a usage
error, 128 + N a second signal N.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import math
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from types import FrameType
from typing import Any

import click

from agentq import WorkflowEngine
from agentq.cli.literal import visible
from agentq.cli.target import Refused
from agentq.errors import AgentqError

__all__ = ["Stopper", "engine_of", "load", "serve"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopper:
    """The worker's signal handlers: the first signal stops serving, a second one exits.

    Handlers run in the main thread between bytecodes (`signal.signal`, not the event
    loop's), so a second signal ends the process even while a step body blocks the loop.
    """

    def __init__(self) -> None:
        self.stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._received: str | None = None
        self._before: dict[int, Any] = {}

    def install(self) -> None:
        """Install the handlers of SIGTERM and SIGINT (main thread only)."""
        for sig in _SIGNALS:
            self._before[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        """Put back the handlers that were there before `install`."""
        for sig, handler in self._before.items():
            signal.signal(sig, handler)

    def bind(self) -> asyncio.Event:
        """The stop event, made on the running loop (call once serving is about to start)."""
        self._loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        if self._received is not None:  # a signal before the loop ran: stop at once
            self.stop.set()
        return self.stop

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._received is not None:
            _say(f"second {name}: stopping at once, without handing leases back (a serving "
                 "engine on this host takes them back at once; others when they expire)")
            os._exit(128 + signum)
        self._received = name
        loop, stop = self._loop, self.stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        else:  # the engine is still being made: serving stops as soon as it would start
            _say(f"{name}: stopping once the engine is ready (send {name} again to stop at "
                 "once)")


class _LiteralFormatter(logging.Formatter):
    """Log lines as one line each, stored strings (workflow ids, step names) printed
    literally: their control and bidi characters made visible (`visible`)."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


def _say(line: str) -> None:
    """One line on stderr, flushed (the process may end right after)."""
    sys.stdout.flush()
    sys.stderr.write(f"agentq: {visible(line)}\n")
    sys.stderr.flush()


def load(target: str) -> Any:
    """Import MODULE of ``MODULE:ATTR`` (the working directory first on the path) and return
    ATTR.

    Raises:
        click.UsageError: `target` is not ``MODULE:ATTR``.
        Refused: The module cannot be imported, or has no such attribute.
    """
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise click.UsageError(f"expected MODULE:ATTR (e.g. myapp.worker:engine), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise Refused(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise Refused(
                f"module {module_name!r} has no attribute {attr!r}"
            ) from None
    return value


@contextlib.asynccontextmanager
async def engine_of(value: Any, target: str) -> AsyncIterator[WorkflowEngine]:
    """Enter what ATTR is and yield its engine; leave it (closing what the command owns).

    Raises:
        Refused: It is not, does not return and does not yield an engine, or it is a
            factory that raised.
    """
    if callable(value) and not isinstance(value, WorkflowEngine | AbstractAsyncContextManager):
        try:
            value = value()
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # the user's factory: said in one line, as a refusal
            raise Refused(f"{target}() raised {type(exc).__name__}: {exc}") from exc
    if isinstance(value, AbstractAsyncContextManager):
        async with value as engine:
            yield _engine(engine, target)
        return
    try:
        yield _engine(value, target)
    finally:  # the command owns them: closed once the engine has handed its leases back
        if isinstance(value, WorkflowEngine):
            with contextlib.suppress(AgentqError):
                await value.queue.close(drain=False)
            await value.store.close()


def _engine(value: Any, target: str) -> WorkflowEngine:
    if not isinstance(value, WorkflowEngine):
        raise Refused(
            f"{target} is {type(value).__name__}, not a WorkflowEngine, a callable returning "
            "one or an async context manager yielding one"
        )
    if not value.definitions:
        raise Refused(
            f"the engine of {target} has no registered definition: nothing to serve "
            "(engine.register(definition) first)"
        )
    return value


async def _serve(
    value: Any, target: str, stopper: Stopper, poll: float, grace: float,
    retention: float | None = None,
) -> None:
    async with engine_of(value, target) as engine:
        stop = stopper.bind()
        names = ", ".join(repr(n) for n in engine.definitions)
        _say(f"serving {names} as worker {engine.worker_id!r} (SIGTERM or Ctrl-C stops, "
             f"with {grace:g} s of grace)")
        await engine.serve(poll_interval=poll, stop=stop, grace=grace, retention=retention)


def _finite(_ctx: click.Context, param: click.Parameter, value: float) -> float:
    """Refuse NaN, which every range check lets through (a usage error, exit 2)."""
    if math.isnan(value):
        raise click.BadParameter(f"{value!r} is not a number of seconds", param=param)
    return value


def _finite_or_none(
    ctx: click.Context, param: click.Parameter, value: float | None
) -> float | None:
    """`_finite`, letting None (not given) through."""
    return None if value is None else _finite(ctx, param, value)


@click.command("serve")
@click.argument("target", metavar="MODULE:ATTR")
@click.option("--grace", type=click.FloatRange(min=0, max=1e9), default=8.0,
              show_default=True, callback=_finite,
              help="Seconds the running steps may go on after SIGTERM or SIGINT before "
                   "they are interrupted and their leases handed back (keep it below the "
                   "orchestrator's kill timeout: Docker's is 10 s).")
@click.option("--poll", type=click.FloatRange(min=0, min_open=True, max=1e9), default=1.0,
              show_default=True, callback=_finite,
              help="Seconds between two reads of the ready work.")
@click.option("--retention", type=click.FloatRange(min=0, min_open=True, max=1e12),
              default=None, callback=_finite_or_none, metavar="SECONDS",
              help="Sweep the store as it serves: remove the completed and cancelled "
                   "workflows that ended more than SECONDS ago (engine.serve(retention=)); "
                   "default: never.")
def serve(target: str, grace: float, poll: float, retention: float | None) -> None:
    """Serve the WorkflowEngine that MODULE:ATTR makes, until SIGTERM or SIGINT.

    ATTR is a WorkflowEngine, a callable returning one, or an async context manager yielding
    one (which then owns its queue and store). On the first SIGTERM or SIGINT the worker
    takes no more work (not even the next step of a run), says which steps are still
    running, lets them finish for up to --grace seconds, hands back the leases of what is
    left and exits 0; a second signal ends it at once (exit 128 + the signal's number).
    """
    try:
        value = load(target)
    except Refused as exc:
        _say(str(exc))
        sys.exit(1)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LiteralFormatter("agentq: %(message)s"))
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("agentq")
    logger.addHandler(handler)
    stopper = Stopper()
    stopper.install()
    try:
        asyncio.run(_serve(value, target, stopper, poll, grace, retention))
    except Refused as exc:  # before AgentqError: a refusal is said as it is
        _say(str(exc))
        sys.exit(1)
    except (AgentqError, OSError) as exc:
        _say(f"serving {target} failed: {type(exc).__name__}: {exc}")
        sys.exit(1)
    finally:
        stopper.restore()
        logger.removeHandler(handler)
