"""``python -m examples.bfcl_replay``: replay BFCL's multi-turn tasks through agentq.

Examples:
    python -m examples.bfcl_replay                          # the demo (make demo): 200 base tasks
                                                            # as one run group; killed, the same
                                                            # command continues the group
    python -m examples.bfcl_replay --category all           # every category bfcl-eval ships
    python -m examples.bfcl_replay --fresh --crash-after 400 # dies with SIGKILL mid-way ...
    python -m examples.bfcl_replay --crash-after 400        # ... the same command finishes it
    python -m examples.bfcl_replay --agent pydantic-ai      # each task a pydantic-ai agent run

Exit status: 0 when every task completed and matches the ground truth, 1 otherwise, 2 on a
usage error, 130 when interrupted (Ctrl-C; the same command then recovers and finishes).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from .crash import KillPoint
from .dataset import DEFAULT_CATEGORY, categories
from .plan import STEP_PERMITS
from .report import format_summary
from .run import AGENTS, Options, replay


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """Parse the command line into `Options`."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.bfcl_replay",
        description="Replay the Berkeley Function Calling Leaderboard's multi-turn tasks "
        "through agentq (a workflow per task, a step per turn, a queued job per tool call), "
        "then check every call result and final service state against the ground truth.",
    )
    parser.add_argument(
        "--agent",
        choices=list(AGENTS),
        default="agentq",
        help="agentq: a workflow per task, a step per turn, a durable call per tool call; "
        "pydantic-ai: each task one DurableAgent run of a pydantic-ai agent whose scripted "
        "model emits each turn's ground-truth calls as tool calls (default: %(default)s)",
    )
    parser.add_argument(
        "--db",
        type=Path,
        default=None,
        help="agentq's SQLite file (default: out/bfcl.db, out/bfcl-agent.db with "
        "--agent pydantic-ai); ':memory:' for a MemoryStore",
    )
    parser.add_argument(
        "--services-db",
        type=Path,
        default=None,
        help="the simulated services' SQLite file (default: <db>-services.db beside --db)",
    )
    known = list(categories())
    parser.add_argument(
        "--category",
        choices=[*known, "all"],
        default=DEFAULT_CATEGORY,
        help="the BFCL multi-turn category to replay, or all of them (default: %(default)s)",
    )
    parser.add_argument(
        "--tasks", type=_count, default=None, help="only the first N tasks of each category"
    )
    parser.add_argument(
        "--transient-rate",
        type=_rate,
        default=0.05,
        help="probability a call fails transiently; retried by its job (default: %(default)s)",
    )
    parser.add_argument(
        "--crash-after",
        type=_count,
        default=None,
        metavar="N",
        help="SIGKILL this process once N calls were applied, at the next state-changing call;"
        " rerun the same command (without --fresh) to recover and finish",
    )
    parser.add_argument(
        "--crash-at",
        choices=[point.value for point in KillPoint],
        default=KillPoint.DURING.value,
        help="where around that call: before it, during it (applied, not committed) or after"
        " its commit (default: %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        type=_positive,
        default=STEP_PERMITS,
        metavar="N",
        help="turns worked on at once, the steps' lane permits (default: %(default)s); with 1,"
        " one turn runs at a time and a crash leaves exactly one call in doubt",
    )
    parser.add_argument("--seed", type=int, default=0, help="fault injector's seed")
    parser.add_argument(
        "--fresh", action="store_true", help="delete the databases and exports first"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument(
        "--reject-all",
        action="store_true",
        help="headless policy rejects every approval (those tasks fail) instead of approving",
    )
    args = parser.parse_args(argv)
    if args.db is None:
        args.db = Path("out/bfcl.db" if args.agent == "agentq" else "out/bfcl-agent.db")
    memory = str(args.db) == ":memory:"
    db: Path | None = None if memory else args.db
    base = Path("out/bfcl") if db is None else db.with_suffix("")
    services = args.services_db or base.with_name(f"{base.name}-services.db")
    return Options(
        db=db,
        services_db=services,
        stem=base,
        categories=tuple(known) if args.category == "all" else (args.category,),
        tasks=args.tasks,
        transient_rate=args.transient_rate,
        crash_after=args.crash_after,
        crash_at=KillPoint(args.crash_at),
        seed=args.seed,
        fresh=args.fresh,
        quiet=args.quiet,
        approve=not args.reject_all,
        concurrency=args.concurrency,
        agent=args.agent,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the replay, print the summary, return the exit status."""
    options = parse_args(argv)
    try:
        summary = asyncio.run(replay(options))
    except KeyboardInterrupt:
        again = "the same command again" + (" without --fresh" if options.fresh else "")
        print(f"interrupted: run {again} to recover and finish", file=sys.stderr)
        return 130
    print(format_summary(summary), flush=True)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
