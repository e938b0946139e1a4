"""`agentq.codec.encode`: its fast path (the C encoder, then a walk without paths) refuses
exactly what the path-naming walk (`_find_problem`) refuses, with the same message."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentq.codec import (
    _MAX_INT_BITS,
    MAX_DEPTH,
    _find_problem,
    decode,
    encode,
    encode_copy,
    is_decoded,
)
from agentq.errors import PayloadError


class Colour(enum.IntEnum):
    RED = 1


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities included: refused
    st.text(),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=2),
    st.just(1 << (_MAX_INT_BITS + 1)),
    st.just(Colour.RED),
    st.sets(st.integers(), max_size=2),
    st.binary(max_size=3),
)
_keys = st.one_of(st.text(max_size=4), st.integers(), st.none(), st.booleans())
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(_keys, inner, max_size=4),
    ),
    max_leaves=20,
)


def _reference(value: Any) -> str:
    """What `encode` returned before its fast path: walk with paths, then encode."""
    problem = _find_problem(value, "output")
    if problem:
        raise PayloadError(problem, "output")
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@settings(max_examples=400, deadline=None)
@given(_values)
def test_encode_refuses_and_names_exactly_what_the_walk_does(value: Any) -> None:
    try:
        expected: str | PayloadError = _reference(value)
    except PayloadError as error:
        expected = error
    if isinstance(expected, PayloadError):
        with pytest.raises(PayloadError) as info:
            encode(value, "output")
        assert str(info.value) == str(expected)
    else:
        assert encode(value, "output") == expected


def _shape(value: Any) -> Any:
    """`value` with every type made visible (``1`` and ``True``, ``1.0`` differ)."""
    if isinstance(value, dict):
        return ("dict", [(type(k), k, _shape(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_shape(v) for v in value])
    return (type(value), value if value == value else "nan")


def _containers(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [id(value)] + [i for v in value.values() for i in _containers(v)]
    if isinstance(value, list | tuple):
        return [id(value)] + [i for v in value for i in _containers(v)]
    return []


@settings(max_examples=400, deadline=None)
@given(_values)
def test_encode_copy_is_the_decoded_text_and_shares_no_container(value: Any) -> None:
    try:
        expected = _reference(value)
    except PayloadError as error:
        with pytest.raises(PayloadError) as info:
            encode_copy(value, "output")
        assert str(info.value) == str(error)
        return
    copy, text = encode_copy(value, "output")
    assert text == expected
    assert _shape(copy) == _shape(decode(text))  # tuples, IntEnum members: as read back
    assert not set(_containers(copy)) & set(_containers(value))


def test_encode_copy_of_a_shared_list_copies_each_occurrence() -> None:
    shared = [1, {"a": [2.5, None]}]
    copy, text = encode_copy({"x": shared, "y": shared}, "output")
    assert text == '{"x":[1,{"a":[2.5,null]}],"y":[1,{"a":[2.5,null]}]}'
    assert copy == {"x": shared, "y": shared}
    assert copy["x"] is not copy["y"] and copy["x"][1] is not shared[1]


def test_what_the_json_encoder_takes_but_agentq_refuses_is_named() -> None:
    cases: list[tuple[Any, str]] = [
        ({"a": {1: "x"}}, "output['a'] has a key 1 of type int; keys must be str"),
        ([1, 1 << (_MAX_INT_BITS + 1)], "output[1] is an int of"),
        (["ok", "\ud800"], "output[1] has a lone surrogate at index 0"),
        ({"\udc80": 1}, "output key '\\udc80' has a lone surrogate"),
    ]
    for value, message in cases:
        with pytest.raises(PayloadError) as info:
            encode(value, "output")
        assert str(info.value).startswith(message), str(info.value)


def test_nesting_at_the_limit_is_kept_and_one_deeper_refused() -> None:
    def nested(levels: int) -> Any:
        value: Any = 0
        for _ in range(levels):
            value = [value]
        return value

    assert encode(nested(MAX_DEPTH)) == "[" * MAX_DEPTH + "0" + "]" * MAX_DEPTH
    with pytest.raises(PayloadError, match=f"nested more than {MAX_DEPTH} levels"):
        encode(nested(MAX_DEPTH + 1))


def test_a_cycle_is_named_not_a_recursion_error() -> None:
    cycle: list[Any] = [1]
    cycle.append([cycle, cycle])
    with pytest.raises(PayloadError, match="a cycle"):
        encode(cycle, "output")


def test_first_difference_names_the_path_and_short_excerpts() -> None:
    from agentq.difference import first_difference

    long = "x" * 5000
    assert first_difference({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2]}) is None
    assert first_difference({"p": long + "1"}, {"p": long + "2"}, "input") == (
        f"input['p']: '{'x' * 59}… vs '{'x' * 59}…"
    )
    assert first_difference({"a": 1}, {"a": 1, "o": {"m": "x"}}, "input") == (
        "input['o']: missing vs {'m': 'x'}"
    )
    found = first_difference({"h": [{"t": 1}, 2]}, {"h": [{"t": 3}, 2]})
    assert found == "value['h'][0]['t']: 1 vs 3"
    assert first_difference([1, 2, 3], [1, 2]) == "value: 3 items vs 2"
    assert first_difference(1, True) == "value: 1 vs True"  # equal in Python, not in JSON


_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=2))
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner,
                                                                max_size=3),
    max_leaves=10,
)


@given(_json, _json)
@settings(max_examples=200)
def test_first_difference_is_none_exactly_for_equal_json(a: Any, b: Any) -> None:
    from agentq.difference import first_difference

    same = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert (first_difference(a, b) is None) == same


@settings(max_examples=400, deadline=None)
@given(_values)
def test_is_decoded_holds_exactly_for_what_a_round_trip_leaves_as_it_is(value: Any) -> None:
    """`is_decoded` lets a caller skip ``decode(encode(value))`` (a durable call's usage
    function): it must never say so for a value the round trip changes or refuses for its
    types, and must say so for everything `decode` builds."""
    try:
        text = encode(value, "output")
    except PayloadError:
        # only text the store refuses (a lone surrogate) may pass the walk
        assert not is_decoded(value) or "lone surrogate" in str(_find_problem(value, "output"))
        return
    back = decode(text)
    assert is_decoded(back)
    if is_decoded(value):
        assert back == value and encode(back) == text


def test_is_decoded_refuses_what_the_round_trip_would_change() -> None:
    assert is_decoded({"a": [1, 2.5, "x", None, True, {"b": []}]})
    for changed in ((1, 2), {"a": (1,)}, {1: "x"}, Colour.RED, float("nan"), [float("inf")],
                    1 << (_MAX_INT_BITS + 1), {"a": {1, 2}}, b"x"):
        assert not is_decoded(changed), changed
    deep: Any = 0
    for _ in range(MAX_DEPTH):
        deep = [deep]
    assert is_decoded(deep) and not is_decoded([deep])


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=20,
    )
)
def test_decode_reads_what_json_loads_reads(value: object) -> None:
    text = encode(value) if is_decoded(value) else json.dumps(value)
    assert decode(text) == json.loads(text)
    for other in (f" {text}", f"{text} ", f"{text}x", text[:-1] or "[", ""):
        try:
            expected = json.loads(other)
        except json.JSONDecodeError as exc:
            with pytest.raises(json.JSONDecodeError) as raised:
                decode(other)
            assert str(raised.value) == str(exc)
        else:
            assert decode(other) == expected
