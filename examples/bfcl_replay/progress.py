"""What a replay prints while it runs, and what it counts of the calls' jobs.

`Tally` counts the retries of the calls' jobs from the queue's job events (the steps' own jobs,
in the MEDIUM lane, are left out); `Progress` prints a line now and then: tasks done, calls
applied by the service host, approvals, retries, duplicates the host refused. (The calls
answered from agentq's log are counted once the run has ended, in the summary: the engine adds
them up as each step attempt ends.)
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

from agentq import JobEvent, JobEventKind

from .approval import ApprovalPolicy
from .plan import STEP_LANE
from .servicehost import ServiceHost


@dataclass
class Tally:
    """What this process saw happen to the calls' jobs (from the queue's job events).

    Attributes:
        retries: Retries of the calls' jobs (their own `plan.CALL_RETRY`), by error type.
        done: Workflows driven to their end so far.
    """

    retries: Counter[str] = field(default_factory=Counter)
    done: int = 0

    def on_job(self, event: JobEvent) -> None:
        """Count one job event (a `Queue.subscribe` callback)."""
        if event.priority is STEP_LANE:
            return  # a step attempt: the calls' jobs run in the LOW and HIGH lanes
        if event.kind is JobEventKind.RETRY:
            error = getattr(event.outcome, "error", None)
            name = str(getattr(error, "type", "error")).rsplit(".", 1)[-1]
            self.retries[name] += 1


class Progress:
    """Prints a line every `seconds` or every `tasks` finished tasks, whichever comes first.

    Args:
        out: Where the lines go.
        total: Tasks of the run.
        host: The service host (its counts).
        tally: The job events' counts.
        policy: The approver (its counts).
    """

    def __init__(
        self,
        out: TextIO,
        total: int,
        host: ServiceHost,
        tally: Tally,
        policy: ApprovalPolicy,
    ) -> None:
        self.out, self.total, self.host, self.tally, self.policy = out, total, host, tally, policy
        self.start = time.perf_counter()
        self.printed_at = self.start
        self.printed_done = 0

    def line(self) -> None:
        """Print one line now."""
        stats = self.host.stats()
        elapsed = time.perf_counter() - self.start
        print(
            f"[{elapsed:6.1f} s] {self.tally.done:>3}/{self.total} tasks done · "
            f"{stats.applied:>4} calls applied · {self.policy.approved + self.policy.rejected} "
            f"approvals · {sum(self.tally.retries.values())} retries · "
            f"{stats.duplicates} duplicates refused",
            file=self.out,
            flush=True,
        )
        self.printed_at, self.printed_done = time.perf_counter(), self.tally.done

    async def run(self, seconds: float = 2.0, tasks: int = 20) -> None:
        """Print lines until cancelled."""
        while True:
            await asyncio.sleep(0.1)
            if (
                self.tally.done - self.printed_done >= tasks
                or time.perf_counter() - self.printed_at >= seconds
            ):
                self.line()
