"""Wake-ups for serving engines: ``LISTEN`` on the store's channel, on a connection of its own.

Every event after which work may be ready (a workflow started, retried, resumed or
re-admitted, a step completed, a retry scheduled, a wait timed out) notifies the channel
``agentq.<schema>`` from a trigger on ``events``, in the transaction that appends it, so the
notification is delivered at commit, whoever wrote it (any process, any machine).

`Listener` owns one asynchronous psycopg connection in autocommit mode that ``LISTEN``\\s on
the channel; `Listener.wait` runs in the caller's task (no task or thread of its own), and
the callers waiting at once share the connection (one reads, all are woken). A
connection that drops (the server restarted, a network cut, ``pg_terminate_backend``) is
forgotten and the wait returns True at once: the caller polls, so a notification lost with
the connection costs nothing, and the next wait connects and listens again. Without that, a
worker would silently fall back to slow polling (a fault reported against procrastinate).
"""

from __future__ import annotations

import asyncio
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
    """A ``LISTEN``ing connection, made on first use and remade after it drops, shared by
    every task that waits on it.

    Several tasks may wait at once (two serving engines on one store): one of them reads the
    connection's notifications at a time, and every notification (or a dropped connection)
    wakes them all; when the reader leaves (its timeout, or it was cancelled), another
    waiter takes over reading.

    Args:
        dsn: The store's DSN.
        schema: The store's schema (names the channel).
        connect_timeout: Seconds to wait for the connection.
        name: The database as messages show it (no password).
        kwargs: More connection arguments (the pool's keepalives: a listener on a network
            that died silently would otherwise never hear of it, and its worker would fall
            back to polling without a word).
    """

    def __init__(
        self, dsn: str, schema: str, connect_timeout: float, name: str,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.dsn = dsn
        self.kwargs = dict(kwargs or {}, autocommit=True)
        self.channel = channel(schema)
        self.connect_timeout = connect_timeout
        self.name = name
        self.connects = 0
        """How many connections it has made (more than 1: it reconnected)."""
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._opening: asyncio.Lock | None = None
        self._news = 0  # notifications (and drops) seen so far
        self._reading = False  # a waiter is reading the connection
        self._changed: asyncio.Event | None = None  # set (and replaced) on news or a handover

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            conn = self._conn
            if conn is not None and not conn.closed:
                return conn
            psycopg_mod = require("psycopg", "postgres")
            try:
                conn = await psycopg_mod.AsyncConnection.connect(
                    self.dsn,
                    **{"connect_timeout": max(2, math.ceil(self.connect_timeout)), **self.kwargs},
                )
            except psycopg_mod.Error as exc:
                raise StoreError(f"cannot listen for new work on {self.name}: {exc}") from exc
            try:
                escaped = self.channel.replace('"', '""')
                await conn.execute(f'LISTEN "{escaped}"')
            except BaseException as exc:  # cancelled too: never leave the connection open
                with contextlib.suppress(Exception):
                    await asyncio.shield(conn.close())
                if isinstance(exc, psycopg_mod.Error):
                    raise StoreError(f"cannot listen for new work on {self.name}: {exc}") from exc
                raise
            self._conn = conn
            self.connects += 1
            return conn  # type: ignore[no-any-return]  # psycopg is imported via `require`

    def _wake(self, news: bool) -> None:
        if news:
            self._news += 1
        changed, self._changed = self._changed, asyncio.Event()
        if changed is not None:
            changed.set()

    async def wait(self, timeout: float) -> bool:  # noqa: ASYNC109 - a poll bound
        """Wait up to `timeout` seconds for a notification; True if one came (or the
        connection dropped: poll now), False on timeout.

        Raises:
            StoreError: No connection could be made to listen on.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen = self._news
        if self._changed is None:
            self._changed = asyncio.Event()
        while True:
            conn = await self._connection()
            if self._news != seen:
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            if self._reading:  # another waiter reads: wait for its news, or its leaving
                changed = self._changed
                assert changed is not None
                try:
                    async with asyncio.timeout(remaining):
                        await changed.wait()
                except TimeoutError:
                    return self._news != seen
                continue
            self._reading = True
            try:
                async for _ in conn.notifies(timeout=remaining, stop_after=1):
                    self._wake(True)
            except require("psycopg", "postgres").Error:
                await self._drop()  # listen again on a new connection next time
                self._wake(True)  # everyone polls now: news may have been lost with it
            finally:
                self._reading = False
                self._wake(False)  # let another waiter take over reading

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        """Close the connection, if any. Idempotent."""
        await self._drop()
