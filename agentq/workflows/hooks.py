"""`EndHooks`: an engine's end-of-run hooks and their delivery from the store's outbox.

The transaction that ends a workflow writes one outbox row (`agentq.store.HookRow`), so no
crash between the end and the hook can lose it. An engine delivers the rows it holds a hook
for: those of the definitions it registered with ``WorkflowDef(on_end=)``, and, once it has
hooks of its own (``engine.on_end``), those of every definition it registered and of plain
workflows. Delivering a row is: claim it (`DurableStore.claim_hooks`: a lease of the
engine's ``lease_ttl``, so that two engines do not deliver it at once, renewed every
``lease_ttl / 3`` seconds (`DurableStore.renew_hook`, one `Renewals` timer for all the rows
of this engine's claims) until its delivery ends), read the `RunResult` of the end the row
stands for (`end_result`: as of that end, even if the workflow was retried since), call the
definition's hook then the engine's hooks, in order; then mark it delivered, or, if a hook
raised, due again after the engine's hook backoff (the n-th failed delivery waits
``backoff.delay(n)``), when this engine's timer (or any engine's next delivery) tries again.
A hook may run more than once (a crash after it returned, an engine closed while it ran, a
claim lost because its renewals failed or came too late): hooks must tolerate a repeat.

Deliveries start when a run of this engine ends, when ``run`` finds a workflow ended, after
``cancel`` and a deadline's time-out, at each poll of ``serve``, and at the retry timers.
Private to `agentq.workflows.engine`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from agentq.errors import AgentqError
from agentq.literal import visible
from agentq.retry import Backoff
from agentq.store import MAX_HOOK_ERROR_CHARS, HookRow
from agentq.workflows.deadlines import Deadlines
from agentq.workflows.driver import Driver
from agentq.workflows.model import RunResult
from agentq.workflows.registry import Registry
from agentq.workflows.renewals import Renewals
from agentq.workflows.results import end_result
from agentq.workflows.waits import committed
from agentq.workflows.workers import LOGGER

__all__ = ["DEFAULT_HOOK_BACKOFF", "EndHook", "EndHooks"]

EndHook = Callable[[RunResult], Awaitable[Any] | Any]
"""An end-of-run hook: called with the final `RunResult`; sync, or async (awaited)."""

DEFAULT_HOOK_BACKOFF = Backoff.exponential(1.0, 300.0)
"""The wait before delivering again after a hook raised: 1 s, doubling, at most 5 minutes."""

BATCH = 16
"""How many rows one claim takes."""


class _Claim:
    """This engine's claim on one outbox row, renewed (through `Renewals`) until `end`.

    Args:
        driver: The engine's driver (store, clock, worker id, lease_ttl).
        renewals: The renewal times of the claims of this engine's `EndHooks`.
        tasks: The set of renewals in progress that `EndHooks.stop` waits for.
        row: The claimed row.
    """

    def __init__(
        self, driver: Driver, renewals: Renewals, tasks: set[asyncio.Task[None]], row: HookRow
    ) -> None:
        self._driver, self._renewals, self._tasks = driver, renewals, tasks
        self.row = row
        self._over = False
        self.settled = False
        """Its outcome is written (delivered, or due again): nothing to hand back."""
        renewals.add(self)

    def renew_due(self) -> None:
        """Start renewing the claim (`Renewable`); it is added again once renewed."""
        task = asyncio.get_running_loop().create_task(
            self._renew(), name=f"agentq.on_end.renew:{self.row.workflow_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _renew(self) -> None:
        driver = self._driver
        try:
            held = await driver.store.renew_hook(
                self.row.seq, driver.worker_id, driver.clock.time(), driver.lease_ttl
            )
        except AgentqError as exc:  # said; tried again at the next renewal time
            LOGGER.warning("on_end: renewing the claim of workflow %r's end failed: %s",
                           self.row.workflow_id, exc)
            held = True
        if self._over:
            return
        if held:
            self._renewals.add(self)
            return
        why = await self._lost()
        if not self._over:  # else this engine's own delivery ended meanwhile
            LOGGER.warning("on_end: workflow %r's end: %s", self.row.workflow_id, why)

    async def _lost(self) -> str:
        """Why the claim could not be renewed, from the row as it is now."""
        driver, seq = self._driver, self.row.seq
        try:
            rows = await driver.store.hooks(self.row.workflow_id)
        except AgentqError:
            rows = None
        if rows is None:  # the store failed: a wording true in every case
            return (
                "its claim could not be renewed while its delivery was in progress (expired, "
                "or the end delivered or claimed elsewhere): its hooks may run more than once"
            )
        row = next((r for r in rows if r.seq == seq), None)
        if row is None:
            return "it was removed from the store (swept) while its delivery was in progress"
        by = "this engine" if row.worker_id == driver.worker_id else f"engine {row.worker_id!r}"
        if row.delivered:
            return (
                f"it was marked delivered by {by} while this delivery was in progress (the "
                "claim had expired and was taken again): its hooks ran more than once"
            )
        if row.worker_id != driver.worker_id:
            return (
                f"the claim expired while its delivery was in progress and {by} claimed it "
                "since: it calls the hooks too"
            )
        if row.lease_expires_at is None:
            return "its claim was dropped while its delivery was in progress (due again)"
        return (
            "the claim expired while its delivery was in progress (taken again since by this "
            "engine, or free to take): its hooks may run more than once"
        )

    def end(self) -> None:
        """The delivery is over (or about to write its outcome): renew no more. Idempotent."""
        self._over = True
        self._renewals.discard(self)


class EndHooks:
    """The end-of-run hooks of one engine and their delivery (see the module docstring).

    Args:
        driver: The engine's driver (store, clock, worker id, lease_ttl).
        registry: The engine's registry (the definitions and their ``on_end``).
        backoff: The wait after a failed delivery.
    """

    def __init__(self, driver: Driver, registry: Registry, backoff: Backoff) -> None:
        if not isinstance(backoff, Backoff):
            raise TypeError(f"hook_backoff must be a Backoff, got {backoff!r:.80}")
        self._driver = driver
        self._registry = registry
        self.backoff = backoff
        self._own: list[EndHook] = []
        self._timers = Deadlines(lambda: driver.clock, self._retry)
        self._tasks: set[asyncio.Task[int]] = set()
        self._recording: set[asyncio.Task[Any] | None] = set()
        self._sweep: asyncio.Task[int] | None = None
        self._renewals = Renewals(driver.clock, driver.lease_ttl)
        self._renewing: set[asyncio.Task[None]] = set()
        self._stopping = False

    def add(self, fn: EndHook) -> None:
        """Add an engine-wide hook (`WorkflowEngine.on_end`)."""
        if not callable(fn):
            raise TypeError(f"on_end expects a callable taking a RunResult, got {fn!r:.80}")
        self._own.append(fn)

    def _claimable(self) -> tuple[list[str], bool]:
        """The definition names whose rows this engine delivers, and whether plain ones."""
        names = self._registry.names if self._own else self._registry.ending
        return list(names), bool(self._own)

    def _hooks_of(self, row: HookRow) -> list[EndHook] | None:
        """The hooks to call for `row`, or None if this engine does not hold them (now)."""
        if row.definition is None:
            return list(self._own) if self._own else None
        definition = self._registry.definition(row.definition)
        if definition is None:
            return None
        first = [definition.on_end] if definition.on_end is not None else []
        return first + self._own if first or self._own else None

    def soon(self, workflow_id: str | None = None) -> None:
        """Deliver the due rows (of `workflow_id` only, if given) in a task of this engine;
        without `workflow_id`, only if no such sweep of every row is in progress already."""
        if self._claimable() == ([], False):
            return
        if workflow_id is None and self._sweep is not None and not self._sweep.done():
            return
        task = asyncio.get_running_loop().create_task(
            self.deliver(workflow_id), name=f"agentq.on_end:{workflow_id or '*'}"
        )
        if workflow_id is None:
            self._sweep = task
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[int]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            LOGGER.warning("on_end: delivering end-of-run hooks failed: %s", task.exception())

    async def deliver(self, workflow_id: str | None = None) -> int:
        """Claim the due rows this engine holds hooks for and deliver them; return how many
        were delivered (their hooks all returned).

        Cancelled (the engine stops), or on a store failure, the rows of its claims not
        delivered (the interrupted one, those waiting for their turn) are handed back
        (`DurableStore.release_hook`): due again at once, for any engine.

        Raises:
            StoreError: The store failed (the rows stay due; a claim not handed back expires).
        """
        names, plain = self._claimable()
        if not names and not plain:
            return 0
        delivered = 0
        while not self._stopping:
            rows = await self._claim(names, plain, workflow_id)
            claims = [_Claim(self._driver, self._renewals, self._renewing, row) for row in rows]
            try:  # the rows waiting for their turn keep their claims too
                for claim in claims:
                    if self._stopping:  # a delivery that was recording when `stop` came
                        break
                    delivered += await self._deliver(claim)
            finally:
                for claim in claims:
                    claim.end()
                await self._hand_back([claim.row for claim in claims if not claim.settled])
            if len(rows) < BATCH:
                break
        return delivered

    async def _claim(self, names: list[str], plain: bool, workflow_id: str | None) -> list[HookRow]:
        """Claim a batch of due rows; cancelled meanwhile, hand back what the claim took
        once its answer arrives (it may have committed), then stop."""
        driver = self._driver
        claiming = committed(driver.store.claim_hooks(  # a cancel waits for the answer
            driver.worker_id, driver.clock.time(), driver.lease_ttl,
            definitions=names, plain=plain, workflow_id=workflow_id, limit=BATCH,
        ))
        try:
            return await claiming
        except asyncio.CancelledError:
            try:
                rows = claiming.result()  # (ended: `committed` let the cancel wait for it)
            except AgentqError:  # the claim failed: nothing was taken
                rows = []
            await self._hand_back(rows)
            raise

    async def _hand_back(self, rows: list[HookRow]) -> None:
        """Release this engine's claims on `rows` (delivery not ended): due again at once; a
        failure is logged (the claims then expire after lease_ttl)."""
        driver = self._driver
        for row in rows:
            try:
                await driver.store.release_hook(row.seq, driver.worker_id, driver.clock.time())
            except AgentqError as exc:  # the store fails: the other claims expire too
                LOGGER.warning(
                    "on_end: handing back the claims of %d end(s) failed (they expire after "
                    "lease_ttl): %s", len(rows), exc,
                )
                return

    async def _deliver(self, claim: _Claim) -> bool:
        store, clock, row = self._driver.store, self._driver.clock, claim.row
        hooks = self._hooks_of(row)
        if hooks is None:  # unregistered since the claim: due again at once, for others
            claim.end()
            await store.retry_hook(
                row.seq, self._driver.worker_id, clock.time(), "no hook here", clock.time()
            )
            claim.settled = True
            return False
        result = await end_result(store, row)  # as of this end, even after a retry
        try:
            for fn in hooks:
                out = fn(result)
                if inspect.isawaitable(out):
                    await out
        except Exception as exc:  # retried after the backoff; said once per failure
            claim.end()
            due = clock.time() + self.backoff.delay(row.attempts)
            error = f"{type(exc).__name__}: {exc}"[:MAX_HOOK_ERROR_CHARS]  # as stored
            LOGGER.warning(
                "on_end: a hook of workflow %r raised (attempt %d), trying again in %g s: %s",
                row.workflow_id, row.attempts, due - clock.time(), visible(error),
            )
            held = await store.retry_hook(row.seq, self._driver.worker_id, due, error, clock.time())
            claim.settled = True
            if held:
                self._timers.set(row.workflow_id, due)
            return False
        # The hooks returned: recorded even if the engine closes meanwhile (`stop` lets this
        # write end), else the next engine would call them again.
        claim.end()
        task = asyncio.current_task()
        self._recording.add(task)
        try:
            await store.finish_hook(row.seq, clock.time())
            claim.settled = True
        finally:
            self._recording.discard(task)
        return True

    async def _retry(self, workflow_id: str) -> None:
        # a task of its own, counted by `settle` (so that a delivery the timer started and
        # whose hooks returned records it before the engine closes); a failure is logged by
        # `_done` and the row stays due: serve, or the next end, retries
        self.soon(workflow_id)

    async def settle(self) -> None:
        """Wait for the deliveries in progress (not the retry timers)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def stop(self) -> None:
        """Cancel the retry timers and the deliveries in progress (the engine closes), and
        wait for them and for the renewals in progress. A row whose hooks all returned is
        recorded as delivered first; the other rows of the claims (the one whose hooks were
        interrupted, those waiting for their turn) are handed back, due again at once for
        any engine (an interrupted hook is called again: at least once). The engine can
        deliver again afterwards."""
        self._stopping = True
        try:
            self._timers.cancel_all()
            tasks = list(self._tasks)
            for task in tasks:
                if task not in self._recording:
                    task.cancel()
            if tasks:
                await asyncio.wait(tasks)
            if self._renewing:
                await asyncio.wait(set(self._renewing))
        finally:
            self._stopping = False
