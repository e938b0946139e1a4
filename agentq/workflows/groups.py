"""Run groups: many workflow instances as one durable unit (`RunGroup`).

``group = engine.group("eval-7")``; ``await group.submit(definition, {"a": 1, "b": 2})``
records the group's manifest in the store (`DurableStore.record_group`: each key's definition
name and input) and starts the members, the workflows ``eval-7/a`` and ``eval-7/b``,
which this engine runs in the background (`run_soon`); any engine serving the definition on
the same store may take some of them up. The manifest is what makes the group durable:
after a crash, in a new process, ``submit`` of the same items (or `resume`) runs again only
the members that did not succeed (failed and cancelled ones are retried, completed ones are
left as they are, open ones are run by this engine where they stopped).

The members are mostly instances of one definition; ``submit({"a": def_a, "b": def_b},
items)`` gives each key its own (a program that builds one definition per task).

`results` yields the members as they end (those that ended already first, by end time),
`status` counts them by state, `cancel` cancels the open ones, `forget` removes the
manifest (the members stay stored). The members are ordinary workflows: `engine.run`,
`agentq show`, the frames and widgets see them as any other.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import Any, Protocol

from agentq.clock import Clock
from agentq.codec import copy_json, encode
from agentq.errors import KeyConflictError, NotRetryableError, UnknownWorkflowError
from agentq.keys import validate_key
from agentq.store import (
    DurableGroups,
    DurableStore,
    GroupManifest,
    StepState,
    WorkflowRow,
    WorkflowState,
    member_id,
    summed_usage,
)
from agentq.store.contract.groups import keys_text
from agentq.workflows.group_checks import same_group, same_keys
from agentq.workflows.group_ends import Watch, ended_rows
from agentq.workflows.members import STATES, GroupMember, GroupStatus
from agentq.workflows.model import RunResult, WorkflowDef

__all__ = ["RunGroup"]

class GroupEngine(Protocol):
    """What a `RunGroup` needs of its `WorkflowEngine`."""

    @property
    def store(self) -> DurableStore: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def poll_interval(self) -> float: ...

    def definition(self, name: str) -> WorkflowDef | None: ...

    def register(self, definition: WorkflowDef) -> None: ...

    async def start(
        self, definition: WorkflowDef | str, workflow_id: str, input: Any = None
    ) -> bool: ...

    def run_soon(self, workflow: str) -> None: ...

    def running(self, workflow_id: str) -> bool: ...

    async def cancel(self, workflow_id: str, reason: str = "cancelled") -> bool: ...


class RunGroup:
    """A run group of one engine (see the module docstring); made by `WorkflowEngine.group`.

    Args:
        engine: The engine that starts and runs the members.
        group_id: The group's id (a key); member ``k`` is the workflow ``<group_id>/k``.
        watch: Tells a function the id of each run of the engine that ends, until the
            function it returns is called (`Runs.watch`); `results` reads that member then.
        run_of: The engine's run of a workflow in progress, or None (a retry waits for
            the end of a cancelled member's run before it runs the member again).

    Raises:
        InvalidKeyError / TypeError: A bad `group_id`.
        TypeError: The engine's store keeps no run groups (no `DurableGroups` verbs).

    Use it on the engine's event loop.
    """

    def __init__(
        self,
        engine: GroupEngine,
        group_id: str,
        watch: Watch,
        run_of: Callable[[str], asyncio.Task[RunResult] | None],
    ) -> None:
        self.group_id = validate_key(group_id, "group id")
        if "/" in self.group_id:
            raise ValueError(
                f"a group id holds no '/' (its members are <group_id>/<key>): {group_id!r}"
            )
        store = engine.store
        if not isinstance(store, DurableGroups):
            raise TypeError(f"{store!r} keeps no run groups (it has no DurableGroups verbs)")
        self._engine = engine
        self._groups: DurableGroups = store
        self._watch = watch
        self._run_of = run_of

    def __repr__(self) -> str:
        return f"RunGroup({self.group_id!r})"

    async def submit(
        self,
        definition: WorkflowDef | str | Mapping[str, WorkflowDef | str],
        items: Mapping[str, Any],
    ) -> bool:
        """Record the group's manifest and start its members; submitted again, run again
        only the members that did not succeed (as `resume`).

        Args:
            definition: A `WorkflowDef` (registered on the way) or the name of one
                registered with this engine: every member's. Or a mapping giving each key
                of `items` its own (definitions or names, the same keys as `items`): the
                manifest keeps each key's definition name.
            items: Each member's key (no ``/``) mapped to its input (JSON); at least one.

        Returns:
            True if this call recorded the manifest; False if the same group was stored
            already (then it resumed it).

        Raises:
            KeyConflictError: The group is stored with another input or another definition
                for a key, or a member ``<group>/<key>`` is stored (e.g. after `forget`,
                which keeps the members' runs) with another input (the message names the
                keys); nothing changes.
            ValueError: The group is stored with another set of keys (the message names the
                difference), `items` is empty, a key holds a ``/``, or `definition` is a
                mapping whose keys are not those of `items` (the message names the
                difference); nothing changes.
            UnknownWorkflowError: A name no registered definition has.
            TypeError: `items` is not a mapping, or a definition neither a `WorkflowDef`
                nor a str.
            PayloadError: An input is not JSON or too large.
        """
        found = self._definitions(definition, items)
        names: str | dict[str, str]
        if isinstance(found, WorkflowDef):
            names = found.name
        else:
            names = {key: d.name for key, d in found.items()}
        await self._same_members(items)
        now = self._engine.clock.time()
        manifest, created = await self._groups.record_group(
            self.group_id, definition=names, items=items, now=now
        )
        if not created:
            self._same(manifest, names, items)
        await self._drive(manifest, self._by_name(found))
        return created

    async def resume(self) -> int:
        """Run again the members that did not succeed: start those never stored, retry the
        failed and cancelled ones, run the open ones here (where they stopped; a live lease
        of another engine is respected). Completed members are left as they are. A member
        cancelled while this engine ran it is retried once that run has ended (its body
        stopped).

        Returns:
            How many members were started, retried or continued: every member not
            completed, except an open one this engine runs already (one under another
            engine's live lease is counted, though that engine keeps it).

        Raises:
            UnknownWorkflowError: No manifest is stored under this id, or a definition of
                its members is not registered with this engine (the message names them).
        """
        manifest = await self._manifest()
        found: dict[str, WorkflowDef] = {}
        missing: list[str] = []
        for name in dict.fromkeys(manifest.definitions.values()):
            definition = self._engine.definition(name)
            if definition is None:
                missing.append(name)
            else:
                found[name] = definition
        if missing:
            raise UnknownWorkflowError(
                f"group {self.group_id!r}: {len(missing)} definition(s) of its members are "
                f"not registered with this engine: {keys_text(missing)}; register them first"
            )
        return await self._drive(manifest, found)

    async def status(self) -> GroupStatus:
        """Count the members by state (one read of the store).

        Raises:
            UnknownWorkflowError: No manifest is stored under this id.
        """
        manifest = await self._manifest()
        rows = await self._members(manifest)
        counts = dict.fromkeys(STATES, 0)
        for key in manifest.items:
            row = rows.get(key)
            counts["pending" if row is None else row.state.value] += 1
        return GroupStatus(**counts)

    async def results(self) -> AsyncGenerator[GroupMember, None]:
        """Yield each member once it has ended, in the order they ended (those that ended
        before the call first), until every member has been yielded.

        It reads every member once, then the member of each run of this engine that ends,
        and every member again each `poll_interval` of the engine (members run by other
        processes, or cancelled from elsewhere, are seen at that read; see
        ``agentq.workflows.group_ends``). A member that never ends (waiting for input
        nobody gives) keeps the iteration open.

        Raises:
            UnknownWorkflowError: No manifest is stored under this id.
        """
        manifest = await self._manifest()
        ends = ended_rows(
            self.group_id,
            manifest.items,
            read_all=lambda: self._members(manifest),
            read_one=self._engine.store.get_workflow,
            watch=self._watch,
            clock=self._engine.clock,
            poll_interval=self._engine.poll_interval,
        )
        async with contextlib.aclosing(ends):
            async for key, row, outputs in ends:
                yield await self._member(key, row, outputs)

    async def cancel(self, reason: str = "cancelled") -> int:
        """Cancel every member that has not ended (see `WorkflowEngine.cancel`).

        Returns:
            How many members this call cancelled.

        Raises:
            UnknownWorkflowError: No manifest is stored under this id.
        """
        manifest = await self._manifest()
        rows = await self._members(manifest)
        count = 0
        for key in manifest.items:
            row = rows.get(key)
            if row is not None and not row.state.closed:
                count += await self._engine.cancel(row.workflow_id, reason)
        return count

    async def forget(self) -> bool:
        """Remove the manifest from the store; the members stay stored (and running).

        Returns:
            True if a manifest was removed, False if none was stored.
        """
        return await self._groups.forget_group(self.group_id)

    async def manifest(self) -> GroupManifest | None:
        """The stored manifest, or None."""
        return await self._groups.load_group(self.group_id)

    # ------------------------------------------------------------ private

    def _definitions(
        self, definition: object, items: Mapping[str, Any]
    ) -> WorkflowDef | dict[str, WorkflowDef]:
        """The definition (or each key's; registered on the way) `submit` was given."""
        if not isinstance(definition, Mapping):
            return self._definition(definition)
        return {key: self._definition(value) for key, value in definition.items()}

    @staticmethod
    def _by_name(found: WorkflowDef | dict[str, WorkflowDef]) -> dict[str, WorkflowDef]:
        if isinstance(found, WorkflowDef):
            return {found.name: found}
        return {d.name: d for d in found.values()}

    def _definition(self, definition: object) -> WorkflowDef:
        if isinstance(definition, WorkflowDef):
            self._engine.register(definition)
            return definition
        if isinstance(definition, str):
            found = self._engine.definition(definition)
            if found is None:
                raise UnknownWorkflowError(
                    f"no definition named {definition!r} is registered with this engine"
                )
            return found
        raise TypeError(
            f"submit() expects a WorkflowDef or its name (or a mapping of key to one), got "
            f"{definition!r:.80}"
        )

    def _same(
        self, stored: GroupManifest, names: str | Mapping[str, str], items: Mapping[str, Any]
    ) -> None:
        """Raise unless `items` (already checked by the store) is the stored group."""
        same_group(self.group_id, stored, names, items)

    async def _same_members(self, items: Mapping[str, Any]) -> None:
        """Raise `KeyConflictError` naming the keys whose member (``<group>/<key>``) is
        stored, e.g. after `forget`, with another input than `items` gives it."""
        prefix = len(self.group_id) + 1
        rows = await self._groups.group_members(self.group_id)
        stored = {row.workflow_id[prefix:]: row.input for row in rows}
        changed = [
            k for k in items if k in stored and encode(items[k]) != encode(stored[k])
        ]
        if changed:
            raise KeyConflictError(
                f"group {self.group_id!r}: {len(changed)} member(s) are stored with another "
                f"input: {keys_text(changed)} (`forget` keeps the members' runs); use "
                f"another group id; nothing was changed"
            )

    def same_keys(self, stored: GroupManifest, keys: Iterable[str]) -> None:
        """Raise `ValueError` naming the difference unless `keys` are the stored group's keys
        (in any order)."""
        same_keys(self.group_id, stored, keys)

    async def _manifest(self) -> GroupManifest:
        manifest = await self._groups.load_group(self.group_id)
        if manifest is None:
            raise UnknownWorkflowError(f"no run group {self.group_id!r} is in the store")
        return manifest

    async def _members(self, manifest: GroupManifest) -> dict[str, WorkflowRow]:
        """The stored rows of the manifest's members, by key (children of members left out)."""
        prefix = len(self.group_id) + 1
        rows = await self._groups.group_members(self.group_id)
        found = {row.workflow_id[prefix:]: row for row in rows}
        return {key: row for key, row in found.items() if key in manifest.items}

    async def _drive(self, manifest: GroupManifest, definitions: dict[str, WorkflowDef]) -> int:
        """Start the members never stored, retry the failed and cancelled ones, run the
        open ones here; return how many were started, retried or continued (an open one
        this engine runs already not counted)."""
        engine, store = self._engine, self._engine.store
        rows = await self._members(manifest)
        count = 0
        for key, value in manifest.items.items():
            row = rows.get(key)
            wid = member_id(self.group_id, key)
            if row is None:
                count += await engine.start(definitions[manifest.definitions[key]], wid, value)
            elif row.state in (WorkflowState.FAILED, WorkflowState.CANCELLED):
                ending = self._run_of(wid)  # a cancelled run on its way out: let it end
                if ending is not None:
                    await asyncio.wait([ending])
                with contextlib.suppress(NotRetryableError):  # retried by another, meanwhile
                    await store.retry_workflow(wid, None, engine.clock.time())
                    count += 1
            elif row.state is WorkflowState.COMPLETED:
                continue
            elif not engine.running(wid):
                count += 1  # an open one: continued here
            engine.run_soon(wid)
        return count

    async def _member(
        self, key: str, row: WorkflowRow, outputs: tuple[Any, ...] | None
    ) -> GroupMember:
        """The member of `row`; `outputs` are those of the run here that completed it, if
        any (its steps are then not read again: a completed step's output never changes)."""
        completed = row.state is WorkflowState.COMPLETED
        if outputs is not None and completed:
            steps: list[Any] = []
            output = copy_json(outputs[-1]) if outputs else None  # the caller's own copy
        else:
            steps = await self._engine.store.step_rows(row.workflow_id)
            done = [s.output for s in steps if s.state is StepState.COMPLETED]
            output = done[-1] if completed and done else None
        calls = await self._engine.store.calls(row.workflow_id)
        return GroupMember(
            key,
            row.workflow_id,
            row.state.value,
            output,
            None if completed else row.reason or _failed_reason(steps),
            summed_usage([c.usage for c in calls]),
            row.updated_at,
        )

def _failed_reason(steps: list[Any]) -> str | None:
    return next((s.reason for s in steps if s.state is StepState.FAILED), None)
