"""`Live`: the refresher every agentq widget tree runs on the kernel's event loop.

One task per widget tree calls `Live.refresh` every `interval` seconds of its clock. A refresh
reads only what changed and assigns ``.value`` of existing widgets only when the rendered HTML
differs, so an idle dashboard costs one ``last_seq()`` per tick and sends nothing to the page.
An error ends the task, shows a red banner in the widget, and is re-raised by `Live.stop`.

A refresher belongs to the notebook cell that started it (`agentq.widgets.live.cells`): running that
cell again cancels it, so re-running a cell never leaves an orphan refresher behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any, ClassVar, Self

from agentq.clock import Clock, SystemClock
from agentq.extras import require
from agentq.markup import check_count, error_html, esc
from agentq.sync import CLICK_TASK_PREFIX
from agentq.widgets.live.cells import CellOwner, forget_outputs

__all__ = [
    "DEFAULT_INTERVAL",
    "LIVE_TIMES_EVERY",
    "Live",
    "Spawner",
    "check_count",
    "check_interval",
]

DEFAULT_INTERVAL = 0.25
"""Seconds between two refreshes (4 Hz): live for a person, light for the browser."""

LIVE_TIMES_EVERY = 1.0
"""Seconds (of the widget's clock) between two redraws of live times on idle ticks: running
durations, lease expiry, deadlines, the timeline's "now" line and open bars are redrawn from
the last rows read and the clock, with no store read (review 14 #2)."""


def widgets() -> Any:
    """Return the ipywidgets module, or raise `MissingExtraError` naming the extra."""
    return require("ipywidgets", "notebook")


def set_value(widget: Any, value: str) -> bool:
    """Assign ``widget.value`` only when it changes (no message to the page otherwise)."""
    if widget.value == value:
        return False
    widget.value = value
    return True


def close_tree(root: Any) -> int:
    """Close `root` and every widget it holds (children, layout, style, ...); return how many.

    ``widget.close()`` drops the widget from ipywidgets' registry of live models (which
    otherwise holds it, its callbacks and whatever they reach, for the kernel's lifetime) and
    removes its views from the page. Idempotent.
    """
    base = widgets().Widget
    stack, seen, closed = [root], set(), 0
    while stack:
        w = stack.pop()
        if not isinstance(w, base) or id(w) in seen:
            continue
        seen.add(id(w))
        for name in w.keys:
            value = getattr(w, name, None)
            if isinstance(value, base):
                stack.append(value)
            elif isinstance(value, list | tuple):
                stack.extend(v for v in value if isinstance(v, base))
        if w.comm is not None:
            closed += 1
        w.close()
    return closed


class Spawner:
    """Runs the work of a click as a task on the kernel's loop, whoever calls the callback.

    ipykernel 7 may call a widget's callback on another thread and event loop than the one
    that runs the cells (seen in JupyterLab: a task created there ran `engine.retry` on the
    wrong loop and the queue raised `WrongLoopError`). So the loop is the one the widget was
    built on (or first refreshed on), and a task is created there, thread-safely when the
    callback runs elsewhere.
    """

    def __init__(self) -> None:
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self.tasks: set[asyncio.Task[None]] = set()

    def bind(self) -> None:
        """Remember the running loop, if none was known (call from the refresher)."""
        if self.loop is None:
            with contextlib.suppress(RuntimeError):
                self.loop = asyncio.get_running_loop()

    def spawn(self, make: Any, name: str) -> None:
        """Start ``make()`` (a coroutine function) as a task on the widget's loop.

        Raises:
            RuntimeError: No loop is known and none runs in this thread.
        """
        loop = self.loop or asyncio.get_running_loop()
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None

        def start() -> None:
            task = loop.create_task(make(), name=name)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        if current is loop:
            start()
        else:
            loop.call_soon_threadsafe(start)

    async def join(self) -> None:
        """Wait for the tasks started so far (their errors are the callers' to show)."""
        while self.tasks:
            await asyncio.gather(*tuple(self.tasks), return_exceptions=True)


class Confirmation:
    """A question with **Yes** / **No** buttons, hidden until asked (the actions bar and the
    approval panel's bulk bar ask before they act).

    Attributes:
        question: HTML: what Yes will do.
        yes: The Yes button (its label is set by `show`).
        no: The No button.
        box: The container (hidden while nothing is asked).
    """

    def __init__(self, w: Any, *, stacked: bool = False) -> None:
        wide = w.Layout(width="auto")
        self.question = w.HTML("")
        self.yes = w.Button(description="Yes", button_style="danger", layout=wide)
        self.no = w.Button(description="No", layout=wide)
        buttons = [self.yes, self.no]
        self.box = (w.VBox([self.question, w.HBox(buttons)]) if stacked
                    else w.HBox([self.question, *buttons]))
        self.box.layout.display = "none"

    def show(self, html: str, yes: str, style: str = "danger") -> None:
        """Ask: show `html` (already escaped) and a Yes button labelled `yes`."""
        self.question.value = html
        self.yes.description = yes
        self.yes.button_style = style
        self.box.layout.display = None

    def hide(self) -> None:
        """Hide the question and its buttons."""
        self.box.layout.display = "none"


def check_interval(interval: object) -> float:
    """Return `interval` as a float of seconds.

    Raises:
        ValueError: `interval` is not a positive finite number (a bool, NaN, 0 or less).
    """
    if (
        isinstance(interval, bool)
        or not isinstance(interval, int | float)
        or not math.isfinite(interval)
        or interval <= 0
    ):
        raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
    return float(interval)


class Live:
    """Base of the live widgets: a root ipywidget, a refresher task, start and stop.

    Subclasses build their widgets once in ``__init__`` and implement `refresh`.

    Args:
        interval: Seconds between refreshes (> 0); default 0.25 (4 Hz).
        clock: Time source for the interval and for "now" in the views; default the system
            clock (tests pass a `FakeClock`).

    Raises:
        ValueError: `interval` is not a positive finite number.
    """

    widget: Any
    """The root ipywidget (what a notebook cell displays)."""

    takes_clicks: ClassVar[bool] = False
    """Whether the widget has buttons whose work runs on the kernel's loop; its refresher
    task is then named with `agentq.sync.CLICK_TASK_PREFIX`, so that `agentq.sync.run`
    refuses to block the cell while it runs."""

    def __init__(self, *, interval: float = DEFAULT_INTERVAL, clock: Clock | None = None) -> None:
        self.interval = check_interval(interval)
        self.clock: Clock = clock or SystemClock()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._banner = widgets().HTML("")
        self._banner.layout.display = "none"
        self._cell = CellOwner(self._replaced)
        self.replaced = False
        """True once the cell that started this widget ran again (its refresher is cancelled)."""
        self._times_drawn = -math.inf  # clock time of the last redraw of live times

    def _times_due(self, *, drawn: bool = False) -> bool:
        """Whether live times are due for a redraw (`LIVE_TIMES_EVERY`); `drawn=True` records
        that the views were just drawn (from fresh rows) and returns False."""
        now = self.clock.time()
        if drawn or now - self._times_drawn >= LIVE_TIMES_EVERY:
            self._times_drawn = now
            return not drawn
        return False

    async def refresh(self) -> bool:
        """Bring every view up to date once; return whether anything shown changed.

        Reads only what changed since the previous refresh. Safe to await directly (tests,
        or a cell that wants the latest state right now) while the refresher runs.

        Raises:
            StoreError: The store failed.
        """
        raise NotImplementedError

    @property
    def running(self) -> bool:
        """Whether the refresher task is alive."""
        return self._task is not None and not self._task.done()

    @property
    def error(self) -> BaseException | None:
        """The error that ended the refresher, if any (`stop` re-raises it)."""
        return self._error

    def start(self) -> Self:
        """Start the refresher task on the running loop; return self (so a cell displays it).

        Idempotent while running. In Jupyter, call it in a cell: the kernel's loop is running.
        The refresher belongs to that cell: when the cell runs again (JupyterLab, Notebook 7
        and VS Code send cell ids), the refresher is cancelled before the new run starts, so a
        re-run leaves no orphan task (`replaced` becomes True; see `agentq.widgets.live.cells`).

        Raises:
            RuntimeError: No event loop is running in this thread (outside Jupyter: call it
                from async code, or use `agentq.sync.run`).
        """
        if self.running:
            return self
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                f"{type(self).__name__}.start() needs a running event loop: call it in a "
                "Jupyter cell or from async code"
            ) from None
        self._error = None
        self.replaced = False
        self._banner.layout.display = "none"
        prefix = CLICK_TASK_PREFIX if self.takes_clicks else "agentq."
        self._task = loop.create_task(self._loop(), name=f"{prefix}{type(self).__name__}")
        self._cell.attach()
        return self

    def _replaced(self) -> None:
        """The cell that started the refresher runs again: cancel it (nothing to await)."""
        task, self._task = self._task, None
        self.replaced = True
        if task is not None and not task.done():
            task.cancel()
        self._banner.value = (
            '<div data-agentq="replaced" style="color:#6b7280;font-size:12px">'
            f"{esc(type(self).__name__)} stopped: its cell ran again</div>"
        )
        self._banner.layout.display = None
        # The cell's output is cleared by its new run: free the widgets (see `close`).
        self.close()

    def close(self) -> None:
        """Close every ipywidget of this view (idempotent); `stop` calls it.

        ipywidgets keeps each widget in a registry until it is closed, and the buttons'
        callbacks reach this object, hence its engine and store: without closing, every
        re-run of a setup cell would keep the old store (its connection and thread) alive for
        the kernel's lifetime (review 14 #5). After `close`, the views are gone from the page
        and the object can be garbage-collected once the notebook drops its name: IPython's
        output history (``Out[N]``, ``_N``, ``_``) forgets it and its root widget too, when a
        cell ended with it (`forget_outputs`; issue 22 fault 3).
        """
        close_tree(self._banner)
        root = getattr(self, "widget", None)
        if root is not None:
            close_tree(root)
        forget_outputs(self, root)

    async def stop(self, *, close: bool = True) -> None:
        """Stop the refresher, refresh one last time, and re-raise the refresher's error.

        End each notebook with ``await dashboard.stop()``: a background task that fails
        after its cell ended is otherwise lost silently. Without an error, the views are
        brought up to date one last time and work the widgets started themselves
        (approvals) is awaited. Then the widgets are closed (`close`), so nothing keeps the
        engine and store alive; pass ``close=False`` to keep the final state on the page
        (and in a saved notebook) at the price of keeping them until the kernel ends.

        Args:
            close: Close the widgets at the end (also when an error is re-raised).

        Raises:
            Exception: Whatever ended the refresher (its traceback included), or what the
                last refresh raises.
        """
        self._cell.detach()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # stop() itself was cancelled
        try:
            await self._drain()
            if self._error is not None:
                raise self._error
            await self.refresh()
        finally:
            if close:
                self.close()

    async def _drain(self) -> None:
        """Wait for background work started by the widgets (overridden by the approval panel)."""

    async def _loop(self) -> None:
        try:
            while True:
                await self.refresh()
                await self.clock.sleep(self.interval)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException, title: str = "refresher stopped") -> None:
        if self._error is None:
            self._error = exc
        self._banner.value = error_html(exc, title)
        self._banner.layout.display = None

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {state}, interval={self.interval} s>"
