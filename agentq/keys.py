"""Validation of idempotency keys and workflow ids.

Keys are compared byte-exactly: no Unicode normalisation is applied, so "café" in NFC and in
NFD are two different keys, as are "k" and "k ". A key must be a non-empty `str` that encodes
as UTF-8 (no lone surrogates) in at most `MAX_KEY_BYTES` bytes. Any other character, NUL
included, is allowed.
"""

from __future__ import annotations

import hashlib

from agentq.errors import InvalidKeyError

__all__ = ["MAX_KEY_BYTES", "call_queue_key", "validate_key"]

MAX_KEY_BYTES = 1024
"""Longest idempotency key or workflow id, in bytes of UTF-8."""


def _preview(value: str) -> str:
    shown = value if len(value) <= 40 else value[:40] + "…"
    return repr(shown)


def validate_key(value: object, what: str = "idempotency key") -> str:
    """Return `value` if it is a valid key, else raise.

    Args:
        value: The candidate key.
        what: How to name the value in the error message.

    Raises:
        TypeError: `value` is not a `str`.
        InvalidKeyError: `value` is empty, contains a lone surrogate, or is longer than
            `MAX_KEY_BYTES` bytes of UTF-8.
    """
    if type(value) is str and value.isascii() and 0 < len(value) <= MAX_KEY_BYTES:
        return value  # the common case: one byte per character, nothing to encode
    if type(value) is not str:
        if isinstance(value, str):
            value = str(value)
        else:
            raise TypeError(f"{what} must be a str, got {type(value).__name__}: {value!r}")
    if not value:
        raise InvalidKeyError(f"{what} must not be empty")
    if len(value) > MAX_KEY_BYTES:
        raise InvalidKeyError(
            f"{what} {_preview(value)} is {len(value)} characters; the limit is "
            f"{MAX_KEY_BYTES} bytes of UTF-8"
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidKeyError(
            f"{what} {_preview(value)} cannot be encoded as UTF-8 "
            f"(lone surrogate at index {exc.start})"
        ) from None
    if size > MAX_KEY_BYTES:
        raise InvalidKeyError(
            f"{what} {_preview(value)} is {size} bytes of UTF-8; the limit is {MAX_KEY_BYTES}"
        )
    return value


def call_queue_key(workflow_id: str, key: str) -> str:
    """The queue key of a durable call (``ctx.call``): its key scoped to its workflow.

    Fixed length (``agentq.call:`` and 32 hex digits of a BLAKE2b digest of both). The engine
    runs each call under it; `DurableStore.sweep` removes a job outcome stored under it with
    the call's workflow.
    """
    digest = hashlib.blake2b(
        workflow_id.encode("utf-8") + b"\x00" + key.encode("utf-8"), digest_size=16
    ).hexdigest()
    return f"agentq.call:{digest}"
