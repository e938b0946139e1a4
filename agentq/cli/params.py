"""The command line's own option types: whole numbers and JSON, whose errors name the value.

click's usage errors (exit code 2) are built from these messages; the group prints them
through `agentq.cli.literal.visible`, so the value shows as typed, controls made visible.
"""

from __future__ import annotations

import json
from typing import Any

import click

__all__ = ["WholeNumber", "json_value"]


class WholeNumber(click.ParamType[int, Any]):
    """A whole number ``>= least``; anything else is a usage error naming the value.

    ``events --after x`` says ``'x' is not a whole number (an event's sequence number, 0 or
    more)`` instead of click's ``'x' is not a valid integer range``.
    """

    name = "N"

    def __init__(self, least: int, meaning: str) -> None:
        """Args:
        least: The smallest value accepted.
        meaning: What the number is, for the error (``"an event's sequence number"``).
        """
        self.least = least
        self.meaning = meaning

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> int:
        """Return `value` as an int (an int passes through).

        Raises:
            click.BadParameter: `value` is not a whole number, or below `least`.
        """
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(str(value).strip(), 10)
            except ValueError:
                number = None
        if number is None or number < self.least:
            self.fail(f"{str(value)!r} is not a whole number ({self.meaning}, "
                      f"{self.least} or more)", param, ctx)
        return number


def json_value(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    """A click callback: the option's text decoded as JSON (None when not given).

    Raises:
        click.BadParameter: The text is not JSON (the message quotes it).
    """
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not JSON ({exc.msg} at character {exc.pos}): {value!r}"
        ) from None
