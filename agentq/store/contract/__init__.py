"""The store's contract: what a store is asked and what it hands out.

No transition rule and no backend lives here; every other room of `agentq.store` builds on
this one. Read the modules in this order (each imports only modules above it, plus the
foundation modules of `agentq`):

    ``frozen``          `quick_init`: a cheaper ``__init__`` for the frozen, slotted rows.
    ``rows``            `WorkflowRow`, `StepRow`, `CallRow`, their states and kinds, event
                        rows (`EVENT_COLUMNS`), and `shown_call` (how a wait of a closed
                        workflow is shown).
    ``children``        child runs (``ctx.child``): their ids (``<parent>/<key>``), the
                        parent's wait key ``child:<key>``, `ChildStart`, the outcome.
    ``messages``        `MessageRow` (a message kept for, or taken by, a receive) and `Sent`.
    ``hooks``           `HookRow`: one row of the end-of-run hook outbox, `pending_hook`.
    ``claims``          `Execution` (a held lease), `execution_of` (the lease of a step row)
                        and the `ClaimResult` answers of a claim.
    ``sweep``           `SweepReport` (what a sweep removed) and `check_sweep` (its
                        arguments).
    ``ready``           `ReadyWork` (what a serving worker may take up now, `is_ready`) and
                        the optional wake-up hook `WorkNotifier`.
    ``checks``          argument checks, run by every store before anything is read or
                        written.
    ``groups``          run groups: `GroupManifest`, member ids ``<group>/<key>``,
                        `check_group`, and the `DurableGroups` verbs.
    ``schedules``       `ScheduleRow`, the instance id of a tick, the schedule checks.
    ``protocol_reads``  `DurableReads`: the read verbs, inherited by `DurableStore`.
    ``protocol_calls``  `DurableCalls`: the durable-call verbs, inherited by `DurableStore`.
    ``protocol_fork``   `DurableForks`: the fork verb, inherited by `DurableStore`.
    ``protocol_schedules``  `DurableSchedules`: the schedule verbs, inherited by
                        `DurableStore`.
    ``protocol_sweep``  `DurableSweeps`: the retention verb, inherited by `DurableStore`.
    ``protocol_messages``  `DurableMessages`: the message verbs, inherited likewise.
    ``protocol_hooks``  `DurableHooks`: the end-hook outbox verbs, inherited likewise.
    ``protocol_waits``  `DurableWaits`: the wait verbs (`wait_step`, `resume_step`,
                        `time_out_wait`), inherited likewise.
    ``protocol_advance``  `DurableAdvance`: `advance_step` (a completion and the next
                        step's claim in one transaction), inherited likewise.
    ``protocol``        `DurableStore`: every write verb, its atomicity and its errors.
"""
