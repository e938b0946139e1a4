"""JSON encoding of everything agentq stores: step outputs, inputs, resume inputs, errors.

What is accepted, exactly (the same for every store):

- ``None``, ``bool``, ``int``, finite ``float``, ``str`` (encodable as UTF-8), and
  ``list``/``tuple`` and ``dict`` with ``str`` keys of those, nested to any depth.
  Tuples are stored as lists and come back as lists.
- Anything else (sets, bytes, datetimes, arbitrary objects, NaN and infinities, non-``str``
  dict keys, lone surrogates, ints too large to print, containers nested more than
  `MAX_DEPTH` levels or containing themselves) raises `PayloadError` naming the path of the
  value and its type,
  for example ``output['ids'] is a set``. Encode such values yourself (ISO strings for
  datetimes, lists for sets, base64 for bytes) before returning them.
- One encoded value may take at most `MAX_PAYLOAD_BYTES` bytes of UTF-8.

Text that only describes (failure and wait reasons, error messages, tracebacks) is never
refused: `storable_text` makes any str storable (lone surrogates and NUL escaped, cut at
`MAX_TEXT_CHARS`). The stores keep such text exactly as it returns it, and the engine reports
live reasons through it too, so a `RunResult` reads the same live and after a reload.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from agentq.errors import PayloadError

__all__ = [
    "JSON",
    "copy_json",
    "MAX_DEPTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_TEXT_CHARS",
    "decode",
    "dumps",
    "encode",
    "encode_copy",
    "is_decoded",
    "storable_text",
]

JSON = Any
"""A JSON-compatible value (see the module docstring for exactly what is accepted)."""

MAX_PAYLOAD_BYTES = 1_048_576
"""Largest encoded value (one output, input, or resume input), in bytes of UTF-8: 1 MiB."""

MAX_TEXT_CHARS = 65_536
"""Longest reason, error message or traceback kept, in characters; longer text is cut."""

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _one_shot() -> Callable[[Any], str]:
    """`_ENCODER.encode` without its per-call cost: `json.JSONEncoder.encode` builds a new C
    encoder (and a dict for cycle checks) for every value; this one is built once and kept.
    Without the cycle check, a value that contains itself raises `RecursionError` (as deep
    nesting does), which every caller treats as a refusal. The same text, byte for byte."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - a Python without the C accelerator
        return _ENCODER.encode
    chunks = make(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False,
        False,
    )
    join = "".join

    def dumps(value: Any) -> str:
        return join(chunks(value, 0))

    return dumps


dumps: Callable[[Any], str] = _one_shot()
"""Compact JSON text of `value`, as `encode` writes it, without `encode`'s checks (for values
checked already). Raises `ValueError` (NaN, infinities), `TypeError` (not JSON) or
`RecursionError` (a cycle, deep nesting)."""


MAX_DEPTH = 200
"""Deepest nesting of lists and dicts accepted in one value."""

_MAX_INT_BITS = 14_000  # about the 4,300 decimal digits Python will convert to text


