"""`Outbox`: the end-of-run hook outbox of `MemoryStore`, a dict of `HookRow` by ``seq``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentq.store.contract.hooks import HookRow

__all__ = ["Outbox"]


class Outbox:
    """The committed outbox rows; a transaction stages its own and merges them on commit."""

    def __init__(self) -> None:
        self.rows: dict[int, HookRow] = {}

    def due(
        self,
        staged: Mapping[int, HookRow],
        now: float,
        definitions: Sequence[str],
        plain: bool,
        workflow_id: str | None,
        limit: int,
    ) -> list[HookRow]:
        """`Tx.due_hooks` over the committed rows and the transaction's `staged` ones."""
        names = set(definitions)
        rows = {**self.rows, **staged}
        due = [
            r
            for seq, r in sorted(rows.items())
            if r.delivered_at is None
            and r.due_at <= now
            and (r.lease_expires_at is None or r.lease_expires_at <= now)
            and (r.definition in names if r.definition is not None else plain)
            and (workflow_id is None or r.workflow_id == workflow_id)
        ]
        return due[:limit]

    def of(self, workflow_id: str) -> list[HookRow]:
        """The rows of `workflow_id`, by ``seq``."""
        return [r for _, r in sorted(self.rows.items()) if r.workflow_id == workflow_id]
