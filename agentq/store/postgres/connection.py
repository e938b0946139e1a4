"""The store's PostgreSQL connections: opening (and migrating), a pool, one transaction at a time.

`Connections` owns a `psycopg_pool.ConnectionPool` of synchronous psycopg connections and
runs a function over one of them, on the caller's thread (the async half,
`agentq.store.postgres.store`, calls it from its worker threads):

- `Connections.open` first connects once, directly, so that a wrong DSN, a refused
  connection or a server that does not answer within ``connect_timeout`` raises `StoreError`
  with the server's own message (a pool would only time out); it migrates on that connection
  (`agentq.store.postgres.schema.migrate`), then opens the pool.
- Every connection is in autocommit mode, has ``search_path`` set to agentq's schema, and
  reads ``bytea`` back as `str` (keys are stored as UTF-8 bytes: see
  `agentq.store.postgres.tx`).
- `Connections.transact` runs ``fn(conn)`` between ``BEGIN`` and ``COMMIT``. A serialization
  failure or a deadlock is retried (the server rolled the transaction back). A connection
  lost before ``COMMIT`` was sent (the server restarted, a network cut) left nothing
  committed: the pool checks its idle connections, and the transaction is run once more on a
  fresh one. A connection lost during ``COMMIT`` is an unknown outcome: `StoreError` says so,
  and nothing is retried (a retried write could be recorded twice).
- `Connections.read` runs a read the same way (reads are always safe to retry).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentq.errors import StoreClosedError, StoreError
from agentq.extras import require
from agentq.store.postgres.schema import migrate

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["KEEPALIVES", "Connections", "describe_dsn"]

T = TypeVar("T")

RETRIES = 5
"""How many times a transaction is tried when the server asks to (serialization, deadlock)."""


KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
              "keepalives_count": 3}
"""libpq's TCP keepalive settings the store uses unless the DSN gives its own."""


def _parts(dsn: str) -> dict[str, Any]:
    conninfo = require("psycopg.conninfo", "postgres")
    try:
        return dict(conninfo.conninfo_to_dict(dsn))
    except Exception:  # a DSN that does not parse fails when connecting, with its message
        return {}


def describe_dsn(dsn: str) -> str:
    """The DSN for messages, its password hidden (the DSN itself when it cannot be parsed)."""
    conninfo = require("psycopg.conninfo", "postgres")
    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except Exception:  # a DSN that does not parse is shown as given, if it has no password
        return repr(dsn) if "password" not in dsn else "<unparsable DSN>"
    if "password" in parts:
        parts["password"] = "***"
    return repr(" ".join(f"{k}={v}" for k, v in parts.items()))


def _key_loader(psycopg_mod: Any) -> type:
    base = psycopg_mod.adapt.Loader

    class KeyLoader(base):  # type: ignore[misc,valid-type]
        """Reads ``bytea`` (agentq's keys, UTF-8) back as `str`: the text format, ``\\x`` and
        hex digits (``bytea_output = hex``, set on every connection)."""

        def load(self, data: Any) -> str:
            return bytes.fromhex(bytes(data)[2:].decode("ascii")).decode("utf-8")

    return KeyLoader