def _find_problem(
    value: Any, path: str, depth: int = 0, seen: frozenset[int] = frozenset()
) -> str | None:
    """Return a description of the first value that is not JSON, or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            return f"{path} is an int of {value.bit_length()} bits, too large to store as JSON"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value!r}, not a finite number"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"{path} has a lone surrogate at index {exc.start} and is not UTF-8"
        return None
    if isinstance(value, list | tuple | dict):
        if id(value) in seen:
            return f"{path} refers to a list or dict that contains it (a cycle)"
        if depth >= MAX_DEPTH:
            shown = path if len(path) <= 80 else path[:80] + "…"
            return f"{shown} is nested more than {MAX_DEPTH} levels deep"
        inner = seen | {id(value)}
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    return (
                        f"{path} has a key {_safe_repr(key)} of type {type(key).__name__}; "
                        "keys must be str"
                    )
                problem = _find_problem(key, f"{path} key {key!r:.40}", depth + 1, inner)
                problem = problem or _find_problem(item, f"{path}[{key!r:.40}]", depth + 1, inner)
                if problem:
                    return problem
            return None
        for i, item in enumerate(value):
            problem = _find_problem(item, f"{path}[{i}]", depth + 1, inner)
            if problem:
                return problem
        return None
    kind = type(value).__name__
    return f"{path} is {_article(kind)} {kind} ({_safe_repr(value)}), which is not JSON"


def _article(word: str) -> str:
    """``"an"`` before a word read with a vowel sound (``an int``, ``an object``), else ``"a"``.

    By spelling, with the usual exceptions: ``a UUID``, ``a user``, ``an hour`` stay right.
    """
    lower = word.lower()
    if lower.startswith(("hour", "honest", "honor", "honour", "heir")):
        return "an"
    if word[:1] == "U" and word[1:2].isupper():  # an acronym read "you-": a UUID, a URL
        return "a"
    if lower.startswith(("uni", "use", "usu", "uti", "eu", "one")):
        return "a"
    return "an" if lower[:1] in ("a", "e", "i", "o", "u") else "a"


def _safe_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
    return text if len(text) <= 60 else text[:60] + "…"


def encode(value: Any, field: str = "value") -> str:
    """Encode `value` as compact JSON text.

    Args:
        value: The value to encode.
        field: Name used in error messages, e.g. ``"output"``.

    Returns:
        The JSON text.

    Raises:
        PayloadError: `value` (or something inside it) is not JSON, or the text is larger than
            `MAX_PAYLOAD_BYTES`. The message names the path and the type.

    Every payload is encoded on the hot path (a durable call's label and output, a step's
    output), so the common case costs the C encoder and one walk that builds nothing
    (`_fits`); only a refused value is walked again by `_find_problem`, which builds the path
    it names (3-5x cheaper than walking every value with its path first: docs/performance.md).
    """
    try:
        text = dumps(value)  # refuses NaN, cycles and what is not JSON at all
    except (ValueError, TypeError, RecursionError):
        text = None
    if text is None or not _fits(value, 0) or not _utf8(text):
        # Refused, or something the encoder took that is not stored (a non-str key, a huge
        # int, deep nesting, a lone surrogate): the slow walk names the value and its path.
        problem = _find_problem(value, field)
        if problem:
            raise PayloadError(problem, field)
        if text is None:  # defensive: _find_problem agrees with the encoder
            try:
                text = _ENCODER.encode(value)
            except (ValueError, TypeError, RecursionError) as exc:
                raise PayloadError(f"{field} cannot be encoded as JSON: {exc}", field) from exc
    _check_size(text, field)
    return text


def _check_size(text: str, field: str) -> None:
    if len(text) > MAX_PAYLOAD_BYTES // 4 and len(text.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        raise PayloadError(
            f"{field} is {len(text.encode('utf-8'))} bytes of JSON; the limit is "
            f"{MAX_PAYLOAD_BYTES} bytes",
            field,
        )


def encode_copy(value: Any, field: str = "value") -> tuple[Any, str]:
    """`encode` `value`, and return it as it reads back with its text: ``(decode(text), text)``.

    Args:
        value: The value to encode.
        field: Name used in error messages, e.g. ``"output"``.

    Returns:
        A copy that shares no dict or list with `value` (a str, number, bool or None is
        itself), equal to ``decode(text)`` in value and type (tuples become lists), and the
        JSON text.

    Raises:
        PayloadError: As `encode`.

    A value made only of dicts, lists, str, int, float, bool and None (the usual case) is
    copied in the walk that checks it, rather than decoded from its text (2-3x cheaper);
    anything else (a tuple, a subclass) takes `encode` and `decode`.
    """
    kind = type(value)
    if kind is str or kind is float or kind is bool or value is None:
        return value, encode(value, field)
    try:
        text: str | None = dumps(value)
    except (ValueError, TypeError, RecursionError):
        text = None
    copy = _NOT_PLAIN if text is None else _plain_copy(value, 0)
    if copy is _NOT_PLAIN or text is None or not _utf8(text):
        text = encode(value, field)  # raises, naming the value, if it is refused
        return (value if type(value) is int else decode(text)), text
    _check_size(text, field)
    return copy, text


_NOT_PLAIN = object()


def _plain_copy(value: Any, depth: int) -> Any:
    """A copy of a value the encoder accepted, if it is plain JSON that `_fits` (dicts with
    str keys, lists, str, int, float, bool, None, exactly those types); else `_NOT_PLAIN`."""
    kind = type(value)
    if kind is str or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        if depth >= MAX_DEPTH:
            return _NOT_PLAIN
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                return _NOT_PLAIN
            if type(item) is not str:
                item = _plain_copy(item, depth + 1)
                if item is _NOT_PLAIN:
                    return _NOT_PLAIN
            out[key] = item
        return out
    if kind is list:
        if depth >= MAX_DEPTH:
            return _NOT_PLAIN
        items = []
        for item in value:
            if type(item) is not str:
                item = _plain_copy(item, depth + 1)
                if item is _NOT_PLAIN:
                    return _NOT_PLAIN
            items.append(item)
        return items
    if kind is int and value.bit_length() <= _MAX_INT_BITS:
        return value
    return _NOT_PLAIN


def _fits(value: Any, depth: int) -> bool:
    """Whether a value the JSON encoder accepted is stored as it is (see `encode`).

    The encoder accepted it, so it holds no cycle, no non-finite float and no type outside
    JSON's; what it takes and agentq refuses is checked here, without building any path
    (False sends `encode` to `_find_problem`, which names the value): a non-str dict key,
    an int over `_MAX_INT_BITS`, nesting of `MAX_DEPTH` levels. Strings are checked on the
    encoded text at once (`_utf8`).
    """
    kind = type(value)
    if kind is str or kind is float or kind is bool or value is None:
        return True
    if kind is dict or isinstance(value, dict):
        if depth >= MAX_DEPTH:
            return False
        for key, item in value.items():
            if type(key) is not str and not isinstance(key, str):
                return False
            if type(item) is not str and not _fits(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        if depth >= MAX_DEPTH:
            return False
        return all(type(item) is str or _fits(item, depth + 1) for item in value)
    if isinstance(value, int):
        return value.bit_length() <= _MAX_INT_BITS
    return True  # a float or str subclass


def _utf8(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (it has no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable_text(text: str) -> str:
    """Return `text` as every store keeps it: lone surrogates and NUL written as backslash
    escapes, and text longer than `MAX_TEXT_CHARS` cut, saying how many characters were left
    out (``'…… [12 more characters]'``).

    Args:
        text: Any str.

    Returns:
        The storable text (`text` itself when it needs no change).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if len(text) > MAX_TEXT_CHARS:
        text = f"{text[:MAX_TEXT_CHARS]}… [{len(text) - MAX_TEXT_CHARS} more characters]"
    return text


