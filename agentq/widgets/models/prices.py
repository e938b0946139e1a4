"""What a model request cost: a price table the person sets, and the arithmetic. Pure.

A price is per **million** tokens, input and output apart, in whatever currency the person
works in (the views print the number with no currency sign). The table maps the model name
as the log records it (the request's ``usage["model"]``, else its label's ``model``: for
pydantic-ai ``"openai:gpt-4o"`` style names, or ``"function:respond:"`` for a
``FunctionModel``) to a `Price`. A model missing from the table has no cost (None, shown as
a dash), never a guessed one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Price", "PriceTable", "cost_of", "price_table", "tokens_of"]


@dataclass(frozen=True, slots=True)
class Price:
    """The price of one model, per million tokens.

    Attributes:
        input_per_million: Price of one million input (prompt) tokens, >= 0.
        output_per_million: Price of one million output (completion) tokens, >= 0.

    Raises:
        TypeError: A price is not a real number (bool refused).
        ValueError: A price is negative, NaN or infinite.
    """

    input_per_million: float
    output_per_million: float

    def __post_init__(self) -> None:
        for name in ("input_per_million", "output_per_million"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"Price.{name} must be a number, got {value!r:.60}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Price.{name} must be a finite number >= 0, got {value!r}")

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Return the cost of a request of `input_tokens` in and `output_tokens` out."""
        return (input_tokens * self.input_per_million
                + output_tokens * self.output_per_million) / 1_000_000


PriceTable = Mapping[str, Price]
"""Model name -> `Price` (see `price_table`)."""


def price_table(prices: Mapping[str, Price | tuple[float, float]] | None) -> dict[str, Price]:
    """Return `prices` as a table of `Price` values.

    Args:
        prices: ``{model_name: Price(...)}`` or ``{model_name: (input_per_million,
            output_per_million)}``, or None (no prices: every cost is unknown).

    Returns:
        A new dict of model name -> `Price`.

    Raises:
        TypeError: `prices` is not a mapping, a name is not a str, or a value is neither a
            `Price` nor a pair of numbers (the message names the model).
        ValueError: A price is negative or not finite (the message names the model).
    """
    if prices is None:
        return {}
    if not isinstance(prices, Mapping):
        raise TypeError(f"prices must be a mapping of model name to price, got {prices!r:.80}")
    table: dict[str, Price] = {}
    for name, value in prices.items():
        if not isinstance(name, str):
            raise TypeError(f"prices: a model name must be a str, got {name!r:.60}")
        if isinstance(value, Price):
            table[name] = value
            continue
        if not isinstance(value, tuple) or len(value) != 2:
            raise TypeError(f"prices[{name!r}] must be a Price or (input_per_million, "
                            f"output_per_million), got {value!r:.60}")
        try:
            table[name] = Price(*value)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"prices[{name!r}]: {exc}") from None
    return table


def tokens_of(usage: Mapping[str, Any] | None) -> tuple[int, int]:
    """Return ``(input_tokens, output_tokens)`` of a recorded usage (0 for what is missing)."""
    if not usage:
        return 0, 0
    i, o = usage.get("input_tokens"), usage.get("output_tokens")
    return _count(i), _count(o)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def cost_of(model: str | None, usage: Mapping[str, Any] | None,
            prices: PriceTable) -> float | None:
    """Return the cost of one request of `model` with `usage`, or None when `model` has no
    price in `prices` (or is unknown)."""
    price = prices.get(model) if model is not None else None
    if price is None:
        return None
    return price.cost(*tokens_of(usage))
