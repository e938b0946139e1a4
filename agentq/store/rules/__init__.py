"""The transition rules, shared by every store, and the verbs written once over them.

A rule reads and writes through a small `Tx` and never knows the backend; a store supplies
the transaction. Imports only `agentq.store.contract`. Read the modules in this order (each
imports only modules above it):

    ``fence``           `CallFence` and `StepLease`: what a durable call's verb reads of
                        its workflow and step; `check_known` (unknown workflow or step).
    ``projection_calls``  `project_call`: the ``calls`` rows as a pure function of the log.
    ``projection_messages``  `project_message`: the ``messages`` rows, likewise.
    ``projection_steps``  `step_after`: a step row as each step event leaves it; a retry's
                        and a workflow end's steps; `is_fenced`.
    ``projection``      `project` / `replay`: the rows as a pure function of the event log.
    ``tx``              `Tx` (what a rule needs from a transaction), `Draft`, `apply`; a
                        workflow's end answers its parent's wait and cancels its children.
    ``messages``        send a message; a wait taking a kept message; an early resume's
                        input kept for its wait.
    ``links``           a retry and the child links: a retried parent's rows on ended
                        children answered, a re-joined retried child's row re-opened.
    ``workflow``        start a workflow, resume a waiting step, time a wait out, cancel,
                        retry.
    ``lease``           claim a step, renew its lease, release an expired lease or a dead
                        worker's.
    ``attempt``         complete, fail or wait: the end of an attempt, under fencing.
    ``calls``           start, complete or fail a durable call, under fencing.
    ``advance``         complete a step and claim the next in one transaction.
    ``hooks``           the end-hook outbox: claim due rows under a lease, finish, retry.
    ``children``        start a child run (``ctx.child``) once, linked to its parent.
    ``schedules``       store, replace or delete a schedule; fire a tick (a compare-and-swap
                        on its next tick, with the start of its instance).
    ``rates``           the shared rate windows (`RateLedger`): the verbs' checks, and
                        whether a start fits (`judge`, with the queue's `Window`).
    ``fork``            fork a workflow: a new one whose history up to a point is copied
                        from another's.
    ``sweep``           retention: which ended workflows a sweep keeps (`chosen`), and
                        its loop of short transactions (`sweep`); stores supply a
                        `Sweeper`.
    ``own_verbs``       `OwnVerbs`: the verbs of the rows a store keeps its own way (job
                        outcomes, run groups, rate windows, sweep), over its `JobRules`,
                        `GroupRules`, `RateRules` and `Sweeper`.
    ``verbs``           `RuleStore`: every write verb once, over an abstract `_write`; the
                        base of every store.
"""
