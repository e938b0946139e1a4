"""Errors of the BFCL replay demo.

Every error raised on purpose by `examples.bfcl_replay` derives from `ReplayError`::

    ReplayError
     ├── DatasetError             a data file is not shaped like BFCL's multi-turn data
     │    └── CallParseError      a ground-truth call's text is not a plain literal call
     ├── CallError                a call cannot be made; nothing was applied
     │    ├── UnknownFunctionError    no involved service offers the function
     │    └── CallArgumentError       the arguments do not fit the function's signature
     ├── ToolCallError            the service method raised (e.g. on an argument of a wrong type)
     ├── SnapshotError            a service state cannot be encoded or decoded as JSON
     ├── TransientToolError       injected fault raised before anything is applied; retry it
     └── KeyConflictError         an idempotency key was reused for a different call

BFCL itself feeds an exception raised inside a service method back to the model as the call's
text ("Error during execution: ..."). The replay treats it as a failed call instead
(`ToolCallError`): no ground-truth call of the 200 tasks raises, so a raise means bad data.
"""

from __future__ import annotations


class ReplayError(Exception):
    """Root of every error the BFCL replay demo raises on purpose."""


class DatasetError(ReplayError):
    """A data file is not shaped like BFCL's multi-turn data (bad JSON, missing id, ...)."""


class CallParseError(DatasetError):
    """A ground-truth call's text is not a call of a plain name with literal arguments.

    Attributes:
        task_id: Id of the task holding the call.
        turn: 0-based index of the user turn.
        index: 0-based position of the call within the turn.
        text: The call's text, as found in the data.
        reason: What is wrong with it.
    """

    def __init__(self, task_id: str, turn: int, index: int, text: str, reason: str) -> None:
        self.task_id = task_id
        self.turn = turn
        self.index = index
        self.text = text
        self.reason = reason
        super().__init__(
            f"task {task_id} turn {turn} call {index}: cannot parse {text!r}: {reason}"
        )


class CallError(ReplayError):
    """A call cannot be made as written; nothing was applied to any service."""


class UnknownFunctionError(CallError):
    """No service involved in the task offers the function.

    Attributes:
        function: The function name of the call.
        involved_classes: The service classes the task involves.
    """

    def __init__(self, function: str, involved_classes: tuple[str, ...], hint: str = "") -> None:
        self.function = function
        self.involved_classes = involved_classes
        offered = ", ".join(involved_classes) or "no service"
        super().__init__(f"unknown function {function!r}: not offered by {offered}{hint}")


class CallArgumentError(CallError):
    """The call's arguments do not fit the function's signature or parameter types.

    Attributes:
        text: The call's text.
        reason: What does not fit.
    """

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reason = reason
        super().__init__(f"bad arguments in {text!r}: {reason}")


class ToolCallError(ReplayError):
    """The service method raised; the call is not applied (its partial effect is discarded).

    The exception the method raised is the `__cause__`.

    Attributes:
        text: The call's text.
        error: The exception the method raised.
    """

    def __init__(self, text: str, error: Exception) -> None:
        self.text = text
        self.error = error
        super().__init__(f"{text} raised {type(error).__name__}: {error}")


class SnapshotError(ReplayError):
    """A service state holds a value that cannot be encoded as JSON, or a snapshot is corrupt."""


class TransientToolError(ReplayError):
    """An injected transient fault: raised before anything was applied, so a retry is safe."""


class KeyConflictError(ReplayError):
    """An idempotency key was already applied to a different call.

    Attributes:
        idempotency_key: The reused key.
    """

    def __init__(self, idempotency_key: str, applied: str, requested: str) -> None:
        self.idempotency_key = idempotency_key
        super().__init__(
            f"idempotency key {idempotency_key!r} was applied to {applied!r}, not to {requested!r}"
        )
