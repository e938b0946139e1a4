"""``python -m agentq`` and the ``agentq`` console script: the command line (see `agentq.cli`).

The command line needs the ``cli`` extra (click, rich). Both entries come here first, so that
without it they print one line naming the extra (exit code 1), not a traceback.
"""

import sys

__all__ = ["main"]


def main() -> None:
    """Run the command line; without the ``cli`` extra, exit 1 with a one-line hint."""
    try:
        from agentq.cli import main as cli_main
    except ImportError as exc:  # click or rich missing: say which extra, not a traceback
        sys.exit(
            f"agentq: the command line needs the 'cli' extra: pip install 'agentq[cli]' ({exc})"
        )
    cli_main()


if __name__ == "__main__":
    main()
