"""`Registrations`: what a `WorkflowEngine` can run; `start` and `serve` of definitions.

The registration verbs of the engine, kept apart from its run verbs (``engine.py``, which
derives from this class through `Interventions`, ``interventions.py``): ``register`` (a
`WorkflowDef`, by name), ``register_workflow`` (a plain `Workflow`, by id), ``unregister``,
``start`` (store an instance without running it), ``serve`` (run the ready instances of the
registered definitions, ``serving.py``), and the lookup every run verb makes for an id
(``_find``): a registered plain workflow, or a stored instance built from its registered
definition (see ``registry.py``).

Private to `agentq.workflows.engine`; the verbs are documented as `WorkflowEngine`'s.
"""

from __future__ import annotations

import asyncio
import math
from datetime import datetime
from typing import Any

import agentq.tracing as tracing
from agentq.clock import Clock, unix_seconds
from agentq.errors import EngineError, UnknownWorkflowError, WorkflowMismatchError
from agentq.keys import validate_key
from agentq.store import DurableStore, WorkflowRow
from agentq.workflows.model import RunResult, Workflow, WorkflowDef
from agentq.workflows.parking import MAX_WAIT_TIMEOUT
from agentq.workflows.registry import Registry
from agentq.workflows.results import stored_result
from agentq.workflows.retention import check_retention
from agentq.workflows.serving import Server
from agentq.workflows.waits import finish
from agentq.workflows.workers import LOGGER

__all__ = ["Registrations"]


