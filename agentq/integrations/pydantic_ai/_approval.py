"""The answer to an approval: what `engine.resume` delivers, checked and turned into pydantic-ai's.

The resume input of an agent's approval wait is ``{"approved": bool, "note": str,
"override_args": dict | None}`` (``note`` and ``override_args`` optional; a bare ``True`` or
``False`` is accepted too):

- approved, no ``override_args`` → `ToolApproved()`: the tool runs with the model's arguments;
- approved with ``override_args`` → `ToolApproved(override_args=...)`: it runs with those;
- not approved → `ToolDenied(note)`: the tool does not run and the model reads the note (or
  pydantic-ai's default message when the note is empty).

`ask` waits for the decision on one tool call inside a run, under the key the journal gives
it (``approval:<n>.<i>:<tool_call_id>``), asking again under a new key after an invalid one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic_ai import ToolApproved, ToolDenied
from pydantic_ai.messages import ToolCallPart

from agentq.integrations.pydantic_ai._journal import RunJournal, args_digest

__all__ = ["ArgsProblem", "approval_input", "ask", "decide"]

ArgsProblem = Callable[[str, Mapping[str, Any]], str | None]
"""``check_args(tool, args)``: what is wrong with `args` for `tool`, or None."""

_KEYS = frozenset({"approved", "note", "override_args"})


def approval_input(
    approved: bool, note: str = "", override_args: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Return the resume input of a decision, checked.

    Args:
        approved: Whether the tool call may run.
        note: A message for the model (read by it when the call is denied).
        override_args: Arguments to run the tool with instead of the model's (approved only).

    Returns:
        ``{"approved": approved, "note": note, "override_args": dict | None}``.

    Raises:
        TypeError: A value of the wrong type (named in the message).
        ValueError: `override_args` given with ``approved=False``.
    """
    if not isinstance(approved, bool):
        raise TypeError(f"approved must be a bool, got {approved!r}")
    if not isinstance(note, str):
        raise TypeError(f"note must be a str, got {note!r}")
    if override_args is not None and not isinstance(override_args, Mapping):
        raise TypeError(f"override_args must be a dict of arguments or None, got {override_args!r}")
    if override_args is not None and not approved:
        raise ValueError("override_args only apply to an approved call (approved=True)")
    args = None if override_args is None else dict(override_args)
    return {"approved": approved, "note": note, "override_args": args}


def decide(answer: object) -> tuple[ToolApproved | ToolDenied | None, str]:
    """Turn a resume input into pydantic-ai's decision, or say what is wrong with it.

    Returns:
        ``(decision, "")``, or ``(None, problem)`` for an input that is not a decision.
    """
    if isinstance(answer, bool):
        return (ToolApproved() if answer else ToolDenied()), ""
    if not isinstance(answer, Mapping):
        return None, f"the answer {answer!r} is not a decision"
    extra = sorted(set(answer) - _KEYS)
    try:
        if extra:
            raise ValueError(f"unknown fields {extra}")
        checked = approval_input(
            answer.get("approved"),  # type: ignore[arg-type]
            "" if answer.get("note") is None else answer["note"],
            answer.get("override_args"),
        )
    except (TypeError, ValueError) as exc:
        return None, f"the answer {dict(answer)!r} is not a decision ({exc})"
    if not checked["approved"]:
        return (ToolDenied(checked["note"]) if checked["note"] else ToolDenied()), ""
    return ToolApproved(override_args=checked["override_args"]), ""


async def ask(
    journal: RunJournal, call: ToolCallPart, place: int, check_args: ArgsProblem | None
) -> ToolApproved | ToolDenied:
    """Wait for the decision on the tool call `call` (at `place` of the current response);
    ask again (a new key) after an invalid answer.

    An approval whose ``override_args`` do not fit the tool's schema is invalid too (they are
    the complete arguments, pydantic-ai's meaning): asked again, the fields at fault named.

    Raises:
        InputRequested: The run waits for the decision (the step parks).
        ReplayDivergenceError: The log has another operation here.
    """
    tool, args = call.tool_name, call.args_as_dict()

    def checked(answer: object) -> tuple[ToolApproved | ToolDenied | None, str]:
        decision, problem = decide(answer)
        override = decision.override_args if isinstance(decision, ToolApproved) else None
        if override is not None and check_args is not None:
            wrong = check_args(tool, override)
            if wrong is not None:
                return None, f"the override_args {override!r:.120} do not fit `{tool}` ({wrong})"
        return decision, problem

    details = {
        "tool": tool,
        "args": args,
        "tool_call_id": call.tool_call_id,
        "agent": journal.agent_name,
    }
    reason = f"approve tool call {tool}?"
    digest = args_digest(args)
    op = journal.approval(tool, call.tool_call_id, place, digest, 0)
    answer = await journal.ctx.wait_for_input(op.key, reason, details=details)
    decision, problem = checked(answer)
    asked = 1
    while decision is None:
        op = journal.approval(tool, call.tool_call_id, place, digest, asked)
        asked += 1
        answer = await journal.ctx.wait_for_input(op.key, f"{problem}; {reason}", details=details)
        decision, problem = checked(answer)
    return decision