class Connections:
    """A pool of connections to one database, and running transactions on it.

    Args:
        dsn: A libpq connection string or URI.
        schema: The PostgreSQL schema that holds agentq's tables.
        min_size, max_size: The pool's bounds (connections).
        connect_timeout: Seconds to wait for a new connection, and for a free one of the pool.
    """

    def __init__(
        self, dsn: str, schema: str, min_size: int, max_size: int, connect_timeout: float
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.min_size = min_size
        self.max_size = max_size
        self.connect_timeout = connect_timeout
        self.name = describe_dsn(dsn)
        self.pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._psycopg = require("psycopg", "postgres")
        self._loader = _key_loader(self._psycopg)

    def connection_kwargs(self) -> dict[str, Any]:
        """The connection arguments besides the DSN: autocommit, timeouts, keepalives."""
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(2, math.ceil(self.connect_timeout)),
        }
        # TCP keepalives, unless the DSN sets them: a server that vanished (a network cut, a
        # machine gone) is noticed in about 25 s instead of the system's two hours, so a
        # verb waiting on it fails with StoreError rather than hanging.
        given = _parts(self.dsn)
        for name, value in KEEPALIVES.items():
            if name not in given:
                kwargs[name] = value
        return kwargs

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.adapters.register_loader("bytea", self._loader)
        conn.execute(f'SET search_path TO "{self.schema}"')
        conn.execute("SET bytea_output TO hex")

    # ------------------------------------------------------------ opening and closing

    def open(self) -> None:
        """Connect, migrate, open the pool (blocking: run it on a worker thread).

        Raises:
            StoreError: The DSN is wrong, the server refused or did not answer within
                ``connect_timeout``, or failed while migrating.
            SchemaError: The schema has a newer version, or foreign tables.
        """
        pool_mod = require("psycopg_pool", "postgres")
        psycopg_mod = self._psycopg
        try:
            with psycopg_mod.connect(self.dsn, **self.connection_kwargs()) as conn:
                self._configure(conn)
                migrate(conn, self.schema, self.name)
        except psycopg_mod.Error as exc:
            raise StoreError(f"cannot open PostgreSQL database {self.name}: {exc}") from exc
        pool = pool_mod.ConnectionPool(
            self.dsn,
            kwargs=self.connection_kwargs(),
            min_size=self.min_size,
            max_size=self.max_size,
            open=False,
            configure=self._configure,
            timeout=self.connect_timeout,
            name="agentq",
        )
        try:
            pool.open(wait=True, timeout=self.connect_timeout)
        except Exception as exc:
            pool.close(timeout=0)
            raise StoreError(f"cannot open a pool of connections to {self.name}: {exc}") from exc
        self.pool = pool

    def close(self) -> None:
        """Close the pool and its connections (blocking). Idempotent."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.close(timeout=5.0)

    # ------------------------------------------------------------ running

    def _error(self, exc: BaseException, what: str) -> StoreError:
        err = StoreError(f"PostgreSQL failed ({what}) on {self.name}: {exc}")
        err.__cause__ = exc
        return err

    def _pool(self) -> psycopg_pool.ConnectionPool[Any]:
        pool = self.pool
        if pool is None:
            raise StoreClosedError(f"the PostgresStore on {self.name} is closed")
        return pool

    def transact(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``fn(conn)`` in one transaction and commit it; return its result.

        Raises:
            StoreError: The server failed, the connection was lost twice, or lost during
                ``COMMIT`` (the outcome is then unknown); ``__cause__`` is psycopg's error.
            Exception: Whatever `fn` raises (the transaction is rolled back).
        """
        return self._run(fn, write=True)

    def read(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run the read ``fn(conn)`` (autocommit: each statement sees the latest commits)."""
        return self._run(fn, write=False)

    def _run(self, fn: Callable[[psycopg.Connection[Any]], T], write: bool) -> T:
        errors = self._psycopg.errors
        pool_mod = require("psycopg_pool", "postgres")
        reconnected = False
        for attempt in range(RETRIES):
            pool = self._pool()
            committing = False
            try:
                with pool.connection() as conn:
                    if not write:
                        return fn(conn)
                    conn.execute("BEGIN")
                    try:
                        result = fn(conn)
                    except BaseException:
                        _rollback(conn)
                        raise
                    committing = True
                    conn.execute("COMMIT")
                    return result
            except (errors.SerializationFailure, errors.DeadlockDetected) as exc:
                if attempt == RETRIES - 1:
                    raise self._error(exc, f"gave up after {RETRIES} tries") from exc
            except pool_mod.PoolTimeout as exc:  # (an OperationalError: caught first)
                raise self._error(exc, f"no connection within {self.connect_timeout} s") from exc
            except self._psycopg.OperationalError as exc:
                if committing:
                    raise self._error(exc, "the connection was lost during COMMIT, so the "
                                      "outcome of this write is unknown") from exc
                if reconnected:
                    raise self._error(exc, "connection lost") from exc
                reconnected = True
                pool.check()  # drop the idle connections that died with this one
            except self._psycopg.Error as exc:
                raise self._error(exc, type(exc).__name__) from exc
        raise AssertionError("unreachable")  # pragma: no cover


def _rollback(conn: psycopg.Connection[Any]) -> None:
    with contextlib.suppress(Exception):  # a broken connection: the pool discards it
        conn.execute("ROLLBACK")
