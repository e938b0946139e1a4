"""`DurableHooks`: the end-of-run hook outbox verbs of a `DurableStore` (inherited by it).

See `agentq.store.contract.hooks` for the outbox and `agentq.workflows.hooks` for delivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agentq.store.contract.hooks import HookRow

__all__ = ["DurableHooks"]


class DurableHooks(Protocol):
    """The outbox of workflow ends, written by the transaction that ends each workflow."""

    async def claim_hooks(
        self,
        worker_id: str,
        now: float,
        lease_ttl: float,
        *,
        definitions: Sequence[str] = (),
        plain: bool = False,
        workflow_id: str | None = None,
        limit: int = 16,
    ) -> list[HookRow]:
        """Claim due outbox rows for delivery, atomically: each gets `worker_id`, a lease
        until ``now + lease_ttl`` and one more attempt.

        A row is due when it is not delivered, its ``due_at`` has come and nobody holds an
        unexpired lease on it; of several engines claiming at once, each row goes to one.

        Args:
            worker_id: The claiming engine's worker id.
            now: Unix seconds.
            lease_ttl: Seconds the claim holds (> 0); after it, another engine may claim the
                row again (at least once: a hook may run twice).
            definitions: Claim rows of workflows of these definition names.
            plain: Also claim rows of plain workflows (no definition).
            workflow_id: Only rows of this workflow (still filtered as above).
            limit: At most this many rows (>= 1), oldest end first.

        Returns:
            The claimed rows, as updated, oldest end first.

        Raises:
            ValueError / TypeError: A bad number, limit or name; InvalidKeyError: a bad id.
        """
        ...

    async def renew_hook(self, seq: int, worker_id: str, now: float, lease_ttl: float) -> bool:
        """Extend `worker_id`'s live claim on the outbox row `seq` to ``now + lease_ttl``
        (the claimer still delivers it), atomically.

        Args:
            seq: The row's seq.
            worker_id: The claimer's worker id.
            now: Unix seconds.
            lease_ttl: Seconds the claim holds from `now` (> 0).

        Returns:
            False (nothing changed) when the row is gone or delivered, is claimed by another
            worker, or its claim was dropped (`retry_hook`, `release_hook`) or has expired
            (``<= now``: another engine may have taken it; the claimer has lost it).

        Raises:
            ValueError / TypeError: A bad number; InvalidKeyError: a bad worker id.
        """
        ...

    async def finish_hook(self, seq: int, now: float) -> bool:
        """Mark the outbox row `seq` delivered at `now` (its hooks returned).

        Returns:
            False when there is no such row or it was delivered already (by anyone).
        """
        ...

    async def retry_hook(
        self, seq: int, worker_id: str, due_at: float, error: str, now: float
    ) -> bool:
        """A delivery by `worker_id` failed: the row is due again at `due_at`, lease dropped,
        `error` kept (cut to `MAX_HOOK_ERROR_CHARS`).

        Returns:
            False (nothing changed) when the row is gone, delivered, or claimed by another
            worker since.
        """
        ...

    async def release_hook(self, seq: int, worker_id: str, now: float) -> bool:
        """Hand back `worker_id`'s claim on the outbox row `seq` (its engine stops before the
        delivery ended, or before it started): the claim dropped, the row due again at once
        (no backoff: ``due_at`` at most `now`), its ``attempts`` and ``error`` kept.

        An engine that stops (``close``, ``serve(stop=)``) hands back the rows of its claims
        that it did not deliver, so that another engine delivers them without waiting for the
        claim to expire; a hook it interrupted is called again (at least once).

        Args:
            seq: The row's seq.
            worker_id: The claimer's worker id.
            now: Unix seconds.

        Returns:
            False (nothing changed) when the row is gone or delivered, is claimed by another
            worker, or holds no claim (dropped already by `retry_hook` or `release_hook`).

        Raises:
            ValueError / TypeError: A bad number; InvalidKeyError: a bad worker id.
        """
        ...

    async def hooks(self, workflow_id: str) -> list[HookRow]:
        """Return the outbox rows of `workflow_id` (delivered or not), oldest end first."""
        ...
