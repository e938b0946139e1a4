"""Durable workflows: ordered steps, each attempt a job in the queue, every transition stored.

What is inside, in reading order (each module imports only the ones above it, the foundation
modules, `agentq.queue` and `agentq.store`; nothing here imports the notebook layer):

=================  ============================================================================
``recorder``       `CallRecorder` and `Definition`: what a step's context needs from the
                   machinery that runs it (its attempt's call log), as small protocols
``context``        `StepContext`: what a step body receives; ``ctx.call``,
                   ``ctx.wait_for_input``, ``ctx.child``, ``ctx.receive`` (through `CallRecorder`)
``reports``        what a run reports: `StepStatus`, `RunStatus`, `RunResult`, `Recorded`
``model``          `StepDef`, `Workflow`, `WorkflowDef` (the reports and the signals
                   `WaitForInput` and `NonRetryable`, `agentq.errors`', re-exported)
``spans``          the OpenTelemetry spans of a run and of a step attempt, and the link back
                   to the run that started the workflow (`agentq.tracing`; no-ops when off)
``waits``          the waits of a run (backoff, poll, an interrupted body) that a cancel wakes
``calling``        `CallRunner`: a durable call the log does not answer, recorded as started,
                   run through the queue and its outcome recorded under the attempt's
                   fencing token
``parking``        `InputRequested` (the signal that parks a step on a keyed wait), the
                   limits of a wait's time, the keys and reason of a durable sleep
``children``       `ChildRunner`: ``ctx.child`` / ``ctx.children``: a child run started once,
                   the step parked on its wait ``child:<key>``, its outcome read
``calls``          `CallLog`: one attempt's durable calls and waits, answered from the log or
                   run by its `CallRunner`
``keyed``          `KeyedLog` (the base of `CallLog`): the attempt's one read of its recorded
                   calls and waits; its keyed waits (wait_for_input, sleep, receive)
``workers``        worker ids (``host:pid:token``), whether a lease holder's process is gone,
                   taking its lease back at once; what a waiting run logs
``attempts``       one step attempt: the job body, its queue key and name, the lease (renewed;
                   a refused renewal tells the driver, which interrupts the body; handed back
                   once the body stopped), the cancel-safe claim, the markers the driver acts on
``renewals``       `Renewals`: one timer for every lease an engine holds (renewed in the order
                   they are due, by one task that ends when no lease is held)
``results``        stored rows read back as a `StepStatus` or a `RunResult`; what the store says
                   to `run` and `resume` of an ended workflow that is no longer registered
``registry``       what an engine can run: plain workflows by id, definitions by name; a
                   stored instance built from its definition
``advancing``      a completion that claims the next step in the same transaction
                   (``advance_step``, cancel-safe, its claim offered to the run); a continued
                   run's completed steps read once
``recording``      an attempt's outcome recorded (complete, wait, fail or retry) as `classify`
                   judges it
``attempting``     `AttemptRunner`: one claimed attempt as a job in the lane, its lease kept,
                   its outcome recorded; the attempts running now
``admission``      `Admission`: an engine claims a step only when its lane has a slot for it
                   (at most its permits of steps claimed at once; the rest stay ready)
``waiting``        a step found waiting: join the child run it waits on, arm its deadline's timer
``driver``         the loop that runs one workflow's steps: claim, attempt, record; the
                   engine's settings
``changes``        the stored changes a resume or a retry makes before a new run continues
``runs``           an engine's runs in progress, one per workflow, and the resumes and retries
                   that replace them
``deadlines``      the live engine's timers that continue a workflow when a wait's deadline (a
                   sleep's wake time) passes, or fail it at its own deadline
``cadence``        the ticks of a schedule's spec (a cron expression through ``cronsim``, or a
                   period): check it, the first tick, the latest tick due and the one after
``ticks``          `Ticker`: fire the due ticks of the stored schedules of the definitions
                   registered here (one store compare-and-swap each)
``retention``      `Retention`: the sweeps of a serving engine (``serve(retention=...)``)
``serving``        `Server`: the loop of ``serve`` (schedules' ticks, sweeps, end-of-run hooks,
                   free permits, ready work, claims)
``hooks``          `EndHooks`: the end-of-run hooks (``WorkflowDef(on_end=)``,
                   ``engine.on_end``) delivered from the store's outbox, with backoff;
                   the claims renewed while delivering
``registrations``  the engine's registration verbs: register (a `WorkflowDef`),
                   register_workflow, unregister, start (an instance, not run), serve;
                   finding what to run for an id
``linking``        `ChildLinks`: the engine runs the children its steps start, joins them,
                   continues their parents
``interventions``  the engine's verbs that change a workflow from outside its run: resume,
                   retry, cancel (its base class over `Registrations`)
``forking``        the engine's ``fork``: a new workflow whose history up to a step or a call
                   is another's, copied by one store verb, then run live from there
``group_ends``     following a run group's members to their ends (``RunGroup.results``):
                   one read per member run that ends, the whole group each poll interval
``group_checks`` a run group submitted again: the same keys, inputs and definitions?
``members``        what a run group reports: `GroupMember` (one that ended), `GroupStatus`
``groups``         `RunGroup` (``engine.group``): a manifest of members ``<group>/<key>``,
                   submit, results as they end, status counts, resume, cancel, forget
``scheduling``     the engine's ``schedule`` and ``unschedule`` (its base class over `Forks`)
``endings``        `Endings`: what the engine does when a run, a workflow's deadline or a
                   wait's deadline ends; ``on_end`` (its base class over `Scheduling`)
``engine``         `WorkflowEngine`: run, run_soon, status, close (fork, resume, retry,
                   cancel and the registration verbs from its base classes)
``recovery``       `recover` and its `RecoveryReport`: finish what a crashed worker left,
                   without waiting for it
=================  ============================================================================
"""

from agentq.workflows.context import StepContext
from agentq.workflows.engine import WorkflowEngine
from agentq.workflows.groups import RunGroup
from agentq.workflows.members import GroupMember, GroupStatus
from agentq.workflows.model import (
    MAX_REASON_CHARS,
    NonRetryable,
    Recorded,
    RunResult,
    RunStatus,
    StepDef,
    StepStatus,
    WaitForInput,
    Workflow,
    WorkflowDef,
)
from agentq.workflows.recovery import RecoveryReport, recover

__all__ = [
    "MAX_REASON_CHARS",
    "GroupMember",
    "GroupStatus",
    "NonRetryable",
    "Recorded",
    "RecoveryReport",
    "RunGroup",
    "RunResult",
    "RunStatus",
    "StepContext",
    "StepDef",
    "StepStatus",
    "WaitForInput",
    "Workflow",
    "WorkflowDef",
    "WorkflowEngine",
    "recover",
]
