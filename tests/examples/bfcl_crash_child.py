"""Child process of the crash tests (not a test module).

Applies every ground-truth call of the 200 tasks, in order, through a `ServiceHost` on the
file given, with the key `<task id>/<turn>/<index>`, retrying transient errors. With a kill
point it SIGKILLs itself on the n-th call it applies for the first time:

- `before`: just before calling `apply` (n - 1 calls committed);
- `during`: inside the transaction, after the call changed the services in memory and before
  the commit (n - 1 committed);
- `after`: right after `apply` returned (n committed).

With the point `none` it runs to the end and prints the host's stats as JSON.

Usage: python bfcl_crash_child.py PATH POINT N TRANSIENT_ERROR_RATE
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys

from examples.bfcl_replay.dataset import load_tasks
from examples.bfcl_replay.errors import TransientToolError
from examples.bfcl_replay.servicehost import ServiceHost


def main(path: str, point: str, n: int, rate: float) -> None:
    tasks = load_tasks()
    fresh = 0

    def die(here: str) -> None:
        if point == here and fresh + (here != "after") == n:
            os.kill(os.getpid(), signal.SIGKILL)

    with ServiceHost(
        path, tasks, transient_error_rate=rate, seed=n, before_commit=lambda key: die("during")
    ) as host:
        for task in tasks:
            for turn, calls in enumerate(task.calls):
                for index, call in enumerate(calls):
                    key = f"{task.id}/{turn}/{index}"
                    if host.results(task.id).get(key) is None:
                        die("before")
                    while True:
                        try:
                            applied = host.apply(task.id, key, call)
                            break
                        except TransientToolError:
                            continue
                    if not applied.duplicate:
                        fresh += 1
                        die("after")
        print(json.dumps(dataclasses.asdict(host.stats())))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
