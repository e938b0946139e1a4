"""Encode a service's state as a JSON object, restore it, and convert call results to JSON.

A snapshot is the instance's `vars()` in attribute order, every value encoded as JSON. It is
faithful, not just readable: restoring it gives an instance that behaves exactly like the
original, because the BFCL services keep state that plain JSON cannot hold:

- Python containers JSON lacks: a dict with non-string keys (`TwitterAPI.tweets` is keyed by
  int) becomes `{"$dict": [[key, value], ...]}`, a tuple `{"$tuple": [...]}`, a set
  `{"$set": [...]}` (members sorted by their JSON text, so the snapshot never depends on
  `PYTHONHASHSEED`), a non-finite float `{"$float": "nan"}`, a datetime `{"$datetime": iso}`.
  A plain dict is a JSON object only if every key is a string not starting with `$`.
- The services' own seeded `random.Random` (`_random`, which draws ids, access tokens,
  timestamps, temperatures): `{"$random": [version, [internal state], gauss_next]}`.
- The file system's `File` and `Directory` objects: `{"$object": "Directory", "state": {...}}`;
  only the classes in `OBJECT_TYPES` are accepted, in both directions.
- Shared references. `GorillaFileSystem` aliases objects: `_current_dir` points into the tree,
  every directory points to its parent, `mv` of a directory shares its `contents` dict with
  the detached old directory (still the children's `parent`), and `cp` of a directory shares
  the children themselves. Each mutable value (dict, list, set, object, Random) is written in
  full where it is first met and as `{"$ref": "/json/pointer/of/first/occurrence"}` after.

`File._last_modified` (the wall-clock time of the last write) is left out: no method reads it
and it would make snapshots differ from run to run. A restored file gets the restore time,
as a newly built `File` does.

Snapshots are deterministic: two runs of the same calls give the same JSON text.
"""

from __future__ import annotations

import datetime
import json
import math
import random
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.gorilla_file_system import (
    Directory,
    File,
)

from .errors import SnapshotError
from .jsontypes import JsonObject, JsonValue

T = TypeVar("T")

OBJECT_TYPES: Mapping[str, type] = {"Directory": Directory, "File": File}
"""Non-service classes found inside service states, by the name written in snapshots."""

EXCLUDED_ATTRIBUTES: Mapping[type, Mapping[str, Callable[[], object]]] = {
    File: {"_last_modified": datetime.datetime.now},
}
"""Attributes left out of snapshots, with the factory that fills them in on restore."""

_MUTABLE: frozenset[type] = frozenset({dict, list, set, random.Random, *OBJECT_TYPES.values()})
_KNOWN: frozenset[type] = _MUTABLE | {
    type(None),
    bool,
    int,
    float,
    str,
    tuple,
    frozenset,
    datetime.datetime,
}
_SCALARS: frozenset[type] = frozenset({bool, int, str})
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def snapshot(instance: object) -> JsonObject:
    """Encode an instance's state (its `vars()`) as a JSON object.

    Args:
        instance: A service instance.

    Returns:
        The snapshot; `json.dumps(..., allow_nan=False)` accepts it.

    Raises:
        SnapshotError: The state holds a value of a type this codec does not know.
    """
    return _Encoder().attributes(instance, "")


def restore(cls: type[T], state: JsonObject) -> T:
    """Build an instance of `cls` from a snapshot, without running `__init__`.

    Args:
        cls: The service class.
        state: A snapshot made by `snapshot` from an instance of `cls`.

    Returns:
        An instance whose state (and so behaviour) equals the snapshotted one.

    Raises:
        SnapshotError: The snapshot is malformed.
    """
    decoder = _Decoder()
    instance = cls.__new__(cls)
    decoder.fill(instance, state, "")
    return instance


