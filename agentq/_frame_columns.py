"""Plain Python values → typed pandas columns, fast: the mechanism under `agentq.frames`.

Private to the notebook layer. pandas and numpy are passed in (``modules()`` imports them, or
raises `MissingExtraError` naming the extra), so importing this module needs neither. Each
function turns one column of values into a Series of the dtype the frames promise: UTC
timestamps, nullable text and integers, decoded JSON objects, categories.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from agentq.extras import require

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "categorical",
    "decoded",
    "gc_paused",
    "modules",
    "nullable_ints",
    "objects",
    "text",
    "utc",
]

_NAT = -(2**63)  # the int64 that numpy reads as NaT


def modules() -> tuple[Any, Any]:
    """Return the pandas and numpy modules (Any: the runtime modules, typed by the stubs)."""
    return require("pandas", "notebook"), require("numpy", "notebook")


@contextmanager
def gc_paused() -> Iterator[None]:
    # Turning a million tuples into columns allocates millions of objects; the cyclic collector
    # would walk them over and over (4x slower). Nothing built here holds a reference cycle.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_MAX_SECONDS = 9.2e9  # datetime64[ns] spans about ±9.22e9 s around 1970


def utc(npm: Any, pdm: Any, seconds: Sequence[float | None]) -> pd.Series:
    """Unix seconds (None = missing) → a ``datetime64[ns, UTC]`` Series, microsecond-exact.

    Times outside what datetime64[ns] can hold (before 1678 or after 2261) become NaT rather
    than wrapping around.
    """
    values = npm.asarray(seconds, dtype=npm.float64) if len(seconds) else npm.empty(0)
    missing = npm.isnan(values) | (npm.abs(values) >= _MAX_SECONDS)
    micros = npm.round(npm.where(missing, 0.0, values) * 1e6).astype(npm.int64)
    nanos = micros * 1000
    nanos[missing] = _NAT
    out: pd.Series = pdm.Series(nanos.view("datetime64[ns]"), copy=False).dt.tz_localize("UTC")
    return out


def objects(npm: Any, values: Sequence[Any]) -> Any:
    """Values → a 1-d numpy object array (no conversion of the values)."""
    return npm.fromiter(values, dtype=object, count=len(values))


def text(pdm: Any, npm: Any, values: Sequence[str | None]) -> pd.Series:
    """Strings (None = missing) → a nullable ``string`` Series (python storage)."""
    array = pdm.array(objects(npm, values), dtype=pdm.StringDtype("python"))
    out: pd.Series = pdm.Series(array, copy=False)
    return out


def nullable_ints(pdm: Any, npm: Any, values: Sequence[int | None]) -> pd.Series:
    """Integers (None = missing) → a nullable ``Int64`` Series."""
    cells = objects(npm, values)
    missing = npm.equal(cells, None)
    ints = npm.where(missing, 0, cells).astype(npm.int64)
    out: pd.Series = pdm.Series(pdm.arrays.IntegerArray(ints, missing), copy=False)
    return out


def decoded(pdm: Any, npm: Any, texts: Sequence[str | None]) -> pd.Series:
    """JSON texts (None = absent) → an object Series of decoded values."""
    cells = objects(npm, texts)
    present = ~npm.equal(cells, None)
    count = int(present.sum())
    if count:
        # One json.loads of "[t1,t2,...]" is 3-4x faster than one call per text; the count
        # check catches a text that is not exactly one JSON value.
        values: list[Any] = json.loads("[" + ",".join(cells[present]) + "]")
        if len(values) != count:
            values = [json.loads(t) for t in cells[present]]
        cells[present] = npm.fromiter(values, dtype=object, count=count)
    out: pd.Series = pdm.Series(cells, dtype=object, copy=False)
    return out


class _Codes(dict[str, int]):
    """Category codes by value; -1 (missing) for a value that is not a category."""

    def __missing__(self, key: str) -> int:
        return -1


def categorical(pdm: Any, npm: Any, values: Sequence[str], categories: list[str]) -> pd.Series:
    """Values → a ``category`` Series of exactly `categories` (others become missing)."""
    codes = _Codes((c, i) for i, c in enumerate(categories))
    array = npm.fromiter(map(codes.__getitem__, values), dtype=npm.int8, count=len(values))
    out: pd.Series = pdm.Series(pdm.Categorical.from_codes(array, categories), copy=False)
    return out
