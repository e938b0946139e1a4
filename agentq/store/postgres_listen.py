"""Wake-ups for serving engines: ``LISTEN`` on the store's channel, on a connection of its own.

Every event after which work may be ready (a workflow started, retried, resumed or
re-admitted, a step completed, a retry scheduled, a wait timed out) notifies the channel
``agentq.<schema>`` from a trigger on ``events``, in the transaction that appends it, so the
notification is delivered at commit, whoever wrote it (any process, any machine).

`Listener` owns one asynchronous psycopg connection in autocommit mode that ``LISTEN``\\s on
the channel; `Listener.wait` runs in the caller's task (no task or thread of its own). A
connection that drops (the server restarted, a network cut, ``pg_terminate_backend``) is
forgotten and the wait returns True at once: the caller polls, so a notification lost with
the connection costs nothing, and the next wait connects and listens again. Without that, a
worker would silently fall back to slow polling (a fault reported against procrastinate).
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any

from agentq.errors import StoreError
from agentq.extras import require

if TYPE_CHECKING:
    import psycopg

__all__ = ["Listener", "channel"]


def channel(schema: str) -> str:
    """The notification channel of agentq's tables in `schema`."""
    return f"agentq.{schema}"


class Listener:
    """A ``LISTEN``ing connection, made on first use and remade after it drops.

    Args:
        dsn: The store's DSN.
        schema: The store's schema (names the channel).
        connect_timeout: Seconds to wait for the connection.
        name: The database as messages show it (no password).
    """

    def __init__(self, dsn: str, schema: str, connect_timeout: float, name: str) -> None:
        self.dsn = dsn
        self.channel = channel(schema)
        self.connect_timeout = connect_timeout
        self.name = name
        self.connects = 0
        """How many connections it has made (more than 1: it reconnected)."""
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        psycopg_mod = require("psycopg", "postgres")
        try:
            conn = await psycopg_mod.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=max(2, math.ceil(self.connect_timeout))
            )
            escaped = self.channel.replace('"', '""')
            await conn.execute(f'LISTEN "{escaped}"')
        except psycopg_mod.Error as exc:
            raise StoreError(f"cannot listen for new work on {self.name}: {exc}") from exc
        self._conn = conn
        self.connects += 1
        return conn  # type: ignore[no-any-return]  # psycopg is imported via `require`

    async def wait(self, timeout: float) -> bool:  # noqa: ASYNC109 - a poll bound
        """Wait up to `timeout` seconds for a notification; True if one came (or the
        connection dropped: poll now), False on timeout.

        Raises:
            StoreError: No connection could be made to listen on.
        """
        conn = await self._connection()
        psycopg_mod = require("psycopg", "postgres")
        try:
            async for _ in conn.notifies(timeout=timeout, stop_after=1):
                return True
            return False
        except psycopg_mod.Error:
            await self.close()  # listen again on a new connection next time
            return True

    async def close(self) -> None:
        """Close the connection, if any. Idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