def canonical_json(value: object) -> str:
    """Serialize a JSON value compactly, keeping key order (it is part of a service's state).

    Raises:
        ValueError: The value holds a non-finite float.
        TypeError: The value holds something JSON cannot write.
    """
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def to_json_result(value: object) -> JsonValue:
    """Convert a call's return value to plain JSON, deterministically.

    JSON values pass through; tuples become lists; sets become lists sorted by JSON text;
    non-string dict keys are converted as `json.dumps` does (`1` → `"1"`, `None` → `"null"`);
    non-finite floats and any other object (`mpmath.mpf`, `Decimal`, a `File`) become
    `str(value)`, with memory addresses removed. Convert right after the call: `str` of an
    `mpf` depends on the process-global `mpmath.mp.dps`, which `MathAPI.logarithm` sets.

    Args:
        value: What a service method returned.

    Returns:
        A JSON value; a reference cycle is cut as the string `"<cycle>"`.
    """
    return _result(value, set())


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class _Encoder:
    def __init__(self) -> None:
        self.seen: dict[int, str] = {}
        self.alive: list[object] = []  # keeps ids unique while encoding

    def attributes(self, instance: object, path: str) -> JsonObject:
        excluded = EXCLUDED_ATTRIBUTES.get(type(instance), {})
        return {
            name: self.value(value, f"{path}/{_escape(name)}")
            for name, value in vars(instance).items()
            if name not in excluded
        }

    def value(self, value: object, path: str) -> JsonValue:
        kind = type(value)
        if kind not in _KNOWN:  # exact types only: a subclass may behave differently
            raise SnapshotError(f"cannot snapshot {path or '/'}: unknown type {kind.__qualname__}")
        if value is None or isinstance(value, bool | int | str):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"$float": repr(value)}
        if isinstance(value, tuple):
            return {"$tuple": [self.value(x, f"{path}/$tuple/{i}") for i, x in enumerate(value)]}
        if isinstance(value, frozenset):
            return {"$frozenset": self.members(value, f"{path}/$frozenset")}
        if isinstance(value, datetime.datetime):
            return {"$datetime": value.isoformat()}
        if id(value) in self.seen:
            return {"$ref": self.seen[id(value)]}
        self.seen[id(value)] = path
        self.alive.append(value)
        if isinstance(value, list):
            return [self.value(x, f"{path}/{i}") for i, x in enumerate(value)]
        if isinstance(value, dict):
            return self.mapping(value, path)
        if isinstance(value, set):
            return {"$set": self.members(value, f"{path}/$set")}
        if isinstance(value, random.Random):
            version, internal, gauss = value.getstate()
            return {"$random": [version, list(internal), gauss]}
        name = next(name for name, cls in OBJECT_TYPES.items() if cls is kind)
        return {"$object": name, "state": self.attributes(value, f"{path}/state")}

    def mapping(self, value: dict[object, object], path: str) -> JsonValue:
        if all(type(key) is str and not key.startswith("$") for key in value):
            return {
                str(key): self.value(item, f"{path}/{_escape(str(key))}")
                for key, item in value.items()
            }
        pairs: list[JsonValue] = [
            [self.value(key, f"{path}/$dict/{i}/0"), self.value(item, f"{path}/$dict/{i}/1")]
            for i, (key, item) in enumerate(value.items())
        ]
        return {"$dict": pairs}

    def members(self, value: set[Any] | frozenset[Any], path: str) -> list[JsonValue]:
        for member in value:
            if type(member) in _MUTABLE:
                raise SnapshotError(f"cannot snapshot {path}: a set holds a mutable object")
        encoded = [self.value(member, path) for member in value]
        return sorted(encoded, key=canonical_json)


class _Decoder:
    def __init__(self) -> None:
        self.at: dict[str, object] = {}

    def fill(self, instance: object, state: JsonValue, path: str) -> None:
        if not isinstance(state, dict):
            raise SnapshotError(f"corrupt snapshot at {path or '/'}: expected an object")
        for name, value in state.items():
            object.__setattr__(instance, name, self.value(value, f"{path}/{_escape(name)}"))
        for name, factory in EXCLUDED_ATTRIBUTES.get(type(instance), {}).items():
            object.__setattr__(instance, name, factory())

    def value(self, value: JsonValue, path: str) -> Any:
        if isinstance(value, list):
            items: list[object] = []
            self.at[path] = items
            items.extend(self.value(x, f"{path}/{i}") for i, x in enumerate(value))
            return items
        if not isinstance(value, dict):
            return value
        tag = next(iter(value), "")
        if not tag.startswith("$"):
            mapping: dict[str, object] = {}
            self.at[path] = mapping
            for key, item in value.items():
                mapping[key] = self.value(item, f"{path}/{_escape(key)}")
            return mapping
        try:
            return self.tagged(tag, value, path)
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise SnapshotError(f"corrupt snapshot at {path or '/'}: {error!r}") from error

    def tagged(self, tag: str, value: JsonObject, path: str) -> object:
        body = value[tag]
        if tag == "$ref":
            return self.at[str(body)]
        if tag == "$float":
            return float(str(body))
        if tag == "$datetime":
            return datetime.datetime.fromisoformat(str(body))
        if tag == "$tuple":
            return tuple(self.value(x, f"{path}/$tuple/{i}") for i, x in enumerate(_list(body)))
        if tag == "$frozenset":
            return frozenset(self.value(x, f"{path}/$frozenset") for x in _list(body))
        if tag == "$set":
            members: set[object] = set()
            self.at[path] = members
            members.update(self.value(x, f"{path}/$set") for x in _list(body))
            return members
        if tag == "$dict":
            mapping: dict[object, object] = {}
            self.at[path] = mapping
            for i, pair in enumerate(_list(body)):
                key, item = _list(pair)
                mapping[self.value(key, f"{path}/$dict/{i}/0")] = self.value(
                    item, f"{path}/$dict/{i}/1"
                )
            return mapping
        if tag == "$random":
            version, internal, gauss = _list(body)
            generator = random.Random()
            generator.setstate((version, tuple(_list(internal)), gauss))
            self.at[path] = generator
            return generator
        if tag == "$object":
            cls = OBJECT_TYPES[str(body)]
            instance: object = object.__new__(cls)
            self.at[path] = instance
            self.fill(instance, value["state"], f"{path}/state")
            return instance
        raise ValueError(f"unknown tag {tag}")


def _list(value: JsonValue) -> list[JsonValue]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _result(value: object, active: set[int]) -> JsonValue:
    if value is None or (isinstance(value, bool | int | str) and type(value) in _SCALARS):
        return value
    if isinstance(value, float) and type(value) is float and math.isfinite(value):
        return value
    if id(value) in active:
        return "<cycle>"
    active.add(id(value))
    try:
        if isinstance(value, dict):
            return {_result_key(key): _result(item, active) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [_result(item, active) for item in value]
        if isinstance(value, set | frozenset):
            return sorted((_result(item, active) for item in value), key=canonical_json)
        return _ADDRESS.sub("", str(value))
    finally:
        active.discard(id(value))


def _result_key(key: object) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)
    return _ADDRESS.sub("", str(key))
