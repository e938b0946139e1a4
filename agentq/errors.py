"""The agentq exception tree.

Every error agentq raises on purpose derives from `AgentqError`. Outcomes are named as states,
faults end in ``Error``; errors about misused arguments also derive from `ValueError` or
`TypeError` so generic handlers keep working::

    AgentqError
    ├── QueueFull                 push_nowait: the lane is at capacity
    ├── QueueClosed               the queue no longer admits jobs
    ├── JobFailed                 push_and_wait: the job failed (original error is __cause__)
    ├── JobLost                   the job was abandoned before it ran (cancelled push, close)
    ├── KeyConflictError          an idempotency key reused for a different call
    ├── InputTimeout              ctx.wait_for_input: its deadline passed with no input
    ├── ChildFailed               ctx.child: the child run failed or was cancelled
    ├── InvalidKeyError           (also ValueError) empty, non-UTF-8 or over-long key
    ├── DeadlockError             a wait that could never end (see the class)
    ├── WrongLoopError            (also RuntimeError) a queue used from another event loop
    ├── MissingExtraError         (also ImportError) an optional extra is not installed
    ├── PayloadError              (also ValueError) a value is not JSON or is too large
    ├── WaitForInput              signal: a step waits for outside input (not a fault)
    ├── NonRetryable              signal: fail at once, never retried (a job or a step)
    ├── StoreError                the durable store's backend failed (__cause__ is the original)
    │   ├── StoreClosedError      the store was closed: the verb did nothing
    │   ├── LeaseLostError        fencing: the worker's lease was taken over
    │   └── SchemaError           the database file has an unknown schema version
    └── EngineError               a workflow operation is not possible in the current state
        ├── UnknownWorkflowError
        ├── UnknownStepError
        ├── WorkflowMismatchError a workflow id reused with other steps (or definition)
        ├── NotWaitingError       resume of a step that is not Waiting
        ├── NotRetryableError     retry of a workflow that is not failed or cancelled
        ├── WorkflowClosedError   the workflow is cancelled, failed or completed
        └── StepContextError      ctx.call / ctx.wait_for_input outside their step attempt

`asyncio.CancelledError` is never swallowed or wrapped.

`WaitForInput` and `NonRetryable` live here, in the foundation, because the queue and the
workflow engine read them by the same rule (`agentq.retry.classify`); they are public as
`agentq.WaitForInput` and `agentq.NonRetryable` (and from `agentq.workflows`).
"""

from __future__ import annotations

__all__ = [
    "MAX_REASON_CHARS",
    "AgentqError",
    "ChildFailed",
    "DeadlockError",
    "EngineError",
    "InputTimeout",
    "InvalidKeyError",
    "JobFailed",
    "JobLost",
    "KeyConflictError",
    "LeaseLostError",
    "MissingExtraError",
    "NonRetryable",
    "NotRetryableError",
    "NotWaitingError",
    "PayloadError",
    "QueueClosed",
    "QueueFull",
    "SchemaError",
    "StepContextError",
    "StoreClosedError",
    "StoreError",
    "UnknownStepError",
    "UnknownWorkflowError",
    "WaitForInput",
    "WorkflowClosedError",
    "WorkflowMismatchError",
    "WrongLoopError",
]


MAX_REASON_CHARS = 4096
"""Longest reason kept from `WaitForInput` and `NonRetryable`; longer ones are cut with '…'."""


class AgentqError(Exception):
    """Root of every error agentq raises on purpose."""


class QueueFull(AgentqError):
    """`Queue.push_nowait` found the job's lane at capacity; nothing was admitted."""


class QueueClosed(AgentqError):
    """The queue is closing or closed and admits no new job."""


class JobFailed(AgentqError):
    """A job ended in `Failed`; the original exception, if any, is ``__cause__``.

    Attributes:
        key: The job's idempotency key.
        outcome: The `Failed` outcome (reason, error type, message and traceback text).
        retryable: False when running the job again could only fail the same way (a durable
            call whose output cannot be stored): a step that lets it through fails at once
            (`agentq.retry.classify`). True otherwise.
    """

    def __init__(self, key: str, outcome: object, *, retryable: bool = True) -> None:
        super().__init__(f"job {key!r} failed: {outcome}")
        self.key = key
        self.outcome = outcome
        self.retryable = retryable


class JobLost(AgentqError):
    """The job was abandoned before it could run (its push was cancelled or the queue closed).

    Callers that joined an abandoned push get this instead of waiting forever.
    """


class KeyConflictError(AgentqError):
    """An idempotency key was pushed again with a different callable or arguments."""


