"""``python -m agentq``: the command line (see `agentq.cli`; needs the ``cli`` extra)."""

import sys

try:
    from agentq.cli import main
except ImportError as exc:  # click or rich missing: say which extra, not a traceback
    sys.exit(f"agentq: the command line needs the 'cli' extra: pip install 'agentq[cli]' ({exc})")

main()
