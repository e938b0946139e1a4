"""Crash injection: the process kills itself with SIGKILL around a state-changing call.

``--crash-after N --crash-at POINT``: once this process has applied N calls (any kind), the
next state-changing call (`Kind.WRITE` or `Kind.APPROVAL`) kills it:

- ``before``: just before the call reaches the service host (nothing of it applied);
- ``during``: inside the host's transaction, after the call changed the services in memory and
  before the commit (the transaction dies with the process: nothing applied);
- ``after``: right after the host committed it, before the job, step or workflow recorded
  anything (applied, but agentq does not know yet: the rerun must not apply it again).

The kill is SIGKILL: no `finally`, no `atexit`, no flush of anything but stdout. Before dying
the plan writes a marker file next to the services file (``<services file>.crashed-<point>-<N>``)
so that rerunning the very same command finishes instead of crashing at the same place again;
``--fresh`` removes it with the databases.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from .services import Kind


class KillPoint(StrEnum):
    """Where, around a state-changing call, the process dies."""

    BEFORE = "before"
    DURING = "during"
    AFTER = "after"


def _sigkill() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def marker_path(services_db: Path, point: KillPoint, after: int) -> Path:
    """Return the marker file a crash at this point leaves behind."""
    return services_db.with_name(f"{services_db.name}.crashed-{point.value}-{after}")


class CrashPlan:
    """Kills the process once, at the first state-changing call after `after` applied calls.

    The hooks are called from the call jobs' worker threads: `before_apply` and `after_apply`
    around `ServiceHost.apply`, `before_commit` as the host's ``before_commit`` hook.

    Args:
        after: Calls this process applies before the kill point is armed (>= 0).
        point: Where around the next state-changing call to die.
        marker: The marker file; if it exists, the plan is disarmed from the start.
        kill: What dying means (tests pass a fake); default SIGKILL to this process.

    Raises:
        ValueError: `after` is negative.
    """

    def __init__(
        self,
        after: int,
        point: KillPoint,
        marker: Path,
        kill: Callable[[], None] = _sigkill,
    ) -> None:
        if after < 0:
            raise ValueError(f"crash-after must be >= 0 calls, got {after}")
        self.after = after
        self.point = point
        self.marker = marker
        self.armed = not marker.exists()
        """False once the crash happened (in this run or an earlier one)."""
        self.applied = 0
        """Calls applied (not duplicates) by this process so far."""
        self._kill = kill
        self._lock = threading.Lock()
        self._kinds: dict[str, Kind] = {}

    def describe(self) -> str:
        """One line: where the crash is (or was)."""
        where = f"{self.point.value} the first state-changing call after {self.after} applied"
        if self.armed:
            return f"SIGKILL {where}"
        return f"SIGKILL {where} already happened (marker {self.marker}): not crashing again"

    def before_apply(self, key: str, kind: Kind) -> None:
        """Called before a call is applied; kills at ``before``."""
        with self._lock:
            self._kinds[key] = kind
        self._maybe(KillPoint.BEFORE, key, kind)

    def before_commit(self, key: str) -> None:
        """The host's ``before_commit`` hook; kills at ``during``."""
        with self._lock:
            kind = self._kinds.get(key, Kind.READ)
        self._maybe(KillPoint.DURING, key, kind)

    def after_apply(self, key: str, kind: Kind, duplicate: bool) -> None:
        """Called after a call was applied (or found applied); kills at ``after``."""
        with self._lock:
            self._kinds.pop(key, None)
        if duplicate:
            return
        self._maybe(KillPoint.AFTER, key, kind)
        with self._lock:
            self.applied += 1

    def _maybe(self, point: KillPoint, key: str, kind: Kind) -> None:
        if point is not self.point or kind is Kind.READ:
            return
        with self._lock:
            if not self.armed or self.applied < self.after:
                return
            self.armed = False
            self._write_marker(key)
        self._kill()

    def _write_marker(self, key: str) -> None:
        record = {"point": self.point.value, "after": self.after, "key": key, "at": time.time()}
        try:
            with open(self.marker, "w", encoding="utf-8") as file:
                file.write(json.dumps(record) + "\n")
                file.flush()
                os.fsync(file.fileno())
        except OSError:
            pass  # the crash matters more than the marker: a rerun would crash once more
