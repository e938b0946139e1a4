"""Worker ids, and whether the worker behind a lease is gone.

A lease names its holder by worker id. The default id of an engine is
``{host}:{pid}:{token}``: the host name (`socket.gethostname()`), the process id, and 8
lowercase hex digits drawn at random for each engine (so two engines of one process differ),
e.g. ``"build-7:41822:9f3ac01b"``. `parse_worker_id` reads the host and the pid back; an id
of any other form (one the program chose) is never judged.

After a crash or a kernel restart, the dead process's lease would block the step until it
expires (`lease_ttl`, 30 s by default). `gone_reason` tells when the holder is known to be
gone, so that its lease can be taken back at once (`DurableStore.release_dead`): the id says
this host, and its pid no longer exists (``os.kill(pid, 0)`` raises `ProcessLookupError`) or
is a zombie (it has exited; Linux). Anything else counts as alive: another host, this very
process, a pid that exists (even one recycled by a newer process: then the lease is waited
out, as before), or a platform where this cannot be checked cheaply (Windows). Containers
that share a host name and a database file but not a pid namespace should give their engines
explicit worker ids.

`take_back` does the taking back (and logs it, through ``logging.getLogger("agentq")``), for
the driver and for `recover`; `take_back_gone` does it for a serving engine, which reads the
live leases of its host (`host_prefix`, `DurableStore.live_leases`) at every poll;
`held_message` is the warning a run logs once per wait when it must wait for a live lease
instead.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import uuid
from contextlib import suppress
from dataclasses import replace

from agentq.clock import Clock
from agentq.events import utc
from agentq.store import DurableStore, Execution, StepRow, StepState, execution_of

__all__ = [
    "LOGGER",
    "default_worker_id",
    "gone_reason",
    "held_message",
    "host_prefix",
    "lost_message",
    "parse_worker_id",
    "take_back",
    "take_back_gone",
    "take_back_held",
]

LOGGER = logging.getLogger("agentq")
"""Where the workflow engine logs what it waits for and whose lease it takes back."""

_HEX = frozenset("0123456789abcdef")


def default_worker_id() -> str:
    """Return ``{host}:{pid}:{8 hex digits}``, a worker id unique to one engine."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def parse_worker_id(worker_id: str) -> tuple[str, int] | None:
    """Return ``(host, pid)`` of a default worker id, or None for an id of another form.

    Example:
        >>> parse_worker_id("build-7:41822:9f3ac01b")
        ('build-7', 41822)
        >>> parse_worker_id("worker-1") is None
        True
    """
    parts = worker_id.rsplit(":", 2)
    if len(parts) != 3:
        return None
    host, pid, token = parts
    if not host or not pid.isascii() or not pid.isdigit() or int(pid) <= 0:
        return None
    if len(token) != 8 or not set(token) <= _HEX:
        return None
    return host, int(pid)


def _exited(pid: int) -> bool:
    """Whether `pid` is a zombie: it has exited and only waits for its parent (Linux)."""
    with suppress(OSError, IndexError):
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] in (b"Z", b"X")
    return False


def gone_reason(worker_id: str) -> str | None:
    """Say why the process behind `worker_id` is known to be gone, or return None.

    Only a default worker id (see `parse_worker_id`) of this host is judged; see the module
    docstring for what counts as gone.

    Returns:
        A sentence for the `WorkerRecovered` event and the log, e.g. ``"worker
        'h:41822:9f3ac01b' is gone: process 41822 no longer exists on host 'h'"``; None when
        the worker may be alive.
    """
    parsed = parse_worker_id(worker_id)
    if parsed is None or sys.platform == "win32":  # os.kill(pid, 0) would send CTRL_C there
        return None
    host, pid = parsed
    if host != socket.gethostname() or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"worker {worker_id!r} is gone: process {pid} no longer exists on host {host!r}"
    except OSError:  # PermissionError: it exists, under another user
        return None
    if _exited(pid):
        return f"worker {worker_id!r} is gone: process {pid} on host {host!r} has exited"
    return None


