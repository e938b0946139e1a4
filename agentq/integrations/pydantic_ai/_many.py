"""`DurableAgent.run_many`: one agent on many prompts as one run group (`engine.group`).

Each prompt's run is the workflow ``<group_id>/<key>``, stored as `DurableAgent.start`
stores one run (its options, deps given in this process); the group's manifest records the
stored inputs, then every run goes as `DurableAgent.run` goes, all at once (the queue's lane
bounds how many attempts run together). The same call again, after a crash or not, runs
again only the runs that did not succeed (`RunGroup.submit`): completed runs answer from
their records, failed and cancelled ones are retried, open ones continue where they stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from agentq.errors import KeyConflictError, WorkflowMismatchError
from agentq.store import member_id
from agentq.workflows import WorkflowDef, WorkflowEngine

__all__ = ["run_group"]

R = TypeVar("R")


async def run_group(
    engine: WorkflowEngine,
    definition: WorkflowDef,
    prompts: Mapping[str, Any],
    group_id: str,
    start: Callable[[Any, str], Awaitable[str]],
    run: Callable[[Any, str], Awaitable[R]],
) -> dict[str, R]:
    """Store the runs and the group's manifest, then run them all; their results by key.

    Args:
        engine: The agent's engine.
        definition: The agent's `WorkflowDef`.
        prompts: Key (no ``/``) to prompt.
        group_id: The group's id (no ``/``).
        start: ``start(prompt, run_id)``: stores one run (`DurableAgent.start`).
        run: ``run(prompt, run_id)``: runs (or joins, or reads back) one run.

    Raises:
        TypeError: `prompts` is not a mapping.
        ValueError: Empty `prompts`, a key or group id with a ``/``, or the group stored with
            another set of keys (nothing is stored then).
        KeyConflictError: The group is stored with another prompt or other options for a
            key (nothing is changed).
    """
    if not isinstance(prompts, Mapping):
        raise TypeError(f"run_many expects a mapping of key to prompt, got {prompts!r:.80}")
    group = engine.group(group_id)
    if not prompts:
        raise ValueError(f"group {group_id!r}: no prompts; a group has at least one run")
    ids = {key: member_id(group_id, key) for key in prompts}
    stored = await group.manifest()
    if stored is not None:
        group.same_keys(stored, prompts)
    for key, prompt in prompts.items():
        try:
            await start(prompt, ids[key])
        except WorkflowMismatchError as exc:
            if stored is None:
                raise
            raise KeyConflictError(
                f"group {group_id!r} is stored with another run for key {key!r}: {exc}"
            ) from exc
    inputs = {}
    for key, run_id in ids.items():
        row = await engine.store.get_workflow(run_id)
        assert row is not None  # stored just above
        inputs[key] = row.input
    await group.submit(definition, inputs)
    results = await asyncio.gather(*(run(prompts[key], ids[key]) for key in prompts))
    return dict(zip(prompts, results, strict=True))
