"""The spans of workflows (see `agentq.tracing`): a run, a step attempt, a durable call.

A run's span (`agentq.tracing.WORKFLOW_RUN`) is the parent of its step attempts' spans; each
attempt's job (`agentq.tracing.JOB`, started by the queue) is the attempt span's child, and the
durable calls the body makes are children of that job. The run that starts a workflow stores
its trace context with ``WorkflowStarted``; a later run of the same workflow (a resume, a
retry, a recovery, in this process or another) links to it, and so does the attempt of a
resumed step. With tracing off every function here is a no-op that reads nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import agentq.tracing as tracing
from agentq.store import DurableStore, Execution
from agentq.workflows.model import RunResult, RunStatus, Workflow

__all__ = ["attempt_span", "note_attempt", "note_run", "origin_links", "run_span"]


def run_span(wf: Workflow, worker_id: str) -> Any:
    """Start the span of one run of `wf` (a context manager giving a `tracing.Span`)."""
    return tracing.span(
        tracing.WORKFLOW_RUN,
        {"agentq.workflow.id": wf.id, "agentq.workflow.steps": len(wf.steps),
         "agentq.worker.id": worker_id},
    )


async def origin_links(span: tracing.Span, store: DurableStore, workflow_id: str) -> list[Any]:
    """Link `span` to the run that started the workflow (its stored trace context).

    Reads the workflow's first event only when `span` records.

    Returns:
        The links added (also for the attempt spans of resumed steps); [] when none.
    """
    if not span.recording:
        return []
    first = await store.load_events(workflow_id, limit=1)
    links = tracing.links_to(first[0].data.get("trace") if first else None, "workflow started")
    span.link(links)
    return links


def note_run(span: tracing.Span, result: RunResult) -> None:
    """Record how the run ended; a failed workflow sets the status ERROR (its reason)."""
    span.set("agentq.workflow.status", result.status.value)
    if result.step is not None:
        span.set("agentq.step.name", result.step)
    if result.status is RunStatus.FAILED:
        span.fail(result.reason or "failed")


def attempt_span(execution: Execution, resumed: bool, links: Sequence[Any]) -> Any:
    """Start the span of one step attempt; a resumed step's links back to the origin."""
    return tracing.span(
        tracing.STEP_ATTEMPT,
        {
            "agentq.workflow.id": execution.workflow_id,
            "agentq.step.name": execution.step_name,
            "agentq.step.index": execution.step_index,
            "agentq.step.attempt": execution.attempt,
            "agentq.step.resumed": resumed,
            "agentq.lease.token": execution.lease_token,
            "agentq.worker.id": execution.worker_id,
        },
        links=links if resumed else (),
    )


_OUTCOMES = {"Completed": "completed", "Retry": "retry", "Again": "lease_lost"}


def note_attempt(span: tracing.Span, result: object) -> None:
    """Record an attempt's outcome (``agentq.step.outcome``): completed, waiting, retry (the
    attempt failed, another is scheduled: ERROR), failed (ERROR), cancelled, lease_lost."""
    if not span.recording:
        return
    if isinstance(result, RunResult):
        outcome = result.status.value
        if result.status is RunStatus.FAILED:
            span.fail(result.reason or "failed")
    else:
        outcome = _OUTCOMES.get(type(result).__name__, type(result).__name__)
        if outcome == "retry":
            span.fail("the attempt failed; another is scheduled")
    span.set("agentq.step.outcome", outcome)
