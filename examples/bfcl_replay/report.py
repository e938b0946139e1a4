"""What a replay produced, checked against the ground truth, and the summary a person reads.

`collect_runs` rebuilds each task's `TaskRun` from what the replay recorded: the call results
are the steps' durable outputs in agentq's store, the final states are the service host's
committed states. `check` compares them with the ground truth run directly (`direct`):
a completed workflow matches when every call result and every final service state is the
same; a workflow that failed (bad data, a rejected approval) or still waits does not match,
and is listed with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from agentq import RunResult, RunStatus

from .dataset import Task
from .direct import Mismatch, TaskRun, compare_runs, format_mismatches
from .jsontypes import JsonObject, JsonValue
from .plan import workflow_id
from .servicehost import ServiceHost


def collect_runs(
    tasks: Sequence[Task], results: Mapping[str, RunResult], host: ServiceHost
) -> dict[str, TaskRun]:
    """Rebuild each task's run from the workflows' step outputs and the host's states.

    Args:
        tasks: The tasks replayed.
        results: The final `RunResult` of each workflow, by workflow id.
        host: The service host the calls were applied through.

    Returns:
        A `TaskRun` per task id; `error` is the workflow's reason unless it completed.
    """
    runs: dict[str, TaskRun] = {}
    for task in tasks:
        result = results[workflow_id(task.id)]
        turns: list[tuple[JsonValue, ...]] = []
        for output in result.outputs:
            values = output.get("results") if isinstance(output, dict) else None
            turns.append(tuple(values) if isinstance(values, list) else ())
        error = None
        if result.status is not RunStatus.COMPLETED:
            error = f"{result.status.value} at {result.step}: {result.reason}"
        runs[task.id] = TaskRun(task.id, tuple(turns), host.final_states(task.id), error)
    return runs


@dataclass(frozen=True)
class Verdict:
    """How the replay compares with the ground truth.

    Attributes:
        total: Tasks replayed.
        matched: Ids of the tasks whose results and final states equal the ground truth.
        unfinished: Reason per task whose workflow did not complete (failed, waiting, ...).
        mismatches: Differences found in completed workflows.
    """

    total: int
    matched: tuple[str, ...]
    unfinished: dict[str, str]
    mismatches: list[Mismatch]

    @property
    def ok(self) -> bool:
        """Whether every task completed and matches."""
        return len(self.matched) == self.total

    def headline(self) -> str:
        """``200/200 tasks match the ground truth`` (and what did not)."""
        line = f"{len(self.matched)}/{self.total} tasks match the ground truth"
        extra = []
        if self.unfinished:
            extra.append(f"{len(self.unfinished)} did not complete")
        if self.mismatches:
            extra.append(f"{len({m.task_id for m in self.mismatches})} differ")
        return f"{line} ({', '.join(extra)})" if extra else line


def check(reference: Mapping[str, TaskRun], runs: Mapping[str, TaskRun]) -> Verdict:
    """Compare the replay's runs with the ground truth's.

    Args:
        reference: The ground truth run directly, by task id (`direct.run_tasks`).
        runs: The replay's runs, by task id (`collect_runs`).
    """
    unfinished = {task_id: run.error for task_id, run in runs.items() if run.error is not None}
    done = [task_id for task_id in runs if task_id not in unfinished]
    mismatches = compare_runs(
        {task_id: reference[task_id] for task_id in done},
        {task_id: runs[task_id] for task_id in done},
    )
    differing = {mismatch.task_id for mismatch in mismatches}
    matched = tuple(task_id for task_id in done if task_id not in differing)
    return Verdict(len(runs), matched, {k: v or "" for k, v in unfinished.items()}, mismatches)


@dataclass
class Summary:
    """Everything the summary shows; `to_json` is written next to the exports.

    Every count is about this run's tasks only (the store may hold other runs' workflows).
    Counts named ``*_now`` are this process's; the others are totals over the stores for
    these tasks (a rerun after a crash adds to what the crashed process did).
    ``calls_applied_elsewhere`` counts the calls other processes applied while this one ran
    (two demos at once on one store), shown only when there are some.

    With ``agent == "pydantic-ai"`` each task is one agent run (one step): ``steps`` counts
    runs, ``turns`` the user turns played inside them, ``lanes`` the lanes the agent's tool
    calls and model requests ran in (read from the log: the agent's ``tool_priority`` and
    ``model_priority``), ``approved_turns`` the turns with an approved call, and
    ``call_retries_now`` the tools' own retries of transient service errors.

    Duplicates, kept apart by who prevented them:

    - ``calls_answered_from_log_now``: durable calls this process asked for whose key agentq's
      log holds as completed (a step running again after a crash, a retry or a resume):
      answered from the log, never sent to the service host (``engine.answered_from_log``
      less the approval waits answered);
    - ``duplicates_refused_now`` (``refused_keys_now``): calls that reached the service host
      again and were refused there because it had applied their key. Only a call in doubt
      can: one that started and never finished because the process died while it ran;
    - ``calls_rerun_now`` (``rerun_keys_now``): the calls in doubt this process sent again
      (``CallStarted`` with ``rerun: true`` in this run's events), refused by the host when
      it had applied them before the crash, applied now when it had not.
    """

    tasks: int = 0
    selection: str = ""
    tasks_by_category: dict[str, int] = field(default_factory=dict)
    matched_by_category: dict[str, int] = field(default_factory=dict)
    long_context_tasks: int = 0
    held_back_functions: int = 0
    completed: int = 0
    failed: int = 0
    waiting: int = 0
    steps: int = 0
    steps_completed: int = 0
    step_retries: int = 0
    calls: int = 0
    calls_by_kind: dict[str, int] = field(default_factory=dict)
    calls_recorded: int = 0
    calls_applied_now: int = 0
    calls_applied_before: int = 0
    calls_applied_elsewhere: int = 0
    call_retries_now: int = 0
    retry_causes_now: dict[str, int] = field(default_factory=dict)
    approvals: int = 0
    approvals_now: int = 0
    approved_calls: int = 0
    approved_turns: int = 0
    rejections: int = 0
    rejections_now: int = 0
    approval_policy: str = ""
    duplicates_refused_now: int = 0
    refused_keys_now: list[str] = field(default_factory=list)
    calls_answered_from_log_now: int = 0
    calls_rerun_now: int = 0
    rerun_keys_now: list[str] = field(default_factory=list)
    leases_recovered_now: int = 0
    workflows_resumed_now: int = 0
    held_by_dead_worker_now: int = 0
    wall_seconds: float = 0.0
    store: str = ""
    services: str = ""
    events: int = 0
    events_path: str = ""
    events_note: str = ""
    dashboard_path: str = ""
    crash: str = ""
    matched: int = 0
    match_line: str = ""
    unfinished: dict[str, str] = field(default_factory=dict)
    mismatch_report: str = ""
    agent: str = "agentq"
    lanes: dict[str, dict[str, int]] = field(default_factory=dict)
    turns: int = 0

    @property
    def ok(self) -> bool:
        """Whether every task completed and matches the ground truth."""
        return self.matched == self.tasks and not self.unfinished and not self.mismatch_report

    @property
    def duplicates_prevented_now(self) -> int:
        """Repeated calls that were not applied again (answered from the log + host refusals)."""
        return self.calls_answered_from_log_now + self.duplicates_refused_now

    @property
    def calls_per_second(self) -> float:
        """Calls applied by this run per second of wall time."""
        return self.calls_applied_now / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def to_json(self) -> JsonObject:
        """The summary as one JSON object (with the derived counts)."""
        data: JsonObject = dict(asdict(self))
        data["ok"] = self.ok
        data["duplicates_prevented_now"] = self.duplicates_prevented_now
        data["calls_per_second"] = round(self.calls_per_second, 1)
        return data


def set_verdict(summary: Summary, verdict: Verdict, tasks: Sequence[Task] = ()) -> None:
    """Copy a verdict into the summary (and the matches per category of `tasks`)."""
    matched = set(verdict.matched)
    by_category: dict[str, int] = dict.fromkeys(summary.tasks_by_category, 0)
    for task in tasks:
        by_category[task.category] = by_category.get(task.category, 0) + (task.id in matched)
    summary.matched_by_category = by_category
    summary.matched = len(verdict.matched)
    summary.match_line = verdict.headline()
    summary.unfinished = dict(verdict.unfinished)
    summary.mismatch_report = format_mismatches(verdict.mismatches) if verdict.mismatches else ""


def format_summary(s: Summary) -> str:
    """Render the summary for a person: one line per subject, the verdict last."""
    kinds = s.calls_by_kind
    causes = ", ".join(f"{n} {name}" for name, n in sorted(s.retry_causes_now.items()))
    categories = " · ".join(
        f"{name} {s.matched_by_category.get(name, 0)}/{count}"
        for name, count in s.tasks_by_category.items()
    )
    lines = [
        f"BFCL multi-turn replay through agentq: {s.tasks} tasks"
        + (f" ({s.selection})" if s.selection else ""),
        f"  categories   {categories or 'none'} match",
        f"  tasks        {s.completed} completed · {s.failed} failed · {s.waiting} waiting",
    ]
    notes = []
    if s.long_context_tasks:
        notes.append(f"{s.long_context_tasks} tasks on long-context services")
    if s.held_back_functions:
        notes.append(
            f"{s.held_back_functions} functions held back from the model until a later turn "
            "(callable throughout, as in BFCL's executor)"
        )
    if notes:
        lines.append("               " + " · ".join(notes))
    calls = (
        f"{s.calls}: {kinds.get('read', 0)} read (LOW lane), "
        f"{kinds.get('write', 0)} write + {kinds.get('approval', 0)} approval (HIGH lane)"
    )
    steps = f"{s.steps_completed}/{s.steps} turns completed"
    retried_by = "by the jobs' policy"
    if s.agent != "agentq":
        lanes = " · ".join(
            f"{group} in {', '.join(f'{lane} {n}' for lane, n in by_lane.items()) or 'none'}"
            for group, by_lane in s.lanes.items()
        )
        calls = (
            f"{s.calls}: {kinds.get('read', 0)} read, {kinds.get('write', 0)} write + "
            f"{kinds.get('approval', 0)} approval · lanes in the log: {lanes}"
        )
        steps = f"{s.steps_completed}/{s.steps} agent runs completed ({s.turns} turns in them)"
        retried_by = "inside the agent's tools"
    lines += [
        f"  steps        {steps} · {s.step_retries} step retries",
        f"  tool calls   {calls}",
        f"               {s.calls_recorded} durable calls completed in agentq's log · "
        f"{s.calls_applied_now} applied by this run · {s.calls_applied_before} applied before it"
        + (
            f" · {s.calls_applied_elsewhere} by other runs meanwhile"
            if s.calls_applied_elsewhere
            else ""
        ),
        f"  retries      {s.call_retries_now} call retries {retried_by}"
        + (f" ({causes})" if causes else ""),
        f"  approvals    {s.approvals} calls approved ({s.approved_turns} turns) · "
        f"{s.approvals_now} by this run"
        + (f" · {s.rejections} rejected ({s.rejections_now} by this run)" if s.rejections else ""),
        f"               policy {s.approval_policy}",
        f"  duplicates   {s.duplicates_prevented_now} prevented: "
        f"{s.calls_answered_from_log_now} answered from agentq's log (never sent again) · "
        f"{s.duplicates_refused_now} refused by the service host (already applied)",
        f"  in doubt     {s.calls_rerun_now} sent again (calls started before a crash and never "
        "recorded: CallStarted rerun)",
        f"  recovery     {s.leases_recovered_now} leases re-admitted · "
        f"{s.workflows_resumed_now} workflows resumed by recovery · "
        f"{s.held_by_dead_worker_now} taken over after their lease expired",
        f"  time         {s.wall_seconds:.2f} s wall · {s.calls_per_second:,.0f} calls/s",
        f"  stores       {s.store} ({s.events:,} events of these tasks) · services {s.services}",
        f"  exports      {s.events_path}"
        + (f" ({s.events_note})" if s.events_note else "")
        + f" · {s.dashboard_path}",
    ]
    if s.crash:
        lines.append(f"  crash        {s.crash}")
    for task_id, reason in s.unfinished.items():
        lines.append(f"  ✘ {task_id}: {reason}")
    if s.mismatch_report:
        lines.append(s.mismatch_report)
    lines.append(("✔ " if s.ok else "✘ ") + s.match_line)
    return "\n".join(lines)
