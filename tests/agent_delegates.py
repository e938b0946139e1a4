"""An agent that delegates to a sub-agent, for the conversation views' tests.

`build` returns ``(boss, helper)``: one response of the boss asks for ``delegate(task="A")``
(``d1``), ``delegate(task="B approve")`` (``d2``) and ``plain()`` (``p1``), the next answers
``final``. ``delegate`` runs the `DurableAgent` helper as a child run (``<run>/tool:0.0:d1``,
``<run>/tool:0.1:d2``); the helper asks for its ``danger`` tool, which needs approval, when its
task says "approve", so ``d2``'s child waits for an approval and the boss's call with it.
"""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq.integrations.pydantic_ai import DurableAgent
from agentq.workflows import WorkflowEngine


def _helper_respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    first = messages[0]
    asks = isinstance(first, ModelRequest) and "approve" in str(first.parts[-1].content)
    if asks and not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[ToolCallPart("danger", {}, tool_call_id="h1")])
    return ModelResponse(parts=[TextPart("helper done")])


def _boss_respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[
            ToolCallPart("delegate", {"task": "A"}, tool_call_id="d1"),
            ToolCallPart("delegate", {"task": "B approve"}, tool_call_id="d2"),
            ToolCallPart("plain", {}, tool_call_id="p1"),
        ])
    return ModelResponse(parts=[TextPart("final")])


def build(engine: WorkflowEngine) -> tuple[DurableAgent[None], DurableAgent[None]]:
    """The boss and the helper, both durable on `engine` (see the module docstring)."""
    helper_agent = Agent(FunctionModel(_helper_respond), name="helper")

    @helper_agent.tool_plain(requires_approval=True)
    def danger() -> str:
        return "danger done"

    helper = DurableAgent(helper_agent, engine)
    boss_agent = Agent(FunctionModel(_boss_respond), name="boss")

    @boss_agent.tool_plain
    async def delegate(task: str) -> str:
        return str((await helper.run(task)).output)

    @boss_agent.tool_plain
    def plain() -> str:
        return "plain"

    return DurableAgent(boss_agent, engine), helper