# The C scanner json.loads ends in, without its Python (~850 of ~1,100 ns a small value).
_SCAN: Callable[[str, int], tuple[Any, int]] = vars(json.JSONDecoder())["scan_once"]


def decode(text: str | None) -> Any:
    """Decode JSON text written by `encode` (as `json.loads`: other text, with whitespace
    around its value or an error, goes through it); ``None`` decodes to ``None``."""
    if text is None:
        return None
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def copy_json(value: Any) -> Any:
    """A copy of a decoded JSON value that shares no dict or list with it (strings, numbers,
    booleans and None are immutable and shared). Cheaper than ``decode(encode(value))`` and
    `copy.deepcopy` for the small values of durable calls; `value` must be JSON as decoded
    (dicts with str keys, lists, scalars), which is what the stores hand out."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


def is_decoded(value: Any) -> bool:
    """Whether `value` is JSON exactly as `decode` would build it back from `encode`'s text.

    Dicts (the type itself) with str keys, lists, str, int, finite float, bool and None, at
    most `MAX_DEPTH` levels deep: ``decode(encode(value))`` would be equal to it, so a
    caller that wants a value as stored may take it as it is. A walk that builds nothing
    (cheaper than the round trip). False means only that the round trip could change it
    (a tuple becomes a list, a subclass its base type) or refuse it; True does not promise
    that a store takes it (text with a lone surrogate, or too large, is refused then).
    """
    return _decoded(value, 0)


def _decoded(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is dict:
        if depth >= MAX_DEPTH:
            return False
        for key, item in value.items():
            if type(key) is not str or (type(item) is not str and not _decoded(item, depth + 1)):
                return False
        return True
    if kind is list:
        return depth < MAX_DEPTH and all(
            type(item) is str or _decoded(item, depth + 1) for item in value
        )
    if kind is int:
        return bool(value.bit_length() <= _MAX_INT_BITS)
    if kind is float:
        return math.isfinite(value)
    return False
