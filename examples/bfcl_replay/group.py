"""The replay's tasks as one run group (``engine.group("bfcl")``), the way `run` drives them.

Each task is an instance of its own `WorkflowDef` (``bfcl:<task id>``: its steps close over
the task's calls, one step per turn, see `replay.task_steps`), so the group is submitted with
a definition per key: ``group.submit({task id: definition}, {task id: input})``. The members
are the workflows ``bfcl/<task id>``, the ids the replay has always used.

`open_group`, before recovery resumes anything: a store that holds the group with another
selection of tasks (``--tasks 5`` after the full demo, on the same file) has its manifest
replaced (`RunGroup.forget`; the members stay stored, so a task already done is found done);
a group left unfinished (a kill, Ctrl-C) is reported: how many members completed earlier.

`drive_group`:

1. submits the group: the first time it records the manifest and starts every member; after
   a crash (the same command again, on the same file) the same submission records nothing
   and runs only the members that did not complete: completed ones are left as they are,
   open ones go on where they stopped (a call in doubt runs once more and the service host
   refuses it if it had applied it), failed ones are retried;
2. answers the approvals: a member whose turn asks for one parks (``Waiting``); one small
   task per member joins its run and answers each wait with the `ApprovalPolicy` through
   ``engine.resume`` (`replay.drive`), as a person would;
3. collects the members with ``group.results()`` as they end (those that ended before, in an
   earlier process, first), calling ``on_member`` for each (the progress lines count them);
   each member's `RunResult` (its step outputs, for the check) is what its approval task's
   `replay.drive` returned (for a member ended earlier: its stored result).

How many members run at once is bounded by the steps' lane (`plan.step_lanes`,
``--concurrency``), not here: the group starts every member and the queue admits their steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from agentq import GroupMember, RunResult, WorkflowDef, WorkflowEngine

from .approval import ApprovalPolicy
from .dataset import Task
from .plan import workflow_id
from .replay import ReplayEnv, drive, task_input, task_steps

GROUP_ID = "bfcl"
"""The run group of the replayed tasks; member ``<task id>`` is the workflow ``bfcl/<task id>``
(`plan.workflow_id`)."""

__all__ = ["GROUP_ID", "build_definition", "drive_group", "open_group"]


def build_definition(task: Task, env: ReplayEnv) -> WorkflowDef:
    """Return the definition of a task's workflow: ``bfcl:<task id>``, a step per turn."""
    return WorkflowDef(f"bfcl:{task.id}", task_steps(task, env))


async def open_group(
    engine: WorkflowEngine, tasks: Sequence[Task], say: Callable[[str], None]
) -> None:
    """Replace a stored manifest of other tasks; report an unfinished one (see the module
    docstring) through `say`, which prints a line."""
    group = engine.group(GROUP_ID)
    stored = await group.manifest()
    if stored is None:
        return
    if set(stored.items) != {task.id for task in tasks}:
        say(
            f"group {GROUP_ID}: the store holds it with {len(stored.items)} other tasks; "
            f"replacing its manifest with these {len(tasks)} (stored workflows are kept)"
        )
        await group.forget()
        return
    counts = await group.status()
    if counts.ended < counts.total:
        say(
            f"group {GROUP_ID}: resuming · {counts.completed} of {counts.total} members "
            "completed earlier are not run again"
        )


async def drive_group(
    engine: WorkflowEngine,
    tasks: Sequence[Task],
    definitions: Mapping[str, WorkflowDef],
    policy: ApprovalPolicy,
    *,
    on_member: Callable[[GroupMember], None] | None = None,
) -> dict[str, RunResult]:
    """Run the tasks as the run group `GROUP_ID` to their end (see the module docstring).

    Args:
        engine: The engine (on the replay's store and queue).
        tasks: The tasks of this run, in order (at least one).
        definitions: Each task's definition (`build_definition`), by task id.
        policy: The headless approver.
        on_member: Called with each member as it ends (`RunGroup.results`).

    Returns:
        The final `RunResult` of each task's workflow, by workflow id, in the tasks' order.

    Raises:
        ExceptionGroup: Driving a member raised (a store failure, a bug); the others' drivers
            were cancelled (their runs go on until the engine closes).
    """
    inputs = {task.id: task_input(task) for task in tasks}
    group = engine.group(GROUP_ID)
    await group.submit(definitions, inputs)
    ids = [workflow_id(task.id) for task in tasks]
    async with asyncio.TaskGroup() as drivers:
        # each joins its member's run, answers its approvals, and returns its final result
        driven = [drivers.create_task(drive(engine, wid, policy), name=f"bfcl.approve:{wid}")
                  for wid in ids]
        async for member in group.results():
            if on_member is not None:
                on_member(member)
    return {wid: task.result() for wid, task in zip(ids, driven, strict=True)}
