"""`Server`: the loop of `WorkflowEngine.serve`, which runs ready work of registered definitions.

Each turn of the loop:

0. fires the due ticks of the stored schedules of the registered definitions
   (`agentq.workflows.ticks.Ticker`; each tick's instance is started by exactly one serving
   engine), and notes the earliest next tick, so that step 5 waits no longer than until then;
1. (when it has a free permit) takes back at once the live leases of dead sibling
   processes on its host, as `run` and
   `recover` do (`DurableStore.live_leases` of the host's worker ids, then
   ``workers.take_back_gone``: a default worker id of this host whose pid no longer exists),
   so their steps are ready in this very poll instead of after their leases expire;
2. counts the runs it may start now: the permits of the engine's lane, less the runs in
   progress in this engine that are not waiting on the clock (a retry time, another
   worker's lease) and less what other jobs use of the lane. A serving engine claims only
   what it can start at once, so it never holds leases on steps that sit in its queue while
   another engine is idle;
3. reads `DurableStore.ready_workflows` for that many workflows of the registered
   definitions, started with their step names (one small indexed query: instances of
   other definitions, or of a registered name with other steps, are never read, so however
   many of them wait they never hide the work this engine can run): open instances whose
   current step is pending
   (and its retry time, if any, has come), leased under an expired lease, or waiting on a
   wait whose deadline has passed; or whose own deadline has passed (those are failed
   with ``WorkflowTimedOut`` at once, `DurableStore.time_out_workflow`, without a run);
4. claims each one's current step (a compare-and-swap: of several serving engines exactly
   one wins; an expired lease is taken over and `WorkerRecovered` recorded, as `recover`
   does) and starts the instance's run in this engine with that claim (`Driver.offer`); a
   timed-out wait needs no claim: the run times it out. The run then goes on step after
   step as any run does;
5. starts delivering the due end-of-run hooks it holds (``on_poll``, `agentq.workflows.hooks`);
6. waits for the poll interval on the engine's clock, or less: until the next tick of a
   schedule (step 0), until a run it started
   ends (a permit is free again), or until the store's `WorkNotifier.wait_for_work` says
   new work arrived (a store that implements it: PostgreSQL's ``LISTEN/NOTIFY``). Such a
   store is made to listen (``wait_for_work(0)``) before the first poll, so that work
   committed while that poll reads is announced to the first wait, not lost.

With a retention (``serve(retention=seconds)``), each turn also starts a sweep of the ended
workflows when one is due (`agentq.workflows.retention.Retention`: in a task beside the loop,
cancelled when serving ends).

Until cancelled, or until the `stop` event given to `serve` is set: it then takes no more
work (the driver is halted: no run claims another step, each parks), logs in one line
which steps are still running, and waits up to `grace` seconds (on the engine's clock) for
them to end; the engine's ``serve`` then closes the engine (interrupting what is left,
handing its leases back) and reopens it.

A store failure while reading or claiming is logged and tried again at the next poll. A
closed queue ends the loop (`QueueClosed`): nothing claimed could run; so does a closed store
(`StoreClosedError`): nothing could be read or claimed again. An
instance whose registered definition has other step names than the stored ones is not
listed; one whose definition was registered again with other steps after the read is
skipped (logged once). Private to `agentq.workflows.engine`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agentq.errors import AgentqError, QueueClosed, StoreClosedError, WorkflowMismatchError
from agentq.store import Claimed, ReadyWork, StepState, WorkNotifier
from agentq.workflows.attempts import claim
from agentq.workflows.driver import Driver
from agentq.workflows.registry import Registry, instance_of
from agentq.workflows.retention import Retention
from agentq.workflows.runs import Runs
from agentq.workflows.ticks import Ticker
from agentq.workflows.workers import LOGGER, host_prefix, take_back_gone

__all__ = ["Server"]


class Server:
    """The serve loop of one engine, over its driver, registry and runs."""

    def __init__(self, driver: Driver, registry: Registry, runs: Runs, ticker: Ticker) -> None:
        self._driver = driver
        self._ticker = ticker
        self._registry = registry
        self._runs = runs
        self._refused: set[str] = set()  # instances whose steps differ: logged once
        self._ended = asyncio.Event()
        self.serving = False
        self.on_poll: Callable[[], None] | None = None
        """Called at each poll (the engine starts delivering due end-of-run hooks)."""

    def free(self) -> int:
        """How many more runs this engine may start now (permits of its lane not in use)."""
        lane = self._driver.queue.stats()[self._driver.priority]
        active = len(self._runs.in_progress()) - self._driver.pausing
        return lane.permits - max(active, lane.running + lane.queued)

    async def serve(
        self,
        poll_interval: float,
        stop: asyncio.Event | None = None,
        grace: float = 0.0,
        retention: float | None = None,
    ) -> None:
        """Take up ready work (and sweep, given a `retention` in seconds), then wait; until
        cancelled, or until `stop` is set: then take no more work and let the runs in
        progress go on for up to `grace` seconds."""
        self.serving = True
        stop = asyncio.Event() if stop is None else stop
        driver = self._driver
        sweeps = None if retention is None else Retention(driver.store, driver.clock, retention)
        try:
            await self._listen()  # before the first poll: no news falls between the two
            while not stop.is_set():
                if self._driver.queue.closed:  # nothing could run: claims would be lost
                    raise QueueClosed("the engine's queue is closed: serve() stops")
                wake = None  # the next tick of a schedule, if it comes before the next poll
                try:
                    wake = (await self._ticker.fire_due())[1]
                except AgentqError as exc:  # the store failed: said, and tried again
                    _stop_if_closed(exc)
                    LOGGER.warning("serve(): reading the schedules failed: %s", exc)
                try:
                    await self.take_up()
                    if self.on_poll is not None:
                        self.on_poll()
                except AgentqError as exc:  # the store failed: said, and tried again
                    _stop_if_closed(exc)
                    LOGGER.warning("serve(): reading or claiming ready work failed: %s", exc)
                if sweeps is not None:
                    sweeps.poll()
                await self._idle(poll_interval, stop, wake)
            await self._wind_down(grace)
        finally:
            self.serving = False
            if sweeps is not None:
                await sweeps.stop()

    async def _wind_down(self, grace: float) -> None:
        """Halt the runs (no more steps claimed), say which steps are still running, then
        wait up to `grace` seconds (engine clock) for them to end; the caller closes the
        engine (interrupting what is left, handing its leases back)."""
        driver, clock = self._driver, self._driver.clock
        driver.halted = True
        steps = driver.attempting()
        if not steps:
            LOGGER.warning("serve() stops: taking no more work; no step in progress")
            return
        LOGGER.warning(
            "serve() stops: taking no more work; waiting up to %g s for %s in progress (of "
            "%s), then interrupting what is left and handing its leases back",
            grace, _count(len(steps), "step"), _listed(steps),
        )
        deadline = clock.time() + grace
        while driver.attempting() and (remaining := deadline - clock.time()) > 0:
            driver.parked.clear()
            waits = {
                asyncio.ensure_future(clock.sleep(remaining)),
                asyncio.ensure_future(driver.parked.wait()),
            }
            try:  # an attempt ended: its run parks, or ends
                await asyncio.wait(
                    {*waits, *self._runs.in_progress()}, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for waiting in waits:
                    waiting.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
        left = driver.attempting()
        if left:
            LOGGER.warning(
                "serve() stops: the %g s grace is over; interrupting %s (of %s): their leases "
                "are handed back once their bodies stop",
                grace, _count(len(left), "step"), _listed(left),
            )

    def reopen(self) -> None:
        """The engine closed after a graceful stop: its runs may claim steps again."""
        self._driver.halted = False

    async def take_up(self) -> int:
        """Claim and start what is ready and fits in the free permits; how many started."""
        served = self._registry.served
        free = self.free()
        if not served or free <= 0:
            return 0
        store, clock = self._driver.store, self._driver.clock
        for lease in await store.live_leases(clock.time(), host_prefix()):
            await take_back_gone(store, lease, clock.time())  # a dead sibling's: re-admitted
        # Its own runs are listed too, then skipped: read past them; and read twice what
        # fits, since another serving engine may win some of the claims.
        limit = 2 * free + len(self._runs.in_progress())
        started = 0
        for work in await store.ready_workflows(clock.time(), served, limit):
            if started == free:
                break
            if await self._take(work):
                started += 1
        return started

    async def _take(self, work: ReadyWork) -> bool:
        row = work.workflow
        wid = row.workflow_id
        now = self._driver.clock.time()
        if row.deadline is not None and row.deadline <= now:  # too late: it fails, no run
            if await self._driver.store.time_out_workflow(wid, now):
                self._driver.interrupt(wid)  # a run of it here stops (others: at renewal)
            return False
        definition = self._registry.definition(row.definition or "")
        if definition is None or self._runs.busy(wid):
            return False
        try:
            wf = instance_of(definition, row)
        except WorkflowMismatchError as exc:
            if wid not in self._refused:
                self._refused.add(wid)
                LOGGER.warning("serve(): skipping workflow %r: %s", wid, exc)
            return False
        if work.state is not StepState.WAITING:  # a timed-out wait: the run times it out
            driver = self._driver
            claimed = await claim(
                driver.store,
                driver.clock,
                wid,
                work.step_index,
                driver.worker_id,
                driver.lease_ttl,
                max_recoveries=wf.steps[work.step_index].max_recoveries,
            )
            if not isinstance(claimed, Claimed):  # another engine was first, or it moved on
                return False
            driver.offer(claimed)  # a run of it in progress meanwhile uses it too
        task = self._runs.start_soon(wf)
        if task is not None:
            task.add_done_callback(lambda _: self._ended.set())
        return True

    async def _listen(self) -> None:
        """Make a `WorkNotifier` store listen now (a wait of 0 s), so that work committed
        while the first poll reads is announced to the first wait instead of being lost."""
        store = self._driver.store
        if isinstance(store, WorkNotifier):
            try:
                await store.wait_for_work(0)
            except AgentqError as exc:  # said; each wait tries again
                _stop_if_closed(exc)
                LOGGER.warning("serve(): wait_for_work failed: %s", exc)

    async def _idle(self, seconds: float, stop: asyncio.Event, wake: float | None) -> None:
        """Wait `seconds` on the clock, or until `wake` (Unix seconds, a schedule's next tick;
        None: none), a run ends, the store knows of new work or `stop` is set."""
        clock, store = self._driver.clock, self._driver.store
        if self._ended.is_set():  # a permit is free again: look at once
            self._ended.clear()
            await clock.sleep(0)
            return
        waits: set[asyncio.Future[Any]] = {
            asyncio.ensure_future(clock.sleep(seconds)),
            asyncio.ensure_future(self._ended.wait()),
            asyncio.ensure_future(stop.wait()),
        }
        if wake is not None:
            waits.add(asyncio.ensure_future(self._until(wake)))
        notified = None
        if isinstance(store, WorkNotifier):
            notified = asyncio.ensure_future(store.wait_for_work(seconds))
            waits.add(notified)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        self._ended.clear()
        failed = None if notified is None or notified.cancelled() else notified.exception()
        if failed is not None:
            if isinstance(failed, AgentqError):
                _stop_if_closed(failed)
            # A broken hook must not make the loop spin: poll on the clock this time.
            LOGGER.warning("serve(): wait_for_work failed: %s", failed)
            polled = clock.time() + seconds
            await self._until(polled if wake is None else min(wake, polled))

    async def _until(self, when: float) -> None:
        """Sleep on the clock until `when` (Unix seconds), reading the time only as the sleep
        starts (a clock moved meanwhile is not overslept)."""
        clock = self._driver.clock
        await clock.sleep(max(0.0, when - clock.time()))


def _stop_if_closed(exc: AgentqError) -> None:
    """Raise `StoreClosedError` (from `exc`) if `exc` says the store is closed: not a
    transient failure, so the loop ends (as a closed queue ends it) instead of retrying."""
    if isinstance(exc, StoreClosedError):
        raise StoreClosedError(f"the engine's store is closed ({exc}): serve() stops") from exc


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _listed(ids: list[str], most: int = 5) -> str:
    """Workflow ids for one line: the first `most`, then how many more."""
    shown = ", ".join(repr(i) for i in ids[:most])
    return shown if len(ids) <= most else f"{shown} and {len(ids) - most} more"