async def take_back(store: DurableStore, row: StepRow, now: float) -> Execution | None:
    """Take back the lease of a leased step row whose worker is gone (`gone_reason`).

    A pending or failed row still fenced by a lease a cancel revoked has that fence lifted
    (``release_dead`` records `LeaseReleased`; returns None).

    Records `WorkerRecovered` with the reason (``release_dead``) and logs it at WARNING.

    Returns:
        The lease taken back; None if the row is not leased, its worker may be alive, or the
        lease changed meanwhile.
    """
    fence = row.lease_expires_at is not None and row.state in (
        StepState.PENDING, StepState.FAILED  # a lease a cancel revoked (its fence)
    )
    if not (row.state is StepState.LEASED or fence) or row.worker_id is None:
        return None
    reason = gone_reason(row.worker_id)
    if reason is None:
        return None
    execution = execution_of(row)
    if fence:
        execution = replace(execution, attempt=max(execution.attempt, 1))
        await store.release_dead(execution, now, reason)  # LeaseReleased lifts the fence
        return None
    return execution if await _release(store, execution, now, reason) else None


async def take_back_gone(store: DurableStore, execution: Execution, now: float) -> bool:
    """Take back a live lease (`DurableStore.live_leases`) if its worker is gone.

    As `take_back`: records `WorkerRecovered` with the reason and logs it at WARNING.

    Returns:
        True if taken back; False if its worker may be alive or the lease changed meanwhile.
    """
    reason = gone_reason(execution.worker_id)
    return reason is not None and await _release(store, execution, now, reason)


async def take_back_held(
    store: DurableStore, clock: Clock, workflow_id: str, index: int, holder: str
) -> bool:
    """Take back the lease a claim found held by `holder` if its process is gone.

    Returns:
        True to claim again (taken back, or the step moved on meanwhile); False if the
        holder may be alive.
    """
    if gone_reason(holder) is None:
        return False
    row = (await store.step_rows(workflow_id))[index]
    if row.worker_id == holder:  # leased, or fenced by a lease a cancel revoked
        await take_back(store, row, clock.time())
    return True


def host_prefix() -> str:
    """The prefix of the default worker ids of this host: ``"{host}:"``."""
    return f"{socket.gethostname()}:"


async def _release(store: DurableStore, execution: Execution, now: float, reason: str) -> bool:
    if not await store.release_dead(execution, now, reason):
        return False
    LOGGER.warning(
        "step %r of workflow %r: %s; its lease is taken back at once",
        execution.step_name, execution.workflow_id, reason,
    )
    return True


def held_message(
    step_name: str, workflow_id: str, worker_id: str, expires_at: float, now: float
) -> str:
    """The message logged once (DEBUG) when a run must wait for another worker's live lease."""
    until = utc(expires_at).isoformat(timespec="seconds") if expires_at < 1e11 else "never"
    return (
        f"step {step_name!r} of workflow {workflow_id!r} is leased by worker {worker_id!r} "
        f"until {until} (in {max(expires_at - now, 0.0):.0f} s); waiting"
    )


def lost_message(title: str, why: object, closed: bool, cancelled: bool = False) -> str:
    """The message logged when a renewal finds a running attempt's lease gone.

    Args:
        title: The step, as `agentq.workflows.attempts.step_title` names it.
        why: What the store said to the renewal (its message names the new state).
        closed: Whether the workflow is closed (cancelled elsewhere) rather than the step
            taken over by another worker.
        cancelled: Whether the renewal found the lease revoked by a cancel (the workflow
            may be running again since, retried: nobody took the step over).
    """
    if cancelled:
        return (
            f"{title}: the workflow was cancelled ({why}); its body is interrupted and its "
            "outcome is not recorded"
        )
    cause = "the workflow was closed elsewhere" if closed else "another worker took it over"
    return (
        f"{title}: the lease is gone ({cause}: {why}); its body is interrupted and its "
        "outcome is not recorded"
    )
