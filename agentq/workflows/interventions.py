"""`Interventions`: the engine's verbs that change a workflow from outside its run.

``resume`` (deliver an input to a waiting step), ``retry`` (run a failed or cancelled
workflow again) and ``cancel``: each checks and records its change in the store (the
changes themselves are in ``changes.py``), interrupts or replaces the run in progress
(`Runs.replace`, ``runs.py``), and lets a new run continue the workflow. ``send`` records a
message for a workflow's receives (`agentq.store.rules.messages`). An instance of a
definition that this engine has not registered is changed all the same: the change is
recorded (`Recorded`) and a serving engine that holds the definition runs it on.

`WorkflowEngine` (``engine.py``) derives from this class, as this class derives from
`Registrations`; private to `agentq.workflows.engine`, the verbs are documented as
`WorkflowEngine`'s.
"""

from __future__ import annotations

from typing import Any

from agentq.errors import AgentqError, NotWaitingError, UnknownWorkflowError
from agentq.keys import validate_key
from agentq.store import WorkflowRow, WorkflowState
from agentq.workflows.changes import (
    resume_change,
    resume_elsewhere,
    retry_change,
    retry_check,
    retry_elsewhere,
    unregistered_retry,
)
from agentq.workflows.driver import Driver
from agentq.workflows.model import Recorded, RunResult, Workflow
from agentq.workflows.registrations import Registrations
from agentq.workflows.registry import step_index
from agentq.workflows.results import refuse_resume
from agentq.workflows.runs import Runs

__all__ = ["Interventions"]


