"""pydantic-ai agents on agentq (extra ``pydantic-ai``): `DurableAgent`.

    durable = DurableAgent(agent, engine)
    run = await durable.run("Refund order 42", run_id="ticket-42")
    later = await durable.run("And order 43?", run_id="ticket-42/2", continue_from="ticket-42")

In reading order (each module imports only the ones below it):

================  =============================================================================
``_agent``        `DurableAgent`: runs, starts, approvals, messages
``_many``         `run_many`: many prompts as one run group (``engine.group``)
``_streams``      `Streams`, the streaming verbs (``run_stream``, ``run_stream_events``,
                  ``iter``, ``partial``); `DurableStream`, a run as its listener sees it
``_turns``        the stored input of a turn: prompt, history (or ``continue_from``), options
``_report``       a run's `RunResult` as its `AgentRun` (typed output, `RunUsage`, messages)
``_decisions``    `Decisions`, the base class of `DurableAgent` with its approval verbs:
                  pending approvals, approve, deny
``_fork``         a fork of a run at a model request or a tool call: the fork point found among
                  the recorded keys, replaced values converted to the recorded JSON
``_step``         `AgentStep`: the body of a run's one step (the agent run with the capability,
                  the run's options and deps), what is given per run; a completed run
                  replayed; `current_run_id`
``_results``      `AgentRun`, `PendingApproval`: what a run reports; which wait an answer is for
``tree``          the run as a tree (workflow → model requests → tool calls), pure HTML; what
                  an `AgentRun` shows in a notebook
``_runs``         how a run becomes a workflow of the engine (one step, ``agent``); the
                  identity of a run's input (timestamps and run ids left out)
``_options``      pydantic-ai's per-run options: which are stored, how an attempt (or a
                  rebuild) gets them; the output type's validator
``_inputs``       a caller's prompt, ``message_history`` and ``override_args``, checked
                  before storing; the input's size
``_replay``       `LogReader`: a completed run's messages rebuilt read-only from its log
                  (a stand-in for a typed run's output tools); `MessagesUnavailableError`
``_capability``   `AgentqDurability`: pydantic-ai's durability capability whose operation
                  backend makes each model request and tool call a durable call, and whose
                  approvals and external events are durable waits
``_units``        each durable call of a run: its place among the response's parts, its
                  arguments' digest, the guarded run context its body gets (made cheaper)
``_waits``        `EventWaiter`: ``RequestInput`` / ``wait_for_external_event`` as durable
                  waits (``event:<name>:<n>``)
``_parent``       `ParentCall`: the durable call a sub-agent run made in it hangs on (a
                  child run's id derived from it); `ChildCancelledWithParent`
``_live``         `LiveRuns`: the listeners of the runs streaming in this process; each
                  attempt's `Sink` (live model deltas inside the call, the rest outside)
``_approval``     the resume input of an approval, checked, as pydantic-ai's decision; the
                  durable wait for it; a request's tool returns in the order of their calls
``_journal``      one attempt of a run: keys by a call's place (old logs' keys still
                  replay), labels, and the check against the log (`ReplayDivergenceError`)
================  =============================================================================

See docs/agents.md.
"""

from agentq.extras import require

require("pydantic_ai", "pydantic-ai")

from agentq.integrations.pydantic_ai._agent import (  # noqa: E402
    AgentRun,
    DurableAgent,
    PendingApproval,
)
from agentq.integrations.pydantic_ai._approval import approval_input  # noqa: E402
from agentq.integrations.pydantic_ai._capability import AgentqDurability  # noqa: E402
from agentq.integrations.pydantic_ai._journal import ReplayDivergenceError  # noqa: E402
from agentq.integrations.pydantic_ai._options import RunOptionsKwargs  # noqa: E402
from agentq.integrations.pydantic_ai._parent import ChildCancelledWithParent  # noqa: E402
from agentq.integrations.pydantic_ai._replay import MessagesUnavailableError  # noqa: E402
from agentq.integrations.pydantic_ai._step import current_run_id  # noqa: E402
from agentq.integrations.pydantic_ai._streams import (  # noqa: E402
    DurableRunResultEvent,
    DurableStream,
)

__all__ = [
    "AgentRun",
    "AgentqDurability",
    "ChildCancelledWithParent",
    "DurableAgent",
    "DurableRunResultEvent",
    "DurableStream",
    "MessagesUnavailableError",
    "PendingApproval",
    "ReplayDivergenceError",
    "RunOptionsKwargs",
    "approval_input",
    "current_run_id",
]
