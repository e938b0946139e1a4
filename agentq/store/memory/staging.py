"""What a `MemoryStore` transaction stages beside its rows: messages and end-hook outbox rows.

`Outbox` holds the committed outbox rows (`HookRow` by ``seq``); `StagedKept` is the part of
the store's `MemoryTx` that stages messages and outbox rows and merges them on commit (the `Tx`
methods of `agentq.store.rules.tx` for them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from agentq.store.contract.hooks import HookRow
from agentq.store.contract.messages import MessageRow

__all__ = ["Outbox", "StagedKept"]


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


class _Holder(Protocol):
    """What `StagedKept` reads of the store."""

    _messages: dict[str, dict[int, MessageRow]]
    _hooks: Outbox


class StagedKept:
    """The messages and outbox rows of one transaction: staged, merged by `commit_kept`."""

    _store: _Holder

    def __init__(self) -> None:
        self.new_messages: dict[tuple[str, int], MessageRow] = {}
        self.new_hooks: dict[int, HookRow] = {}

    def _messages(self, workflow_id: str) -> list[MessageRow]:
        rows = dict(self._store._messages.get(workflow_id, {}))
        rows.update((seq, m) for (wid, seq), m in self.new_messages.items() if wid == workflow_id)
        return [rows[seq] for seq in sorted(rows)]

    def next_message(self, workflow_id: str, topic: str) -> MessageRow | None:
        kept = self._messages(workflow_id)
        return next((m for m in kept if m.topic == topic and not m.consumed), None)

    def keyed_message(self, workflow_id: str, key: str, inputs: bool) -> MessageRow | None:
        kept = self._messages(workflow_id)
        return next((m for m in kept if m.key == key and (m.topic is None) == inputs), None)

    def put_message(self, row: MessageRow, new: bool) -> None:
        self.new_messages[(row.workflow_id, row.seq)] = row

    def put_hook(self, row: HookRow, new: bool) -> None:
        self.new_hooks[row.seq] = row

    def load_hook(self, seq: int) -> HookRow | None:
        return self.new_hooks.get(seq) or self._store._hooks.rows.get(seq)

    def due_hooks(
        self, now: float, names: Sequence[str], plain: bool, wid: str | None, limit: int
    ) -> list[HookRow]:
        return self._store._hooks.due(self.new_hooks, now, names, plain, wid, limit)

    def commit_kept(self) -> None:
        """Merge the staged messages (by ``seq``) and outbox rows into the store."""
        store = self._store
        store._hooks.rows.update(self.new_hooks)
        for (workflow_id, seq), message in sorted(
            self.new_messages.items(), key=lambda kv: kv[0][1]
        ):
            store._messages.setdefault(workflow_id, {})[seq] = message
