"""The in-process queue: idempotency keys, priority lanes, backpressure, permits.

Other layers import only from here. Read the modules in this order, from the bottom layer up:
each imports only modules that come before it in the list, never one after it.

1. ``fingerprint_cache`` - what a code object reads; the stored fingerprints of calls
   over plain values, cached.
2. ``fingerprint_value`` - one value of a fingerprint and how two compare (identity,
   form, a function's own state).
3. ``fingerprint`` - what makes two pushes of one key "the same call", in memory.
4. ``fingerprint_stored`` - the same call's fingerprint as text to store, the same in every
   process (format v2, with `same_stored` still reading v1 rows).
5. ``fingerprint_parts`` - the parts fast fingerprints are made of (the marker, a function
   among the values, a queue's table of equal parts, the code that reads no value).
6. ``fingerprint_fast`` - the same fingerprint, taken in one quick pass for calls over
   plain values (the common lambdas and partials; a flat pass for plain functions).
7. ``fingerprint_match`` - whether a call has a kept fast fingerprint, decided without
   taking it.
8. ``fingerprint_diff`` - what differs between two fingerprints of one key, for messages.
9. ``fingerprint_deferred`` - `Deferred`: the claim fingerprint of the common functions
   kept unbuilt (one part per code object and the defaults), built when a push compares.
10. ``builders`` - `Builders`: which lambdas only build a coroutine (read from their code),
   which a queue then calls on the loop instead of in a thread.
11. ``rates`` - `Rate` and the sliding-window budget that enforces one; how long a failure
   asks to wait (``retry_after``); the tokens an output reports.
12. ``lanes`` - the lane vocabulary users see: `Priority`, `LaneConfig`, `LaneStats`,
   `QueueStats`.
13. ``job_checks`` - what building a `Job` checks of its callable and seconds;
    `short_repr` for messages.
14. ``jobs`` - `Job` (validated when built), `JobEventKind`, `JobEvent`.
15. ``outcome_store`` - `JobOutcomeStore`, the protocol a store implements to keep completed
    keys across restarts (`Queue(store=...)`), and `StoredJob`.
16. ``rate_ledger`` - `RateLedger`, the protocol a store implements to share the lanes'
    rate and token budgets and pauses between processes, and `BudgetGrant`.
17. ``lane`` - `Lane`: one lane's permits, waiting area, workers and room waiters, its
    budgets and pause, and the states a record goes through in it.
18. ``records`` - `Record`: the bookkeeping of one job (outcome and its waiters, the phase of
    its attempt, interrupts, its waits on other jobs); `CURRENT`, the job a context runs.
19. ``keytable`` - `KeyTable`: the record of every known key, the same-call check, the
    finished keys' expiry and eviction, the runs whose body has not stopped yet, the keys
    whose stored outcome is being read.
20. ``ledger`` - `Ledger`: the state every mechanism shares (keys, lanes, clock, loop,
    subscribers, store) and the transitions of the books: answer a known key (and the
    cache-hit fast path), claim, settle.
21. ``persistence`` - the store rules: read a key's stored outcome before it runs, save an
    output before it settles, forget.
22. ``threads`` - running a plain callable in a worker thread for a job's body (what it
    raised comes back as a value; a thread is waited for, never cancelled).
23. ``attempt`` - what ends an attempt (`failure_of`: the interrupt rules), shared by the
    runner and the lane worker that awaits a plain async job's one attempt itself.
24. ``runner`` - running one record in the current task: attempts, timeouts, threads,
    retries (and the lane pause a rate-limit failure asks for), interrupts.
25. ``budgets`` - `SharedBudgets`: a shared lane's asks to the store (a charge granted
    before a job starts, a pause stored, tokens settled), in tasks of their own.
26. ``arbitration`` - `Arbiter`: which waiting job of which gated lane gets the next permit
    (rate and token budgets, pauses, ``total_permits`` shared by priority with aging).
27. ``dispatch`` - `Dispatcher`: the lane workers; admitting, abandoning, cancelling and
    taking records.
28. ``nesting`` - waiting for room, and jobs waiting for jobs: the deadlock rules.
29. ``handles`` - `JobHandle` and what a push answers: `Queued`, `InFlight`, `Cached`
    (`answer`, for a known key).
30. ``shutdown`` - `Shutdown` and `CloseReport`: closing, draining, abandoning.
31. ``rate_verbs`` - `RateVerbs`, `Queue`'s base: the verbs of the lanes' budgets and
    pauses (``share_budgets``, ``settle_tokens``, ``resume_lane``).
32. ``queue`` - `Queue`, the public face: small methods over the modules above.

``docs/queue-internals.md`` follows one push through these modules.
"""

from agentq.queue.fingerprint_stored import same_stored as same_stored
from agentq.queue.fingerprint_stored import stored_fingerprint as stored_fingerprint
from agentq.queue.handles import Accepted, Cached, InFlight, JobHandle, Queued
from agentq.queue.jobs import Job, JobEvent, JobEventKind
from agentq.queue.lanes import LANE_ORDER as LANE_ORDER
from agentq.queue.lanes import LaneConfig, LaneStats, Priority, QueueStats
from agentq.queue.outcome_store import JobOutcomeStore, StoredJob
from agentq.queue.queue import Queue
from agentq.queue.rate_ledger import BudgetGrant, RateLedger
from agentq.queue.rates import Rate
from agentq.queue.rates import usage_tokens as usage_tokens
from agentq.queue.shutdown import CloseReport

__all__ = [
    "Accepted",
    "BudgetGrant",
    "Cached",
    "CloseReport",
    "InFlight",
    "Job",
    "JobEvent",
    "JobEventKind",
    "JobHandle",
    "JobOutcomeStore",
    "LaneConfig",
    "LaneStats",
    "Priority",
    "Queue",
    "QueueStats",
    "Queued",
    "Rate",
    "RateLedger",
    "StoredJob",
]
