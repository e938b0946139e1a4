"""The job-outcome protocol: what a `Queue` needs from a store to remember keys across restarts.

`Queue(store=...)` takes any object with these three verbs. The queue layer defines them, and
the stores (`agentq.store.MemoryStore`, `agentq.store.SqliteStore`) implement them, so that the
queue never imports the store package. Stores are passive: the queue gives them the time
(``now``, ``completed_at``, ``expires_at``: Unix seconds from the queue's clock).

A stored outcome is *live* at time ``now`` while ``expires_at is None or now < expires_at``;
an expired one is never returned and is removed by the next `JobOutcomeStore.save_job` (or by
`JobOutcomeStore.forget_job`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["JobOutcomeStore", "StoredJob"]


@dataclass(frozen=True, slots=True)
class StoredJob:
    """The stored outcome of one completed idempotency key.

    Attributes:
        key: The idempotency key, exactly as pushed.
        fingerprint: Opaque text that says which call completed under the key (made by the
            queue from the parts of the call that compare by value: see
            ``docs/idempotency.md``); two pushes are the same call when their texts are equal.
        output: The job's output as JSON reads it back (tuples come back as lists).
        completed_at: When the job completed, Unix seconds by the queue's clock.
        expires_at: When the outcome stops being answered, Unix seconds; None for never.
    """

    key: str
    fingerprint: str
    output: Any
    completed_at: float
    expires_at: float | None


@runtime_checkable
class JobOutcomeStore(Protocol):
    """Where a `Queue` keeps the outputs of completed keys: three verbs, each atomic.

    Each verb is one atomic step of the store: a verb that raises has written nothing. Every
    verb raises `StoreError` (the backend's exception as ``__cause__``) when the backend fails
    or the store is closed; arguments are checked before anything is read or written
    (`TypeError`, `ValueError`, `InvalidKeyError` for a bad key). The methods are coroutines
    to await on one event loop. ``tests/store/test_job_outcomes.py`` is the contract suite
    every implementation must pass.
    """

    async def load_job(self, key: str, now: float) -> StoredJob | None:
        """Return the live outcome stored for `key` at time `now`, or None.

        Args:
            key: The idempotency key (compared byte-exactly).
            now: The reader's time, Unix seconds; an outcome with ``expires_at <= now`` is
                expired and not returned.

        Returns:
            The `StoredJob`, or None when nothing live is stored for the key.

        Raises:
            InvalidKeyError / TypeError: `key` is not a valid idempotency key.
            TypeError / ValueError: `now` is not a finite number.
            StoreError: The backend failed.
        """
        ...

    async def save_job(
        self,
        key: str,
        *,
        fingerprint: str,
        output: Any,
        completed_at: float,
        expires_at: float | None,
    ) -> bool:
        """Store the outcome of a completed key, unless a live one is stored already.

        Atomic compare-and-set: the first outcome saved for a key is kept while it is live
        at `completed_at` (a later save of the same key, as when two processes ran it at the
        same time, changes nothing and returns False); an expired one is replaced. The same
        step also removes every outcome that has expired by `completed_at`, so that a store
        used with ``key_ttl`` stays bounded.

        Args:
            key: The idempotency key.
            fingerprint: The call's fingerprint text (non-empty, at most 1024 bytes of UTF-8).
            output: The job's output; must be JSON (see `agentq.codec`).
            completed_at: When the job completed, Unix seconds.
            expires_at: When the outcome expires, Unix seconds, later than `completed_at`;
                None for never.

        Returns:
            True if this outcome was stored; False if a live one was kept instead.

        Raises:
            PayloadError: `output` is not JSON or is larger than `agentq.codec.MAX_PAYLOAD_BYTES`;
                the message names the path and type of the offending value (e.g.
                ``output['ids'] is a set``). Nothing is written.
            InvalidKeyError / TypeError: `key` or `fingerprint` is not valid text.
            TypeError / ValueError: A time is not a finite number, or `expires_at` is not
                later than `completed_at`.
            StoreError: The backend failed.
        """
        ...

    async def forget_job(self, key: str) -> bool:
        """Remove the outcome stored for `key`, live or expired.

        Returns:
            True if an outcome was stored (and is now removed); False if none was.

        Raises:
            InvalidKeyError / TypeError: `key` is not a valid idempotency key.
            StoreError: The backend failed.
        """
        ...
