"""`KeptRows`: the `Tx` methods of messages and of the end-hook outbox, once for both SQL
stores (a base of `SqliteTx` and `PostgresTx`), over `agentq.store.sql.messages` and
`agentq.store.sql.hooks`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import agentq.store.sql.hooks as sql_hooks
import agentq.store.sql.messages as sql_messages
from agentq.store.contract.hooks import HookRow
from agentq.store.contract.messages import MessageRow
from agentq.store.sql.reads import Connection, Dialect

__all__ = ["KeptRows"]


class KeptRows:
    """A SQL store's `Tx` methods for the ``messages`` and ``end_hooks`` tables.

    A subclass sets `conn` (its transaction's connection), `kept_dialect` and, where
    concurrent transactions claim outbox rows side by side, `hook_lock`.
    """

    conn: Connection
    kept_dialect: ClassVar[Dialect]
    """How the store's keys and placeholders go into these statements."""
    hook_lock: ClassVar[str] = ""
    """Appended to the due outbox rows' query (PostgreSQL: ``FOR UPDATE SKIP LOCKED``)."""

    def next_message(self, workflow_id: str, topic: str) -> MessageRow | None:
        return sql_messages.next_message(self.conn, self.kept_dialect, workflow_id, topic)

    def keyed_message(self, workflow_id: str, key: str, inputs: bool) -> MessageRow | None:
        return sql_messages.keyed_message(self.conn, self.kept_dialect, workflow_id, key, inputs)

    def put_message(self, row: MessageRow, new: bool) -> None:
        sql_messages.put_message(self.conn, self.kept_dialect, row, new)

    def put_hook(self, row: HookRow, new: bool) -> None:
        sql_hooks.put_hook(self.conn, self.kept_dialect, row, new)

    def load_hook(self, seq: int) -> HookRow | None:
        return sql_hooks.load_hook(self.conn, self.kept_dialect, seq)

    def due_hooks(
        self, now: float, names: Sequence[str], plain: bool, wid: str | None, limit: int
    ) -> list[HookRow]:
        return sql_hooks.due_hooks(
            self.conn, self.kept_dialect, now, names, plain, wid, limit, self.hook_lock
        )