class InputTimeout(AgentqError):
    """A `StepContext.wait_for_input` reached its deadline without input.

    Raised inside the step body by the wait, when the step continues after the deadline (the
    log records ``WaitTimedOut``). Catch it in the body to take a default path; left
    uncaught it fails the attempt like any other exception (it is retryable).

    Attributes:
        key: The wait's key.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class ChildFailed(AgentqError):
    """A child run (`StepContext.child`, `StepContext.children`) failed or was cancelled.

    Raised inside the parent's step body, from the parent's log: every replay of the step
    raises it again (the child's outcome is recorded once). Catch it in the body to take
    another path; left uncaught it fails the step at once (``retryable = False``: another
    attempt would read the same outcome), and so the workflow.

    Attributes:
        child_id: The child workflow's id (``<parent id>/<key>``).
        key: The child's key within the parent.
        state: ``"failed"`` or ``"cancelled"``.
        reason: Why the child failed or was cancelled, as its workflow records it.
    """

    retryable = False  # agentq.retry.classify: final

    def __init__(self, child_id: str, key: str, state: str, reason: str | None) -> None:
        verb = "was cancelled" if state == "cancelled" else state
        super().__init__(f"child run {child_id!r} {verb}: {reason or 'no reason given'}")
        self.child_id = child_id
        self.key = key
        self.state = state
        self.reason = reason


class InvalidKeyError(AgentqError, ValueError):
    """An idempotency key is empty, not encodable as UTF-8, or longer than allowed."""


class DeadlockError(AgentqError):
    """Waiting here could never end, so agentq refuses to start the wait.

    Raised when a job would wait for room in a full lane whose every permit is held by a job
    waiting the same way, when a job would wait for a job that (transitively) waits for it,
    when a job calls `Queue.close` on its own queue, when a workflow step awaits a run of
    its own workflow, and when `agentq.sync.run` would block a notebook cell while a widget
    waits for clicks (which reach the kernel only after the cell ends).
    """


class WrongLoopError(AgentqError, RuntimeError):
    """An object bound to one event loop (a `Queue`) was used from another loop.

    A queue starts on the loop that first uses it and belongs to it; create one queue per loop.
    """


class MissingExtraError(AgentqError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


class PayloadError(AgentqError, ValueError):
    """A value cannot be stored: it is not JSON or it exceeds the size limit.

    Attributes:
        field: Path of the offending value, e.g. ``output['ids']``.
    """

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class StoreError(AgentqError):
    """The durable store's backend failed; the original exception is ``__cause__``."""


class StoreClosedError(StoreError):
    """The store was closed (``await store.close()``): the verb did nothing. A run of an
    engine whose store is closed under it ends with this error (see `WorkflowEngine`)."""


class LeaseLostError(StoreError):
    """Fencing refused a write: the lease is no longer held by this worker and token."""


class SchemaError(StoreError):
    """The database file has a schema version this agentq cannot read."""


class EngineError(AgentqError):
    """A workflow operation is not possible in the workflow's current state."""


class UnknownWorkflowError(EngineError):
    """No workflow with this id is registered or stored, or no definition of that name is
    registered (the message says which definition to register)."""


class UnknownStepError(EngineError):
    """The workflow has no step with this name or index."""


class WorkflowMismatchError(EngineError):
    """A workflow id was reused with other steps, input or definition, or a stored instance's
    steps differ from its registered definition's; nothing was recorded."""


class NotWaitingError(EngineError):
    """`resume` targeted a step whose status is not `Waiting`; nothing was recorded."""


class NotRetryableError(EngineError):
    """`retry` targeted a workflow that is not failed or cancelled; nothing was recorded.

    The message names the workflow and its state (running, waiting or completed), or why the
    step to retry from cannot be run again (a step before it never completed).
    """


class WorkflowClosedError(EngineError):
    """The workflow is already cancelled, failed or completed; nothing was recorded."""


def _reason_text(reason: object) -> str:
    text = reason if isinstance(reason, str) else str(reason)
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


class WaitForInput(AgentqError):
    """Raised by a step body to wait for outside input (a human approval, a webhook).

    The step becomes `Waiting` until `WorkflowEngine.resume` delivers the input; it then
    runs again with ``ctx.resume_input`` set. A wait is never retried, also when it reaches
    the engine inside an exception group (parallel calls in an `asyncio.TaskGroup`): see
    `agentq.retry.classify`. Raised by a plain queue job, it fails the job without retry.

    Args:
        reason: Shown to whoever must provide the input, e.g. in the approval panel. A
            non-str value is converted with `str`; at most `MAX_REASON_CHARS` are kept.
    """

    retryable = False

    def __init__(self, reason: object = "") -> None:
        text = _reason_text(reason)
        super().__init__(text)
        self.reason = text


class NonRetryable(AgentqError):
    """Raised by a step body (or a job) to fail at once, without any retry.

    Also honoured inside an exception group (see `agentq.retry.classify`).

    Args:
        reason: Recorded as the failure reason, verbatim (a non-str value is converted with
            `str`; at most `MAX_REASON_CHARS` are kept).
    """

    retryable = False

    def __init__(self, reason: object = "") -> None:
        text = _reason_text(reason)
        super().__init__(text)
        self.reason = text
class StepContextError(EngineError):
    """`ctx.call` or `ctx.wait_for_input` used outside the step attempt its ctx belongs to.

    A `StepContext` records calls only while its attempt runs: one kept after the step
    returned, shared with a task that outlives it, or built by hand cannot.
    """
