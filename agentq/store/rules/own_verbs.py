"""`OwnVerbs`: the verbs of the rows each store keeps its own way, written once.

Job outcomes (`JobOutcomeStore`), run group manifests (`DurableGroups`), the shared rate
windows (`RateLedger`) and a sweep's transaction are not transition rules over the `Tx` of
`agentq.store.rules.tx`: a store writes them with its own statements. `OwnVerbs` holds each
verb's signature, docstring and argument checks once and runs the store's half, a function
of its `JobRules`, `GroupRules`, `RateRules` or `Sweeper`, in one transaction
(`_write_job`). The base of `agentq.store.rules.verbs.RuleStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, ClassVar, NamedTuple, TypeVar

import agentq.store.rules.sweep as rules_sweep
from agentq.keys import validate_key
from agentq.queue import BudgetGrant, Rate
from agentq.store.contract.groups import GroupManifest, check_group
from agentq.store.contract.sweep import DEFAULT_SWEPT_STATES, SweepReport, check_sweep

__all__ = ["GroupRules", "JobRules", "OwnVerbs", "RateRules"]

T = TypeVar("T")


class JobRules(NamedTuple):
    """How a store writes the ``job_outcomes`` of `JobOutcomeStore`, run by `_write_job`.

    Attributes:
        save: ``save(tx, key, fingerprint, output, completed_at, expires_at) -> bool``.
        forget: ``forget(tx, key) -> bool`` (the key already validated).
    """

    save: Callable[..., bool]
    forget: Callable[..., bool]


class GroupRules(NamedTuple):
    """How a store writes the run-group manifests of `DurableGroups`, run by `_write_job`.

    Attributes:
        record: ``record(tx, group_id, items, now) -> (GroupManifest, bool)``,
            the arguments checked (`check_group`).
        forget: ``forget(tx, group_id) -> bool`` (the id already validated).
    """

    record: Callable[..., tuple[GroupManifest, bool]]
    forget: Callable[..., bool]


class RateRules(NamedTuple):
    """How a store keeps the shared rate windows of `RateLedger`, run by `_write_job`.

    Attributes:
        take: ``take(tx, lane, rate, tokens, estimate, now) -> BudgetGrant``.
        settle: ``settle(tx, charge, tokens) -> None``.
        pause: ``pause(tx, lane, until) -> None``.
        resume: ``resume(tx, lane) -> bool``.
    """

    take: Callable[..., BudgetGrant]
    settle: Callable[..., None]
    pause: Callable[..., None]
    resume: Callable[..., bool]



class OwnVerbs:
    """The verbs of `JobOutcomeStore`, `DurableGroups`, `RateLedger` and ``sweep``, each one
    call of `_write_job` with the store's half of it.

    A subclass implements `_write` (see `RuleStore`) and sets `job_rules`, `group_rules`,
    `sweeper` and `rate_rules`.
    """

    job_rules: ClassVar[JobRules]
    """The store's job-outcome writes."""
    group_rules: ClassVar[GroupRules]
    """The store's run-group writes."""

    sweeper: ClassVar[rules_sweep.Sweeper]
    """The store's transaction of a sweep (`agentq.store.rules.sweep`), run by `_write_job`."""

    rate_rules: ClassVar[RateRules]
    """The store's shared rate windows."""

    async def _write(self, rule: Callable[..., T], *args: Any) -> T:
        """Run ``rule(tx, *args)`` in one transaction of the store; return its result.

        Raises:
            StoreError: The store is closed or failed; whatever the rule raises.
        """
        raise NotImplementedError

    async def _write_job(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a function of the store's own rules in one transaction (by default as a rule:
        `_write`)."""
        return await self._write(fn, *args)

    async def save_job(
        self,
        key: str,
        *,
        fingerprint: str,
        output: Any,
        completed_at: float,
        expires_at: float | None,
    ) -> bool:
        """See `JobOutcomeStore.save_job` (one transaction; the rule checks the arguments)."""
        return await self._write_job(
            self.job_rules.save, key, fingerprint, output, completed_at, expires_at
        )

    async def forget_job(self, key: str) -> bool:
        """See `JobOutcomeStore.forget_job`."""
        return await self._write_job(self.job_rules.forget, validate_key(key))

    async def record_group(
        self,
        group_id: str,
        *,
        definition: str | Mapping[str, str],
        items: Mapping[str, Any],
        now: float,
    ) -> tuple[GroupManifest, bool]:
        """See `DurableGroups.record_group` (one transaction; arguments checked first)."""
        gid, checked, at = check_group(group_id, definition, items, now)
        return await self._write_job(self.group_rules.record, gid, checked, at)

    async def forget_group(self, group_id: str) -> bool:
        """See `DurableGroups.forget_group`."""
        gid = validate_key(group_id, "group id")
        return await self._write_job(self.group_rules.forget, gid)

    async def sweep(
        self,
        *,
        ended_before: float | datetime,
        states: Iterable[str] = DEFAULT_SWEPT_STATES,
    ) -> SweepReport:
        """See `DurableStore.sweep` (batches of `_write_job`, one transaction each)."""
        cutoff, wanted = check_sweep(ended_before, states)
        return await rules_sweep.sweep(self._write_job, self.sweeper.batch, cutoff, wanted)

    async def take_budget(
        self,
        lane: str,
        *,
        rate: Rate | None,
        tokens: Rate | None,
        estimate: int,
        now: float,
    ) -> BudgetGrant:
        """See `RateLedger.take_budget` (one transaction; the rule checks the arguments)."""
        return await self._write_job(self.rate_rules.take, lane, rate, tokens, estimate, now)

    async def settle_budget(self, charge: int, tokens: int) -> None:
        """See `RateLedger.settle_budget`."""
        await self._write_job(self.rate_rules.settle, charge, tokens)

    async def pause_lane(self, lane: str, until: float) -> None:
        """See `RateLedger.pause_lane`."""
        await self._write_job(self.rate_rules.pause, lane, until)

    async def resume_lane(self, lane: str, now: float) -> bool:
        """See `RateLedger.resume_lane`."""
        return await self._write_job(self.rate_rules.resume, lane, now)