class Interventions(Registrations):
    """The verbs that change a workflow from outside its run: resume, retry, cancel.

    A subclass provides the driver and the runs in progress (`WorkflowEngine` does), besides
    what `Registrations` asks for.
    """

    _driver: Driver
    """Runs the steps; interrupts the attempt of a cancelled workflow (made by the engine)."""

    _runs: Runs
    """The engine's runs in progress, one per workflow (made by the engine)."""

    async def resume(
        self, workflow_id: str, step: str | int, input: Any, *, key: str | None = None
    ) -> RunResult | Recorded:
        """Deliver `input` to a `Waiting` step and continue the workflow.

        The step runs again with ``ctx.resumed`` true, ``ctx.resume_input == input`` (None
        included) and ``ctx.attempt`` counted from 1; `StepResumed` records the input. A step
        waiting in `StepContext.wait_for_input` gets the input as that call's return value.
        Of concurrent resumes of one wait, exactly one wins; the others raise
        `NotWaitingError`. `input` is required: None is an answer too, so it must be given on
        purpose.

        An instance of a `WorkflowDef` that this engine has not registered is resumed all
        the same: the input is recorded at once (checked by the store as always) and
        `Recorded` is returned; a serving engine that holds the definition (`serve`) runs
        the step on. A plain workflow is tied to the engine that registered it.

        Args:
            workflow_id: The workflow (registered with this engine, an instance of a
                definition, or stored and ended: then the refusal says why).
            step: The waiting step's name or 0-based index.
            input: A JSON value (None included).
            key: The key of the `wait_for_input` this answers; None answers whatever the
                step waits for now. If the step does not wait on `key` (yet: it has not
                reached the wait, or waits on another), the input is kept for that wait
                instead: the later ``wait_for_input(key, ...)`` (in any step of the
                workflow) returns it at once. The run continued is then the one in
                progress, if any (the call returns when it ends or waits), else a new one.

        Returns:
            The `RunResult` of the continued run; `Recorded` when the definition is not
            registered here.

        Raises:
            UnknownWorkflowError: Not registered or not stored.
            UnknownStepError: No such step.
            NotWaitingError: The step is not waiting (the message names its status; without
                a `key`), or has completed, or the wait `key` was answered before or has an
                input kept already; nothing is recorded. Also
                a resume after the wait's deadline, whether or not the wait was timed out
                yet (the message says it timed out at its deadline, UTC): the wait is then
                timed out (``WaitTimedOut``) and the step continues with `InputTimeout`.
            WorkflowClosedError: The workflow is cancelled, failed or completed.
            PayloadError: `input` is not JSON or too large; nothing is recorded.
        """
        wf, stored = await self._find_stored(workflow_id)
        if wf is None:  # stored and ended: the store refuses the resume, saying why
            await refuse_resume(self.store, self.clock.time(), workflow_id, step, input, key)
        if isinstance(wf, WorkflowRow):  # its definition is elsewhere: record, serve runs it
            return await resume_elsewhere(self.store, self.clock, wf, step, input, key)
        index = step_index(wf.id, wf.step_names, step)
        # An instance built from its stored row (`stored`) is stored as it is: neither the
        # change nor the run stores it again.
        deliver = resume_change(self.store, self.clock, wf, index, input, key, stored=stored)
        # A run that is still returning from the wait would not see the input: it ends
        # first, then a run of our own continues (claims keep each step to one run).
        try:
            return await self._runs.replace(wf, deliver, before=False, row=stored)
        except NotWaitingError:
            # Refused; if because the wait's deadline passed (no timer fired: a restart),
            # the wait times out now and the step continues, as the timer would have done.
            if await self.store.time_out_wait(wf.id, index, self.clock.time()):
                self._runs.start_soon(wf)
            raise

    async def send(
        self, workflow_id: str, topic: str, payload: Any, *, key: str | None = None
    ) -> bool:
        """Send a message to a workflow on `topic`; a step takes it with `StepContext.receive`.

        From any process on the store: the message is recorded (``MessageSent``, one
        transaction) and kept durably until a receive of the workflow takes it, first in
        first out per topic, each message once. If a step waits on a receive of `topic`,
        the same transaction delivers the message to it (no wake-up can be lost) and the
        step continues: here at once if this engine runs the workflow (a registered plain
        workflow, or an instance of a definition registered here), else by a serving engine
        that holds its definition (or the next `run` / `recover` of a plain workflow by the
        engine that registered it).

        Args:
            workflow_id: The workflow (stored; it need not be registered here).
            topic: The topic (a non-empty str, `agentq.keys` rules).
            payload: Any JSON value (None included).
            key: An idempotency key, unique per workflow among its messages: a send with a
                key used before (its message kept or taken) records nothing.

        Returns:
            True if the message was recorded; False if `key` was used before.

        Raises:
            UnknownWorkflowError: The workflow is not in the store.
            WorkflowClosedError: The workflow has ended (completed, failed or cancelled).
            PayloadError: `payload` is not JSON or too large; nothing is recorded.
            InvalidKeyError / TypeError: A bad workflow id, topic or key.
            StoreError: The store failed.
        """
        wid = validate_key(workflow_id, "workflow id")
        sent = await self.store.send_message(wid, topic, payload, self.clock.time(), key=key)
        if sent.delivered_to is not None:
            try:
                wf = await self._find(wid)
            except AgentqError:  # not runnable here (a plain workflow of another engine)
                return sent.sent
            if isinstance(wf, Workflow):
                self._runs.start_soon(wf)
        return sent.sent

    async def retry(
        self, workflow: Workflow | str, *, from_step: str | int | None = None
    ) -> RunResult | Recorded:
        """Run a failed or cancelled workflow again, and return its new `RunResult`.

        By default it continues from the step that failed (or was cancelled, or was next
        when the workflow was cancelled between steps); `from_step` runs the steps again from
        an earlier one. Steps before it keep their outputs and are not run again; the steps
        from it on start over as if never run (``ctx.attempt`` from 1, their crash budget
        whole, their earlier outputs and resume input forgotten by the projection; the log
        keeps everything and records `WorkflowRetried`). As with `resume`, cancelling the
        caller does not stop the retried run.

        Args:
            workflow: The `Workflow` (registered on the way), the id of one registered
                with this engine, or the id of a stored instance of a `WorkflowDef`.
            from_step: The step (name or 0-based index) to run again from; every step
                before it must have completed. None: the first step that did not complete.

        An instance of a `WorkflowDef` not registered here is retried all the same: the
        retry is recorded at once (`WorkflowRetried`, checked by the store as always) and
        `Recorded` is returned; a serving engine that holds the definition runs it.

        Returns:
            The `RunResult` of the new run; `Recorded` when the definition is not registered
            here.

        Raises:
            UnknownWorkflowError: An id that is not registered with this engine (step
                bodies are code, and a registration is dropped once its run ended failed or
                cancelled: pass the `Workflow`), or a workflow that was never stored.
            UnknownStepError: No such step.
            NotRetryableError: The workflow is running, waiting or completed (the message
                names its state), or a step before `from_step` has not completed; nothing
                is recorded.
            WorkflowMismatchError: The id is stored with different steps or input.

        Example:
            >>> result = await engine.run(order)
            >>> if result.status is RunStatus.FAILED:      # fix the cause, then
            ...     result = await engine.retry(order)     # or retry(order, from_step="fetch")
        """
        if isinstance(workflow, Workflow):
            wf = self._registry.lookup(workflow)
        else:
            known = self._registry.get(validate_key(workflow, "workflow id"))
            if known is None:
                row = await self.store.get_workflow(workflow)
                if row is None or row.definition is None or row.state is WorkflowState.COMPLETED:
                    await unregistered_retry(self.store, workflow)
                if self._registry.definition(row.definition) is None:  # record, serve runs it
                    return await retry_elsewhere(self.store, self.clock, row, from_step)
                known = self._registry.resolve(workflow, row)
            wf = known
        index = None if from_step is None else step_index(wf.id, wf.step_names, from_step)

        check = retry_check(self.store, wf)  # said before waiting for a run in progress
        again = retry_change(self.store, self.clock, wf, index)
        # The run that ended it may still be on its way out (a cancelled attempt stopping):
        # it ends before the workflow is reopened, so it never sees it running again.
        return await self._runs.replace(wf, again, before=True, check=check)

    async def cancel(self, workflow_id: str | Workflow, reason: str = "cancelled") -> bool:
        """Cancel a workflow: no further step starts and a running attempt is interrupted.

        An attempt this engine runs is interrupted at once; one that another engine runs
        (another process) is interrupted at that engine's next lease renewal, within its
        ``lease_ttl / 3`` seconds. A body in a worker thread cannot be interrupted: it is no
        longer waited for, and what it returns is refused.

        Works on any workflow this engine knows: stored, or only registered (or given as a
        `Workflow`) and never run; the latter is stored as cancelled, so that a later `run`
        returns its cancelled result without running a step. Idempotent: `WorkflowCancelled`
        is recorded once; cancelling a workflow that already ended records nothing. A
        cancelled workflow can run again with `retry`.

        Args:
            workflow_id: The workflow's id (or the `Workflow` itself).
            reason: Recorded with `WorkflowCancelled`, returned as `RunResult.reason`.

        Returns:
            True if this call cancelled it, False if it had already ended.

        Raises:
            UnknownWorkflowError: The workflow is neither stored nor registered.
            WorkflowMismatchError: The `Workflow` given (or registered under this id) is
                stored with other steps or input; nothing is recorded.
        """
        wf = workflow_id if isinstance(workflow_id, Workflow) else None
        wid = validate_key(wf.id if wf else workflow_id, "workflow id")
        wf = wf or self._registry.get(wid)
        now = self.clock.time()
        if wf is not None:  # stored as it is registered, if it never ran: then cancelled
            await self.store.start_workflow(
                wf.id, wf.step_names, wf.input, now, definition=wf.definition
            )
        elif await self.store.get_workflow(wid) is None:
            raise UnknownWorkflowError(
                f"workflow {wid!r} is neither registered with this engine nor in the store"
            )
        cancelled = await self.store.cancel_workflow(wid, reason, now)
        if cancelled:  # its child runs were cancelled with it: interrupt the ones run here
            self._ended_here(wid)
            for other in [wid, *self._runs.ids_in_progress()]:
                if other == wid or other.startswith(wid + "/"):
                    self._driver.interrupt(other)
        if not self._runs.busy(wid):  # else dropped when its run in progress returns
            self._registry.remove(wid)
        return cancelled
