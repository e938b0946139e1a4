"""Import optional dependencies, naming the extra to install when one is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from agentq.errors import MissingExtraError


def require(module: str, extra: str) -> ModuleType:
    """Import `module` or raise `MissingExtraError` naming ``agentq[extra]``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module!r} is not installed; install it with: pip install 'agentq[{extra}]'"
        ) from exc
