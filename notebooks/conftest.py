"""Under ``pytest --nbmake notebooks``, the notebooks run unattended: they click for you.

A showcase notebook waits for a person's click (an approval) where a person would click; run
unattended it must do the click itself. This conftest sets ``AGENTQ_NOTEBOOK_AUTOPILOT=1``
while each notebook of this folder runs (the kernel nbmake starts inherits it) and removes it
afterwards, so nothing else in the session (the browser suite's JupyterLab, say) sees it. A
notebook reads it as ``AUTOPILOT`` and never clicks without it: a person running the notebook,
Run All included, and Voila get the click to make.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

AUTOPILOT = "AGENTQ_NOTEBOOK_AUTOPILOT"


HERE = Path(__file__).resolve().parent


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Set the variable while a notebook of this folder runs (nbmake runs it in this phase);
    `item.ihook` calls this hook only for items under this folder."""
    if HERE not in Path(item.path).resolve().parents:
        return (yield)
    old = os.environ.get(AUTOPILOT)
    os.environ[AUTOPILOT] = "1"
    try:
        return (yield)
    finally:
        if old is None:
            os.environ.pop(AUTOPILOT, None)
        else:
            os.environ[AUTOPILOT] = old
