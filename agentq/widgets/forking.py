"""`ForkEditor`: "Fork from here" of the conversation view (`agentq.widgets.runview`).

One editor per view, opened under the model request or tool result it forks from: the
recorded value to edit (a tool's result as JSON, a model response's text), the run options
from there on (instructions, model name), the fork's run id, and Fork / Cancel. Fork calls
``agent.fork(run_id, new_run_id, at=key, replace=..., **options)`` (`ForkingAgent`, in
practice a `DurableAgent`) as a task on the kernel's loop and hands the fork's id to the view,
which shows it (with its lineage).

What is replaced: an unchanged value replaces nothing (the fork asks again from `at`); an
edited tool result is parsed as JSON (text that is not JSON is refused in the editor, nothing
is sent); an edited model text becomes the recorded response with its text parts replaced by
the new text (its tool calls kept), made a pydantic-ai ``ModelResponse`` (imported only then:
an agent that forks is a pydantic-ai agent).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agentq.errors import AgentqError
from agentq.markup import MUTED, esc, esc_text
from agentq.widgets.live.refresher import Spawner, set_value, widgets

__all__ = ["ForkBlock", "ForkEditor", "ForkingAgent", "Target", "edited_response"]


class ForkingAgent(Protocol):
    """What the conversation view needs of an agent to fork its runs (a `DurableAgent`)."""

    async def fork(self, run_id: str, new_run_id: str, *, at: str,
                   replace: Mapping[str, Any] | None = None, **options: Any) -> Any:
        """Fork `run_id` into `new_run_id` from the call `at` (docs/agents.md, "Forks")."""
        ...


Target = tuple[str, str, str, Any]
"""What a fork starts from: ``(run_id, kind, key, recorded)``: kind ``model`` (recorded: the
response as JSON) or ``tool`` (recorded: the tool's result)."""


def edited_response(recorded: Mapping[str, Any], text: str) -> Any:
    """Return the recorded model response (JSON) with its text parts replaced by `text`, as a
    pydantic-ai ``ModelResponse`` (its other parts kept, the text first).

    Raises:
        ValueError: `recorded` is not a recorded model response.
    """
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    parts = recorded.get("parts")
    if not isinstance(parts, list):
        raise ValueError("the recorded model response has no parts")
    kept = [p for p in parts if not (isinstance(p, dict) and p.get("part_kind") == "text")]
    data = {**recorded, "parts": [{"part_kind": "text", "content": text}, *kept]}
    return ModelMessagesTypeAdapter.validate_python([data])[0]


class ForkBlock:
    """The widgets of one model request or tool card of the conversation view: its HTML and
    its Fork from here button (hidden, its place kept, when there is nothing to fork from).

    Args:
        w: The ipywidgets module.
        on_fork: Called with the block when its button is clicked.
    """

    def __init__(self, w: Any, on_fork: Any) -> None:
        self.html = w.HTML("", layout=w.Layout(flex="1 1 auto", min_width="0"))
        self.button = w.Button(description="Fork from here", icon="code-fork",
                               tooltip="fork the run from this point, with an edit",
                               layout=w.Layout(width="auto", flex="0 0 auto"))
        self.button.add_class("agentq-fork-here")
        self.target: Target | None = None
        self.button.on_click(lambda _b: on_fork(self))
        self.box = w.HBox([self.html, self.button],
                          layout=w.Layout(align_items="flex-start", width="100%"))

    def draw(self, html: str, target: Target | None) -> bool:
        """Show `html`, and the button when `target` is not None; return whether it changed."""
        self.target = target
        shown = "visible" if target is not None else "hidden"
        changed = self.button.layout.visibility != shown
        self.button.layout.visibility = shown
        return set_value(self.html, html) or changed


class ForkEditor:
    """The "Fork from here" form (see the module docstring).

    Args:
        on_forked: Called with the fork's run id once `agent.fork` returned.
        on_bug: Called with an unexpected exception (the view's refresher reports it).

    Attributes:
        box: The form (hidden until `open`).
        value: The recorded value to edit.
        instructions, model: Run options from the fork point on ('' = unchanged).
        new_id: The fork's run id.
        fork, cancel: The buttons.
        status: What the last Fork did.
        target: What the open form forks from, else None.
        agent: The `ForkingAgent`, or None (Fork then says an agent is needed).
    """

    def __init__(self, on_forked: Callable[[str], None],
                 on_bug: Callable[[BaseException], None]) -> None:
        w = widgets()
        self.on_forked, self.on_bug = on_forked, on_bug
        self.agent: ForkingAgent | None = None
        self.target: Target | None = None
        self.title = w.HTML("")
        self.value = w.Textarea(layout=w.Layout(width="100%", height="96px"))
        self.value.add_class("agentq-fork-value")
        wide = w.Layout(width="100%")
        self.instructions = w.Text(placeholder="instructions from here (unchanged if empty)",
                                   layout=wide)
        self.model = w.Text(placeholder="model from here, e.g. openai:gpt-4o (unchanged if "
                            "empty)", layout=wide)
        self.new_id = w.Text(description="fork id", layout=w.Layout(width="360px"),
                             style={"description_width": "initial"})
        self.fork = w.Button(description="Fork", button_style="primary", icon="code-fork")
        self.fork.add_class("agentq-fork-submit")
        self.cancel = w.Button(description="Cancel")
        self.status = w.HTML("")
        self.fork.on_click(lambda _b: self.submit())
        self.cancel.on_click(lambda _b: self.close())
        self.box = w.VBox([self.title, self.value, self.instructions, self.model,
                           w.HBox([self.new_id, self.fork, self.cancel]), self.status],
                          layout=w.Layout(border="1px solid #93c5fd", padding="4px 8px",
                                          margin="2px 0 6px 24px", display="none"))
        self.box.add_class("agentq-fork")
        self._shown = ""
        self.spawner = Spawner()
        self.busy = False

    def open(self, target: Target, new_id: str) -> None:
        """Show the form for `target`, prefilled with its recorded value."""
        run_id, kind, key, recorded = target
        self.target = target
        if kind == "model":
            text = ""
            for part in recorded.get("parts", []) if isinstance(recorded, dict) else []:
                if isinstance(part, dict) and part.get("part_kind") == "text":
                    text += str(part.get("content", ""))
            what = "the model's text"
        else:
            text = json.dumps(recorded, indent=1, ensure_ascii=False)
            what = "the tool's result (JSON)"
        self._shown = text
        self.value.value = text
        self.new_id.value = new_id
        self.instructions.value = self.model.value = ""
        self.status.value = ""
        self.title.value = (f'<div data-agentq="fork-form" data-run="{esc(run_id)}" '
                            f'data-at="{esc(key)}" style="font-size:12px;white-space:nowrap">'
                            f"<b>Fork {esc_text(run_id)} from here</b> "
                            f'<span style="{MUTED}">edit {what}, or the run options, then Fork'
                            "</span></div>")
        self.box.layout.display = None

    def close(self) -> None:
        """Hide the form."""
        self.target = None
        self.box.layout.display = "none"

    def request(self) -> tuple[str, str, str, dict[str, Any] | None, dict[str, Any]]:
        """Return ``(run_id, new_run_id, at, replace, options)`` of the form.

        Raises:
            ValueError: No target, no fork id, or an edited tool result that is not JSON.
        """
        if self.target is None:
            raise ValueError("nothing to fork from: click Fork from here first")
        run_id, kind, key, recorded = self.target
        new_id = self.new_id.value.strip()
        if not new_id:
            raise ValueError("give the fork a run id")
        replace: dict[str, Any] | None = None
        if self.value.value.strip() != self._shown.strip():
            if kind == "model":
                replace = {key: edited_response(recorded, self.value.value)}
            else:
                try:
                    replace = {key: json.loads(self.value.value)}
                except json.JSONDecodeError as exc:
                    raise ValueError(f"the edited result is not JSON: {exc}") from None
        options = {name: field.value.strip() for name, field in
                   (("instructions", self.instructions), ("model", self.model))
                   if field.value.strip()}
        return run_id, new_id, key, replace, options

    def submit(self) -> None:
        """What Fork does: check the form, then run ``agent.fork`` as a task."""
        if self.busy:
            return
        if self.agent is None:
            self._say("error", "forking needs the agent: RunView(engine, run_id, agent=durable)")
            return
        try:
            run_id, new_id, at, replace, options = self.request()
        except ValueError as exc:
            self._say("error", str(exc))
            return
        self.busy = True
        self.fork.disabled = True
        self._say("running", f"forking {run_id} into {new_id} at {at}…")
        agent = self.agent
        self.spawner.spawn(lambda: self._run(agent, run_id, new_id, at, replace, options),
                           f"agentq.fork:{new_id}")

    async def _run(self, agent: ForkingAgent, run_id: str, new_id: str, at: str,
                   replace: dict[str, Any] | None, options: dict[str, Any]) -> None:
        try:
            await agent.fork(run_id, new_id, at=at, replace=replace, **options)
        except Exception as exc:  # a refusal or the fork's failure: shown, not raised
            self._say("error", f"{type(exc).__name__}: {exc}")
            if not isinstance(exc, ValueError | TypeError | LookupError | AgentqError):
                self.on_bug(exc)
            return
        finally:
            self.busy = False
            self.fork.disabled = False
        self._say("completed", f"forked into {new_id}")
        self.close()
        self.on_forked(new_id)

    def _say(self, outcome: str, text: str) -> None:
        self.status.value = (f'<div data-agentq="fork-outcome" data-outcome="{esc(outcome)}" '
                             f'style="font-size:12px">{esc_text(text)}</div>')