class Registrations:
    """The registered plain workflows and definitions of an engine, and the verbs over them.

    A subclass provides `store` and `clock` (`WorkflowEngine` does).
    """

    def __init__(self) -> None:
        self._registry = Registry()

    @property
    def store(self) -> DurableStore:
        """Where instances are stored (provided by the engine)."""
        raise NotImplementedError

    @property
    def clock(self) -> Clock:
        """The time source (provided by the engine)."""
        raise NotImplementedError

    _server: Server
    """The serve loop (made by the engine, over its driver, registry and runs)."""

    async def close(self) -> None:
        """Interrupt the runs in progress (provided by the engine)."""
        raise NotImplementedError

    def _ended_here(self, workflow_id: str) -> None:
        """A verb of this engine ended `workflow_id`: deliver its end-of-run hooks (provided
        by the engine)."""

    def register(self, definition: WorkflowDef) -> None:
        """Register a `WorkflowDef`: this engine can then start, run, resume, retry and
        recover every stored instance of it, whichever process started it.

        Registering the same name again replaces the definition (a notebook cell run
        again): its new bodies serve the next step of every instance. Stored instances whose
        step names differ from the new definition's are refused when they are run, resumed,
        retried or recovered (`WorkflowMismatchError` naming both lists; nothing stored
        changes). Runs in progress go on with the bodies they started with.

        Raises:
            TypeError: `definition` is not a `WorkflowDef`.
        """
        self._registry.define(definition)

    def register_workflow(self, workflow: Workflow) -> None:
        """Make a plain `workflow`'s step bodies known to this engine (needed by `resume`,
        `recover`); the workflow is tied to this engine (see `register` for definitions).

        Registering the same id again replaces the bodies (a notebook cell run twice), as
        long as the step names and the input are the same.

        Raises:
            TypeError: `workflow` is not a `Workflow`.
            WorkflowMismatchError: The id is registered with different step names, another
                input or another definition (nothing is replaced).
        """
        self._registry.add(workflow)

    def unregister(self, name: str) -> bool:
        """Forget the definition registered under `name`, or the plain workflow with id `name`
        (both, if both are registered under that string).

        The store keeps every record; only step bodies are forgotten, so `resume`, `retry`
        and `recover` can no longer continue those workflows here until they are registered
        again. Runs in progress go on (they hold their bodies). Registrations of plain
        workflows whose run ended completed, failed or cancelled are dropped without this
        call.

        Args:
            name: A definition's name or a plain workflow's id.

        Returns:
            True if something was registered under `name`, else False.

        Raises:
            TypeError: `name` is not a str.
        """
        if not isinstance(name, str):
            raise TypeError(
                f"unregister() expects a definition name or a workflow id (str), got {name!r}"
            )
        plain = self._registry.remove(name)
        return self._registry.undefine(name) or plain

    def registered(self, workflow_id: str) -> Workflow | None:
        """Return the plain workflow registered with this id, or None."""
        return self._registry.get(workflow_id)

    def definition(self, name: str) -> WorkflowDef | None:
        """Return the definition registered under `name`, or None."""
        return self._registry.definition(name)

    @property
    def workflow_ids(self) -> tuple[str, ...]:
        """Ids of the registered plain workflows, in registration order."""
        return self._registry.ids

    @property
    def definitions(self) -> tuple[str, ...]:
        """Names of the registered definitions, in registration order."""
        return self._registry.names

    async def start(
        self,
        definition: WorkflowDef | str,
        workflow_id: str,
        input: Any = None,
        *,
        run_at: float | datetime | None = None,
        deadline: float | datetime | None = None,
    ) -> bool:
        """Store a new instance of a definition, without running it.

        `WorkflowStarted` records the definition's name, the step names and the input; any
        engine that registered the definition (this one, or one in another process) then
        runs it by id: ``run(workflow_id)``, `recover`. Idempotent: an id already stored
        from the same definition with the same steps and input is left as it is.

        Args:
            definition: A `WorkflowDef` (registered on the way, replacing one registered
                under its name, as `register` does: what a notebook cell expects), or the
                name of one registered with this engine.
            workflow_id: The instance's id (a key: non-empty, at most 1024 bytes of UTF-8).
            input: The instance's input (JSON), given to every step as ``ctx.input``.
            run_at: When the instance may start (Unix seconds or an aware `datetime`), or
                None for now. Stored with it: no engine claims its first step before then
                (`serve` takes it up at that time, `recover` starts a run that sleeps until
                then), and ``run(workflow_id)`` called earlier waits on the engine's clock
                until then, as during a retry's backoff, and then runs it.
            deadline: When the instance fails with the reason ``WorkflowTimedOut`` if it has
                not ended (Unix seconds or an aware `datetime`), or None. With a definition
                `timeout` too, the earlier of the two (start + timeout) is stored.

        Returns:
            True if this call stored the instance; False if it was stored already (nothing
            is appended then).

        Raises:
            UnknownWorkflowError: A name that no registered definition has.
            WorkflowMismatchError: The id is stored (or registered as a plain workflow) with
                another definition, other steps or another input; nothing is stored.
            TypeError: `definition` is neither a `WorkflowDef` nor a str.
            InvalidKeyError: A bad `workflow_id`.
            PayloadError: `input` is not JSON or too large; nothing is stored.
            ValueError: `run_at` or `deadline` is a naive `datetime` or not finite, or it
                (or the definition's timeout) ends more than 10 years after now
                (``MAX_WAIT_TIMEOUT``, as ``ctx.sleep``).

        An instance stored already keeps its own `run_at` and deadline.

        Example:
            >>> await engine.start(order, "order-42", {"sku": "A1"})
            True
            >>> result = await engine.run("order-42")
        """
        if isinstance(definition, WorkflowDef):
            self._registry.define(definition)
        elif isinstance(definition, str):
            found = self._registry.definition(definition)
            if found is None:
                raise UnknownWorkflowError(
                    f"no definition named {definition!r} is registered with this engine "
                    f"(registered: {list(self._registry.names)}); register it first"
                )
            definition = found
        else:
            raise TypeError(f"start() expects a WorkflowDef or its name, got {definition!r:.80}")
        wf = definition.workflow(workflow_id, input)
        plain = self._registry.get(wf.id)
        if plain is not None and plain.definition != wf.definition:
            raise WorkflowMismatchError(
                f"workflow {wf.id!r} is registered with this engine as a plain workflow, not "
                f"from definition {definition.name!r}; use a new id"
            )
        now = self.clock.time()
        extra: dict[str, Any] = {}
        if run_at is not None:
            extra["run_at"] = _near(unix_seconds(run_at, "run_at"), now, "run_at")
        ends = (
            [] if deadline is None else [_near(unix_seconds(deadline, "deadline"), now, "deadline")]
        )
        if definition.timeout is not None:
            ends.append(_near(now + definition.timeout, now, f"{definition.name!r} timeout"))
        if ends:
            extra["deadline"] = min(ends)
        trace = tracing.carrier()  # the caller's span: the runs that serve it link to it
        if trace is not None:
            extra["trace"] = trace
        _, created = await self.store.start_workflow(
            wf.id, wf.step_names, wf.input, now, definition=definition.name, **extra
        )
        return created

    async def _find(self, workflow_id: str) -> Workflow | WorkflowRow | None:
        """What this engine can do with the workflow `workflow_id`.

        Returns:
            The `Workflow` to run (a registered plain one, or a stored open instance of a
            registered definition); the stored row of an open instance of a definition not
            registered here (its changes can be recorded, not run); None when it is stored
            and has ended.

        Raises:
            UnknownWorkflowError: Neither registered here nor stored, or stored as a plain
                workflow not registered here.
            WorkflowMismatchError: The registered definition has other step names.
        """
        return (await self._find_stored(workflow_id))[0]

    async def _find_stored(
        self, workflow_id: str
    ) -> tuple[Workflow | WorkflowRow | None, WorkflowRow | None]:
        """`_find`, and the stored row read for it: the one a `Workflow` found was built from
        (`run` hands it to the driver, which then stores nothing), or the row of a workflow
        that has ended (found None); None for a registered plain workflow or a row found."""
        plain = self._registry.get(workflow_id)
        if plain is not None:
            return plain, None
        row = await self.store.get_workflow(validate_key(workflow_id, "workflow id"))
        if row is not None and row.state.closed:
            return None, row
        if (
            row is not None
            and row.definition is not None
            and self._registry.definition(row.definition) is None
        ):
            return row, None
        return self._registry.resolve(workflow_id, row), row

    async def _instance(self, workflow_id: str) -> tuple[Workflow, WorkflowRow | None] | RunResult:
        """The `Workflow` that `run_soon(workflow_id)` runs (see `_find`) with the stored row
        it was built from (None for a registered plain workflow: the run then stores nothing,
        `Driver.drive`), or the stored result of one that has ended (another engine, say,
        finished it meanwhile): nothing to run, said at DEBUG only.

        Raises:
            UnknownWorkflowError: Not something this engine can run: not registered here,
                or an instance of a definition not registered here.
            WorkflowMismatchError: The registered definition has other step names.
        """
        found, row = await self._find_stored(workflow_id)
        if isinstance(found, Workflow):
            return found, row
        if isinstance(found, WorkflowRow):  # raises: its definition is not registered here
            return self._registry.resolve(workflow_id, found), None
        assert row is not None  # stored and ended
        LOGGER.debug("run_soon(%r): it has ended already; nothing to run", workflow_id)
        return await stored_result(self.store, row)

    async def serve(
        self,
        *,
        poll_interval: float = 1.0,
        stop: asyncio.Event | None = None,
        grace: float = 0.0,
        retention: float | None = None,
    ) -> None:
        """Run the ready work of every registered definition, until cancelled or stopped.

        Several engines, in several processes, may serve one store: each step is claimed
        by exactly one of them (a compare-and-swap in the store). A serving engine claims
        only what it can start at once: at most as many runs as its lane has permits (less
        the runs it has in progress that are not waiting on the clock, and what other jobs
        use of the lane). Each poll reads the store's ready work
        (`DurableStore.ready_workflows`): open instances of the registered definitions
        whose current step is pending (its stored retry time, if any, come), leased under
        an expired lease (taken over, recording `WorkerRecovered`, as `recover` does), or
        waiting on a wait whose deadline has passed (the wait then raises `InputTimeout`).
        It starts each one's run in this engine, which goes on step after step as any run
        does; resumes and retries recorded by engines that do not hold the definition are
        picked up the same way. Plain workflows are never served (they are tied to the
        engine that registered them). Definitions registered while serving are served
        from the next poll on.

        Between polls it waits `poll_interval` seconds on the engine's clock, or less: until
        a run it started ends, or until the store says new work arrived (a store
        implementing `agentq.store.WorkNotifier`, as a PostgreSQL store does with
        ``LISTEN/NOTIFY``; SQLite and memory stores are polled: one small indexed query
        per poll). A store failure is logged (``logging.getLogger("agentq")``) and tried
        again at the next poll.

        Cancelling the task that awaits `serve` stops claiming and closes the engine as
        `close` does: every run in progress here is interrupted, each lease handed back
        once its body has stopped (so another serving engine continues at once), and the
        engine can be used (or serve) again.

        Setting `stop` is the graceful way (what ``agentq serve`` does on SIGTERM or
        SIGINT): serve takes no more work, not even the next step of a run in progress,
        and says in one line (WARNING, on ``logging.getLogger("agentq")``) which steps are
        still running; they go on until they end or `grace` seconds have passed on the
        engine's clock; then the engine is closed as above (what is left is interrupted,
        its leases handed back; the next steps stay pending for another worker) and
        serve returns.

        Args:
            poll_interval: Seconds between two reads of the ready work (> 0, finite). New
                work is noticed within about this long.
            stop: Set it to stop serving gracefully; None: only cancelling stops serving.
            grace: Seconds (>= 0, finite) the runs in progress may go on once `stop` is set.
            retention: Seconds (> 0, finite), or None (never sweep): sweep the store as it
                serves, removing the completed and cancelled workflows that ended more than
                this long ago on the engine's clock (`DurableStore.sweep`), at the first poll
                and then every tenth of `retention` (at least a minute, at most an hour
                apart), in a task beside the serve loop; a failed sweep is logged.

        Returns:
            None, once `stop` was set and the engine closed (it never returns otherwise).

        Raises:
            ValueError: `poll_interval` or `retention` is not a positive number of
                seconds, or `grace` not a number of seconds >= 0.
            TypeError: `stop` is neither None nor an `asyncio.Event`.
            EngineError: This engine is serving already.
            QueueClosed: The engine's queue closed (nothing claimed could run); checked
                before each poll.
            StoreClosedError: The engine's store was closed under it (nothing could be
                read or claimed again), found by a poll; the engine is closed as above.
            asyncio.CancelledError: When cancelled (it never returns otherwise).

        Example:
            >>> engine.register(order)
            >>> server = asyncio.create_task(engine.serve())   # or await it in a worker
            >>> ...
            >>> server.cancel()
        """
        if (
            isinstance(poll_interval, bool)
            or not isinstance(poll_interval, int | float)
            or not 0 < poll_interval < math.inf
        ):
            raise ValueError(
                f"poll_interval must be a positive number of seconds, got {poll_interval!r}"
            )
        if (
            isinstance(grace, bool)
            or not isinstance(grace, int | float)
            or not 0 <= grace < math.inf
        ):
            raise ValueError(f"grace must be a number of seconds >= 0, got {grace!r}")
        if stop is not None and not isinstance(stop, asyncio.Event):
            raise TypeError(f"stop must be an asyncio.Event or None, got {stop!r:.80}")
        kept = check_retention(retention)
        if self._server.serving:
            raise EngineError("serve() is running on this engine already")
        try:
            await self._server.serve(float(poll_interval), stop, float(grace), kept)
        finally:
            try:
                await finish(self.close())
            finally:
                self._server.reopen()  # a graceful stop halted the runs: they are gone now


def _near(when: float, now: float, name: str) -> float:
    """`when` (Unix seconds), refused (ValueError naming it) beyond ``now + MAX_WAIT_TIMEOUT``
    (10 years, the bound of ``ctx.sleep``): every stored time stays one a date can show."""
    if when - now > MAX_WAIT_TIMEOUT:
        raise ValueError(
            f"{name} {when!r} is more than {MAX_WAIT_TIMEOUT:.0f} s (10 years) after now"
        )
    return when
