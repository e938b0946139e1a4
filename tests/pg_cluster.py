"""A throwaway PostgreSQL cluster for the tests and the benchmark: initdb, pg_ctl, a free port.

`Cluster.start()` finds ``initdb`` (on PATH or under ``/usr/lib/postgresql/*/bin``), installs
Debian's ``postgresql`` package with apt-get when it is missing (as root; as
``scripts/ensure-chromium.sh`` does for Chromium), runs ``initdb`` into a new temporary
directory as an unprivileged user (``postgres`` when run as root: the package creates it) and
starts the server with ``pg_ctl`` on a free loopback port, its socket in that directory, trust
authentication, loopback only. `Cluster.stop()` stops it and deletes the directory.

`Cluster.create_database()` makes a fresh database (``CREATE DATABASE … TEMPLATE``: a file
copy, a few tens of milliseconds) and returns its DSN.

Run by hand: ``python -m tests.pg_cluster`` starts a cluster, prints its DSN and waits for
Enter (without a terminal: for SIGINT or SIGTERM, never a prompt), then stops it;
``--help`` says so and starts nothing. ``python -m tests.pg_cluster --install`` only makes
sure PostgreSQL is installed (``make test`` runs it first, so that apt-get does not run
inside a test's timeout); it exits 1 with the reason when it cannot be, and the PostgreSQL
tests then fail with it.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Cluster", "PostgresUnavailable", "Schemas", "Target", "ensure_installed", "find_bin",
]


class PostgresUnavailable(RuntimeError):
    """PostgreSQL is not installed here and could not be installed."""


def find_bin(name: str) -> str | None:
    """Return the path of a PostgreSQL program (``initdb``, ``pg_ctl``), or None."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def _install() -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PostgresUnavailable(
            "PostgreSQL's initdb is not installed and cannot be installed here (needs root and "
            "apt-get): install the 'postgresql' package, or set AGENTQ_SKIP_PG=1 to skip the "
            "PostgreSQL tests locally"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(
        "apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql",
        shell=True, env=env, capture_output=True, text=True, check=False,
    )
    if done.returncode != 0 or find_bin("initdb") is None:
        raise PostgresUnavailable(
            f"apt-get failed to install PostgreSQL (exit {done.returncode}): "
            f"{done.stderr.strip()[-500:]}"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """A PostgreSQL server of its own, in a temporary directory, until `stop`.

    Attributes:
        durable: False (the tests): ``fsync`` and ``synchronous_commit`` off, for speed; a
            crash of the machine would lose the cluster, which is thrown away anyway. True
            (the benchmark): the server's defaults.
    """

    durable: bool = False
    port: int = 0
    directory: Path | None = None
    _user: list[str] = field(default_factory=list)
    _databases: int = 0
    _options: str = ""

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [*args]
        if self._user:
            cmd = ["su", self._user[0], "-s", "/bin/sh", "-c", " ".join(_quote(a) for a in args)]
        return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)

    def start(self) -> Cluster:
        """Install PostgreSQL if needed, initdb and start the server; return self.

        Raises:
            PostgresUnavailable: No ``initdb`` and none could be installed, or the server
                would not start (the message holds its log).
        """
        if find_bin("initdb") is None:
            _install()
        initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
        assert initdb and pg_ctl
        self.directory = Path(tempfile.mkdtemp(prefix="agentq-pg-"))
        if os.geteuid() == 0:  # initdb refuses to run as root
            self._user = ["postgres"]
            shutil.chown(self.directory, "postgres")
        data = self.directory / "data"
        done = self._run(initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                         "--no-sync")
        if done.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {done.stderr.strip()[-800:]}")
        self.port = _free_port()
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._options = options + " -c max_connections=200"
        log = self.directory / "server.log"
        done = self._run(pg_ctl, "-D", str(data), "-o", self._options, "-l", str(log), "-w",
                         "start")
        if done.returncode != 0:
            text = log.read_text() if log.exists() else done.stderr
            raise PostgresUnavailable(f"pg_ctl start failed: {text.strip()[-800:]}")
        return self

    def stop_server(self) -> None:
        """Stop the server (fast: open connections are cut), keeping its data."""
        pg_ctl = find_bin("pg_ctl")
        assert pg_ctl and self.directory
        self._run(pg_ctl, "-D", str(self.directory / "data"), "-m", "fast", "-w", "stop")

    def start_server(self) -> None:
        """Start the server stopped by `stop_server` again, on the same port."""
        pg_ctl = find_bin("pg_ctl")
        assert pg_ctl and self.directory
        done = self._run(pg_ctl, "-D", str(self.directory / "data"), "-o", self._options,
                         "-l", str(self.directory / "server.log"), "-w", "start")
        if done.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl start failed: {done.stderr.strip()[-800:]}")

    def restart(self) -> None:
        """Stop the server (cutting every connection) and start it again, same port."""
        self.stop_server()
        self.start_server()

    def stop(self) -> None:
        """Stop the server and delete its directory. Idempotent."""
        if self.directory is None:
            return
        pg_ctl = find_bin("pg_ctl")
        if pg_ctl:
            self._run(pg_ctl, "-D", str(self.directory / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = None

    def dsn(self, dbname: str = "postgres") -> str:
        """The DSN of a database of this cluster (TCP on loopback, user postgres)."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def create_database(self, template: str = "template0") -> str:
        """Create a new, empty database; return its DSN."""
        import psycopg

        self._databases += 1
        name = f"t{os.getpid()}_{self._databases}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
        return self.dsn(name)

    def drop_database(self, dsn: str) -> None:
        """Drop a database made by `create_database`, cutting its connections."""
        import psycopg

        name = dsn.rsplit("dbname=", 1)[1]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass(frozen=True)
class Target:
    """Where a test's `PostgresStore` goes: a DSN and a PostgreSQL schema."""

    dsn: str
    schema: str


class Schemas:
    """Schemas of one database handed to tests one at a time, emptied and reused.

    A test takes a schema name (`take`); its store creates agentq's tables there on open.
    `give_back` empties the tables (``TRUNCATE``, with triggers off for the append-only
    ``events``) so that the next test finds them as a new store would, migrated: creating
    them costs about 0.15 s a test, emptying them a few milliseconds. A schema left in any
    other state (another version, a test's own tables, a lock still held) is dropped instead.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._free: list[str] = []
        self._made = 0

    def take(self) -> Target:
        """Return a schema with no tables or with agentq's, empty."""
        if self._free:
            return Target(self.dsn, self._free.pop())
        self._made += 1
        return Target(self.dsn, f"t{self._made}")

    def give_back(self, target: Target) -> None:
        """Empty `target`'s tables for the next test, or drop the schema."""
        import psycopg

        from agentq.store.postgres.schema import SCHEMA_VERSION, migrations

        made = sum(s.upper().count("CREATE TABLE") for m in migrations() for s in m)
        name = target.schema
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '5s'")
            try:
                with conn.transaction():
                    version = conn.execute(
                        f'SELECT version FROM "{name}".agentq_schema'
                    ).fetchone()
                    tables = sorted(
                        str(r[0]) for r in conn.execute(
                            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (name,)
                        )
                    )
                    if version != (SCHEMA_VERSION,) or len(tables) != made:
                        raise LookupError(name)  # a test added or dropped tables: dropped
                    conn.execute("SET LOCAL session_replication_role = replica")
                    emptied = [t for t in tables if t not in ("agentq_schema", "event_seq")]
                    conn.execute(
                        "TRUNCATE " + ", ".join(f'"{name}"."{t}"' for t in emptied)
                    )
                    conn.execute(f'UPDATE "{name}".event_seq SET last_seq = 0')
            except (psycopg.Error, LookupError):
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
                return
        self._free.append(name)


_EMPTIED = ("events", "workflows", "steps", "calls", "job_outcomes", "messages", "end_hooks")
"""The tables `Schemas.give_back` empties for the next test."""


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\"'\"'") + "'"


def ensure_installed() -> None:
    """Install PostgreSQL with apt-get unless ``initdb`` is already there.

    Raises:
        PostgresUnavailable: It is not there and cannot be installed.
    """
    if find_bin("initdb") is None:
        _install()


def _wait_for_stop() -> None:
    """Wait for Enter at a terminal; without one (stdin not a TTY), for SIGINT or SIGTERM."""
    if sys.stdin.isatty():
        with contextlib.suppress(EOFError, KeyboardInterrupt):
            input("PostgreSQL is running; press Enter (or Ctrl-C) to stop it. ")
        return
    print("PostgreSQL is running; send SIGINT or SIGTERM to stop it.", file=sys.stderr,
          flush=True)
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    signal.sigwait(stop)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.pg_cluster [--install]``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.pg_cluster",
        description="Start a throwaway PostgreSQL cluster, print its DSN on stdout and stop "
        "it (and delete its directory) on Enter, or, without a terminal, on SIGINT or "
        "SIGTERM.",
    )
    parser.add_argument(
        "--install", action="store_true",
        help="only make sure PostgreSQL is installed (apt-get as root) and exit: 0 when it "
        "is, 1 with the reason when it cannot be (AGENTQ_SKIP_PG=1: exit 0 at once)",
    )
    args = parser.parse_args(argv)
    if args.install:
        if os.environ.get("AGENTQ_SKIP_PG") == "1":
            return 0
        try:
            ensure_installed()
        except PostgresUnavailable as exc:
            print(f"pg_cluster: {exc}", file=sys.stderr)
            return 1
        return 0
    cluster = Cluster().start()
    try:
        print(cluster.dsn(), flush=True)
        _wait_for_stop()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
