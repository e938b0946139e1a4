"""What a run does with a step it finds waiting: join the child run the step waits on
(``ctx.child``), or arm the live timer of the wait's deadline.

Private to `agentq.workflows.driver`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentq.store import DurableStore, StepState
from agentq.workflows.children import waited_child

__all__ = ["joined_child", "watch_deadline"]


async def joined_child(
    store: DurableStore,
    on_child: Callable[[str], Awaitable[bool]] | None,
    workflow_id: str,
    index: int,
    joined: set[str],
) -> bool:
    """If step `index` waits on a child run, let `on_child` join it; True once it ended (its
    end resumed the step: claim again). Each child is joined once per step (`joined`), so a
    step found waiting on it again ends the run waiting."""
    if on_child is None:
        return False
    found = waited_child((await store.step_rows(workflow_id))[index])
    if not isinstance(found, str):
        return found is True  # True: a child's end answered the wait already
    if found in joined:
        return False
    joined.add(found)
    return await on_child(found)


async def watch_deadline(
    store: DurableStore,
    on_deadline: Callable[[str, float], None] | None,
    workflow_id: str,
    index: int,
) -> None:
    """Tell `on_deadline` the deadline of the keyed wait step `index` is on, if any: a run
    that finds a step waiting (after a restart, `recover`) arms the live timer, so that the
    wait times out on time with nobody calling `run`."""
    if on_deadline is None:
        return
    row = (await store.step_rows(workflow_id))[index]
    if row.state is StepState.WAITING and row.wait_deadline is not None:
        on_deadline(workflow_id, row.wait_deadline)
