"""What OpenTelemetry spans cost: the same work with tracing off and on, in one run.

    python -m bench.tracing [--jobs 5000] [--workflows 500] [--repeat 5]

Three kinds of work, each measured in four settings (rows), round-robin, best of `--repeat`:

- span point: `agentq.tracing.capture` and an empty ``with tracing.span(...)`` block, 20,000
  times: what one place that may start a span costs, without the work around it (the least
  noisy row on a busy machine);
- queue: ``push_and_wait`` of `--jobs` no-op async jobs on a `Queue` without a store (the
  hot path: one `agentq.job` span per job when on);
- engine: `WorkflowEngine.run` of `--workflows` three-step no-op workflows on a
  `MemoryStore` (no disk: what the spans add shows; a run span, three attempt spans and three
  job spans per workflow when on).

Settings:

- no API: as if ``opentelemetry-api`` were not installed (agentq's no-op path);
- API, no SDK (the 1x row): the API installed, no tracer provider set: what every user who
  has the API without an SDK pays;
- SDK, no exporter: an SDK `TracerProvider` with no span processor (spans are built and
  dropped);
- SDK, in-memory exporter: every span ends in a `SimpleSpanProcessor` and an
  `InMemorySpanExporter` (cleared between runs).

Needs ``opentelemetry-sdk`` (the test extra). The machine's load average is printed: on a
shared machine, compare ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.util._once import Once  # noqa: E402

import agentq.tracing as tracing  # noqa: E402
from agentq import (  # noqa: E402
    Job,
    LaneConfig,
    MemoryStore,
    Priority,
    Queue,
    RunStatus,
    StepDef,
    Workflow,
    WorkflowEngine,
)

SETTINGS = ("no API", "API, no SDK", "SDK, no exporter", "SDK, in-memory exporter")
EXPORTER = InMemorySpanExporter()


def _set_provider(provider: Any) -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    if provider is not None:
        trace.set_tracer_provider(provider)


def _setting(name: str) -> Callable[[], None]:
    """Switch to a setting; returns the function that undoes it."""
    real = tracing._api
    if name == "no API":
        tracing._api = lambda: None  # type: ignore[assignment]
        _set_provider(None)
    elif name == "API, no SDK":
        _set_provider(None)
    elif name == "SDK, no exporter":
        _set_provider(TracerProvider())
    else:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        _set_provider(provider)

    def undo() -> None:
        tracing._api = real  # type: ignore[method-assign]
        _set_provider(None)
        EXPORTER.clear()

    return undo


async def _noop() -> int:
    return 1


POINTS = 20_000


async def point_row(_n: int) -> float:
    """One span point as the queue pays it per job: capture, then a span around nothing."""
    start = time.perf_counter()
    for _ in range(POINTS):
        with tracing.span(tracing.JOB, None, parent=tracing.capture()):
            pass
    return time.perf_counter() - start


async def queue_row(jobs: int) -> float:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=jobs, permits=8)}) as queue:
        start = time.perf_counter()
        for i in range(jobs):
            await queue.push_and_wait(Job(f"j{i}", _noop))
        return time.perf_counter() - start


async def engine_row(workflows: int) -> float:
    steps = [StepDef(name, lambda ctx: 1) for name in ("a", "b", "c")]
    async with (
        Queue({Priority.MEDIUM: LaneConfig(capacity=64, permits=8)}) as queue,
        WorkflowEngine(queue, MemoryStore(), worker_id="bench") as engine,
    ):
        start = time.perf_counter()
        for i in range(workflows):
            result = await engine.run(Workflow(f"w{i}", steps))
            assert result.status is RunStatus.COMPLETED
        return time.perf_counter() - start


async def main(jobs: int, workflows: int, repeat: int) -> None:
    print(f"Python {sys.version.split()[0]}, {jobs} jobs, {workflows} workflows of 3 steps, "
          f"best of {repeat}; load average {os.getloadavg()[0]:.2f}")
    work: dict[str, tuple[Callable[[], Awaitable[float]], int, str]] = {
        "span point": (lambda: point_row(POINTS), POINTS, "spans/s"),
        "queue": (lambda: queue_row(jobs), jobs, "jobs/s"),
        "engine": (lambda: engine_row(workflows), workflows * 3, "steps/s"),
    }
    best: dict[tuple[str, str], float] = {}
    for _ in range(repeat):
        for kind, (row, _n, _unit) in work.items():
            for name in SETTINGS:
                undo = _setting(name)
                try:
                    seconds = await row()
                finally:
                    undo()
                key = (kind, name)
                best[key] = min(best.get(key, float("inf")), seconds)
    print(f"{'row':<40}{'per second':>17}{'µs each':>10}{'vs API, no SDK':>16}")
    for kind, (_row, n, unit) in work.items():
        base = best[(kind, "API, no SDK")]
        for name in SETTINGS:
            seconds = best[(kind, name)]
            print(f"{kind + ', ' + name:<40}{n / seconds:>11,.0f} {unit.split('/')[0]:<5}"
                  f"{seconds / n * 1e6:>9.1f}{seconds / base:>15.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--workflows", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.jobs, args.workflows, args.repeat))
