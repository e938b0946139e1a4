"""`compare(store, run_a, run_b)`: two agent runs side by side (a run and its fork, two
versions of an agent), as a value a notebook cell shows.

Reads both runs (`agentq.widgets.models.runs.load_conversation`) and returns a `Compared`:
the `Comparison` (the first model request where they differ, and why) whose
``_repr_html_`` is `agentq.widgets.html.conversation.compare_html` (each run's answer,
tokens, cost, time and requests, the differing request outlined). No ipywidgets needed; the
`RunView` has the same as a button ("Compare with parent") and `RunView.compare`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentq.widgets.html.conversation import compare_html
from agentq.widgets.models.prices import Price, price_table
from agentq.widgets.models.runs import Comparison, compare_conversations, load_conversation

__all__ = ["Compared", "compare"]


@dataclass(frozen=True, slots=True)
class Compared:
    """A comparison of two runs as a notebook shows it (``_repr_html_``).

    Attributes:
        comparison: The `Comparison` (``a``, ``b``, ``diverged_at``, ``why``).
    """

    comparison: Comparison

    @property
    def diverged_at(self) -> int | None:
        """The first model request (index) where the runs differ, None when none does."""
        return self.comparison.diverged_at

    @property
    def why(self) -> str:
        """What differs there, in words ('' when nothing does)."""
        return self.comparison.why

    def _repr_html_(self) -> str:
        return compare_html(self.comparison)


async def compare(
    store_or_engine: Any,
    run_a: str,
    run_b: str,
    *,
    prices: Mapping[str, Price | tuple[float, float]] | None = None,
) -> Compared:
    """Compare agent runs `run_a` and `run_b` (see the module docstring).

    Args:
        store_or_engine: A `DurableStore`, or a `WorkflowEngine` (its store is read).
        run_a, run_b: The two run ids.
        prices: The price table (as `RunView` takes it).

    Returns:
        A `Compared` (displays itself in a notebook).

    Raises:
        UnknownWorkflowError: A run is not stored.
        TypeError, ValueError: A bad `prices`.
    """
    store = getattr(store_or_engine, "store", store_or_engine)
    table = price_table(prices)
    a = await load_conversation(store, run_a, prices=table)
    b = await load_conversation(store, run_b, prices=table)
    return Compared(compare_conversations(a, b))
