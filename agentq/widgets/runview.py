"""`RunView`: an agent run as the conversation it was, live, with approvals and forks inline.

From the top: the final answer (or where the run is), the run's requests, tokens, cost and
time, the lineage of a fork, the prompt; then each model request (model, tokens, cost,
latency, its text, or the text streamed so far) with the tool calls its response asked for as
cards under it (arguments, result, approvals, child runs nested, errors where they happened).
Keys, fingerprints, lanes and lease tokens show only with the **details** toggle.

- **Approvals inline**: a tool call that waits for approval has Approve / Edit / Deny under its
  card. They are the approval panel's own slots (`ApprovalPanel` with ``workflow=`` the run
  and ``edit=True``: the same resume, editor and outcome code), placed where the call is.
- **Fork from here** on every model request and tool result opens the `ForkEditor` under it
  (edit the value or the run options), and Fork runs ``agent.fork`` and shows the fork here,
  with its lineage; **parent** goes back. Needs ``agent=`` (a `DurableAgent`).
- **Compare with parent** (on a fork) and `compare` put two runs side by side
  (`agentq.widgets.html.conversation.compare_html`).
- **Streaming**: with an ``agent`` that has ``partial(run_id) -> {call key: text}`` (a
  `DurableAgent` streaming in this process), a request that runs shows its text so far; the
  refresher redraws it when it grew (no store read).
- **event history**: the run's events as a paged table (`EventHistory`).

The widgets import no integration: the run is read from the store
(`agentq.widgets.models.runs.load_conversation`) and the agent is typed by small protocols
(`ForkingAgent`, `StreamingAgent`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from agentq.clock import Clock
from agentq.errors import UnknownWorkflowError
from agentq.markup import MUTED, esc_text
from agentq.widgets.approvals import ApprovalPanel
from agentq.widgets.forking import ForkBlock, ForkEditor, Target
from agentq.widgets.history import EventHistory
from agentq.widgets.html.conversation import compare_html, head_html, tool_html, turn_html
from agentq.widgets.live.refresher import (
    DEFAULT_INTERVAL,
    Live,
    Spawner,
    close_tree,
    set_value,
    widgets,
)
from agentq.widgets.models.conversation import Conversation, ToolCard, Turn
from agentq.widgets.models.prices import Price, price_table
from agentq.widgets.models.runs import Comparison, compare_conversations, load_conversation
from agentq.widgets.models.source import Source

__all__ = ["RunView", "StreamingAgent"]

MAX_BLOCKS = 400
"""Model requests and tool cards drawn with their own widgets at most (the rest as one HTML)."""


class StreamingAgent(Protocol):
    """An agent that says what its requests running in this process streamed so far."""

    def partial(self, run_id: str) -> Mapping[str, str]:
        """Call key (``"model:3"``) -> the text streamed so far, for `run_id`'s requests."""
        ...


class RunView(Live):
    """One agent run as a conversation, live (see the module docstring).

    Args:
        engine: The `WorkflowEngine` (its store is read; approvals resume through it).
        run_id: The run to show (a `DurableAgent` run id); None shows nothing until `show`.
        agent: The `DurableAgent` of the run (any object with ``fork`` and, for streaming,
            ``partial``); without it Fork from here says the agent is needed.
        prices: The price table: ``{model_name: Price(input_per_million,
            output_per_million)}`` or ``{model_name: (in, out)}`` per million tokens (see
            `agentq.widgets.models.prices`); models not in it have no cost.
        interval: Seconds between refreshes.
        clock: Time source; default the engine's clock.
        source: The `Source` to share with other views of the store (the `Dashboard`'s).
        events: Events per page of the event history.

    Raises:
        MissingExtraError: ipywidgets is not installed.
        TypeError, ValueError: A bad `prices` (the message names the model) or `interval`.

    Example:
        >>> view = RunView(engine, "ticket-42", agent=durable,
        ...                prices={"openai:gpt-4o": (2.5, 10.0)}).start()
    """

    takes_clicks = True

    def __init__(
        self,
        engine: Any,
        run_id: str | None,
        *,
        agent: Any = None,
        prices: Mapping[str, Price | tuple[float, float]] | None = None,
        interval: float = DEFAULT_INTERVAL,
        clock: Clock | None = None,
        source: Source | None = None,
        events: int = 20,
    ) -> None:
        clock = clock or engine.clock
        super().__init__(interval=interval, clock=clock)
        w = widgets()
        self.engine, self.agent = engine, agent
        self.prices = price_table(prices)
        self.source = source or Source(engine.store)
        self.run_id: str | None = None
        self.conversation: Conversation | None = None
        """The conversation drawn (None before the first read or without a run)."""
        self.comparison: Comparison | None = None
        self.panel = ApprovalPanel(engine, slots=3, source=self.source, workflow=None,
                                   edit=True, interval=interval, clock=clock)
        """The approvals of this run (its slots are drawn under their tool cards)."""
        for slot in self.panel.slots:
            slot.label.layout.display = "none"  # the card above says what is asked
            slot.box.layout.margin = "0 0 6px 24px"  # under the card, as indented
            slot.box.remove_class("agentq-approval")  # the panel's slots keep that class
            slot.box.add_class("agentq-inline-approval")
        self.forks = ForkEditor(self._forked, lambda exc: self._fail(exc, "fork failed"))
        self.forks.agent = agent
        self.history = EventHistory(engine.store, limit=events)
        self.head = w.HTML("")
        self.details = w.ToggleButton(description="details", icon="key",
                                      tooltip="keys, leases, fingerprints",
                                      layout=w.Layout(width="auto"))
        self.details.observe(lambda _c: self.redraw(), "value")
        self.parent = w.Button(description="parent", icon="arrow-up",
                               layout=w.Layout(width="auto", display="none"))
        self.parent.on_click(lambda _b: self._go_parent())
        self.compare_parent = w.Button(description="Compare with parent", icon="columns",
                                       layout=w.Layout(width="auto", display="none"))
        self.compare_parent.on_click(lambda _b: self._compare_parent())
        self.compared = w.HTML("")
        """HTML: the comparison drawn (`compare`)."""
        self.body = w.VBox([], layout=w.Layout(width="100%"))
        self.rest = w.HTML("")
        toolbar = w.HBox([self.details, self.history.toggle, self.parent, self.compare_parent],
                         layout=w.Layout(flex_flow="row wrap"))
        self.widget = w.VBox([self._banner, toolbar, self.body, self.rest, self.panel.log,
                              self.compared, self.history.box],
                             layout=w.Layout(width="100%", min_width="0"))
        self.widget.add_class("agentq-runview")
        self._blocks: dict[str, ForkBlock] = {}
        self._partial: Mapping[str, str] = {}
        self._stale = True
        self.spawner = Spawner()
        self.show(run_id)

    # -- what is shown ---------------------------------------------------------------------

    def show(self, run_id: str | None) -> None:
        """Show `run_id` (read at the next refresh); None shows nothing."""
        if run_id == self.run_id:
            return
        self.run_id = run_id
        self.panel.workflow = run_id if run_id is not None else "\0"  # none: no waits
        self.conversation, self._partial, self._stale = None, {}, True
        self.forks.close()
        self.history.show(run_id)
        self.compared.value = ""
        self.widget.layout.display = None if run_id is not None else "none"

    def set_prices(self, prices: Mapping[str, Price | tuple[float, float]] | None) -> None:
        """Replace the price table (see the class docstring); redrawn at the next refresh.

        Raises:
            TypeError, ValueError: As `price_table`.
        """
        self.prices = price_table(prices)
        self._stale = True

    async def refresh(self) -> bool:
        """Read what changed and redraw the conversation when it concerns the run."""
        self.spawner.bind()
        return await self.update(await self.source.poll())

    async def update(self, rows: list[tuple[Any, ...]] | None) -> bool:
        """Update from the event rows a poll of the shared `source` returned (None: nothing
        new); the `Dashboard` calls this with its own poll's rows."""
        run = self.run_id
        if run is None:
            return False
        mine = rows is not None and any(r[2] == run or str(r[2]).startswith(f"{run}/")
                                        for r in rows)
        changed = False
        if self._stale or mine:
            self._stale = False
            try:
                self.conversation = await load_conversation(
                    self.engine.store, run, prices=self.prices, partial=self._read_partial())
            except UnknownWorkflowError:  # not (or no longer) stored: say so, keep running
                self.conversation = None
                self.body.children = [self.head]
                return set_value(self.head, f'<div data-agentq="run-missing" style="{MUTED}">'
                                 f"run {esc_text(run)} is not in the store</div>")
            steps = self.source.want_steps()
            await steps.ensure(self.engine.store, [run, *_children(self.conversation)])
            await self.history.follow()
            changed = True
        if changed or rows is not None:
            changed = self.panel.sync() | changed
        partial = self._read_partial()
        if partial != self._partial:
            self._partial = partial
            changed = True
        if changed:
            self.redraw()
        return changed

    def _read_partial(self) -> Mapping[str, str]:
        reader = getattr(self.agent, "partial", None)
        if reader is None or self.run_id is None:
            return {}
        got = reader(self.run_id)
        return dict(got) if isinstance(got, Mapping) else {}

    # -- drawing ---------------------------------------------------------------------------

    def redraw(self) -> bool:
        """Draw the conversation read last (no I/O); return whether anything changed."""
        conv = self.conversation
        if conv is None:
            reading = esc_text(self.run_id or "")
            return set_value(self.head, f'<div style="{MUTED}">reading {reading}…</div>')
        details = bool(self.details.value)
        changed = set_value(self.head, head_html(conv, details=details))
        slots = {(s.key[0], s.wait_key): s for s in self.panel.slots if s.key is not None}
        children: list[Any] = [self.head]
        placed: set[int] = set()
        used = 0
        for turn in conv.turns:
            turn = self._streamed(turn)
            if used < MAX_BLOCKS:
                block = self._block(f"{turn.key}")
                target = ((conv.run_id, "model", turn.key, turn.response)
                          if turn.state == "completed" else None)
                changed = block.draw(turn_html(turn, details=details), target) | changed
                children += self._with_form(block)
                used += 1
            for card in turn.tools:
                if used >= MAX_BLOCKS:
                    break
                block = self._block(f"{turn.key}/{card.tool_call_id}")
                html = tool_html(card, details=details)
                changed = block.draw(html, _target(conv, card)) | changed
                children += self._with_form(block)
                used += 1
                ask = card.waiting
                slot = slots.get((conv.run_id, ask.key)) if ask is not None else None
                if slot is not None:
                    children.append(slot.box)
                    placed.add(id(slot))
        for slot in slots.values():  # a child run's approvals: under the head
            if id(slot) not in placed:
                children.insert(1, slot.box)
        hidden = sum(1 + len(t.tools) for t in conv.turns) - used
        rest = (f'<div style="{MUTED}">… {hidden} more requests and tool calls: see the '
                "event history</div>" if hidden > 0 else "")
        changed = set_value(self.rest, rest) | changed
        if list(self.body.children) != children:
            self.body.children = children
            changed = True
        forked = conv.forked_from is not None
        display = None if forked else "none"
        for button in (self.parent, self.compare_parent):
            if button.layout.display != display:
                button.layout.display = display
        return changed

    def _streamed(self, turn: Turn) -> Turn:
        if turn.state != "started":
            return turn
        return dataclasses.replace(turn, partial=self._partial.get(turn.key, turn.partial))

    def _block(self, key: str) -> ForkBlock:
        block = self._blocks.get(key)
        if block is None:
            block = self._blocks[key] = ForkBlock(widgets(), self._open_fork)
        return block

    def _with_form(self, block: ForkBlock) -> list[Any]:
        form = self.forks
        here = (form.target is not None and block.target is not None
                and form.target[:3] == block.target[:3])
        return [block.box, form.box] if here else [block.box]

    # -- forks and comparisons -------------------------------------------------------------

    def _open_fork(self, block: ForkBlock) -> None:
        if block.target is None or self.conversation is None:
            return
        self.forks.open(block.target, _fork_id(self.conversation.run_id, self.source))
        self.redraw()

    def _forked(self, new_id: str) -> None:
        self.show(new_id)
        self.spawner.spawn(self.refresh_now, f"agentq.runview:{new_id}")

    async def refresh_now(self) -> None:
        """Read and draw the run now (after a fork or a switch), outside the refresher; a
        failure stops the view as the refresher's would (`stop` raises it)."""
        try:
            await self.update([])
        except Exception as exc:
            self._fail(exc, "conversation view failed")

    def _go_parent(self) -> None:
        conv = self.conversation
        if conv is not None and conv.forked_from is not None:
            self.show(conv.forked_from.parent)
            self.spawner.spawn(self.refresh_now, "agentq.runview:parent")

    def _compare_parent(self) -> None:
        conv = self.conversation
        if conv is not None and conv.forked_from is not None:
            parent, run = conv.forked_from.parent, conv.run_id
            self.spawner.spawn(lambda: self._compare_shown(parent, run), "agentq.runview:compare")

    async def _compare_shown(self, run_a: str, run_b: str) -> None:
        try:
            await self.compare(run_a, run_b)
        except UnknownWorkflowError as exc:  # the parent was deleted meanwhile: say so
            self.compared.value = f'<div data-agentq="error" style="{MUTED}">{esc_text(exc)}</div>'
        except Exception as exc:
            self._fail(exc, "comparison failed")

    async def compare(self, run_a: str, run_b: str) -> Comparison:
        """Compare two runs side by side in this view (under the conversation) and return
        the `Comparison` (where they first differ, their answers, tokens, cost, time).

        Raises:
            UnknownWorkflowError: A run is not stored.
        """
        store = self.engine.store
        a = await load_conversation(store, run_a, prices=self.prices)
        b = await load_conversation(store, run_b, prices=self.prices)
        self.comparison = compare_conversations(a, b)
        self.compared.value = compare_html(self.comparison)
        return self.comparison

    async def _drain(self) -> None:
        await self.panel.join()
        await self.forks.spawner.join()
        await self.spawner.join()
        await self.history.spawner.join()
        if self._error is None and self.panel.error is not None:
            self._error = self.panel.error

    def close(self) -> None:
        """Close the widgets (see `Live.close`), the approval slots' and the blocks' too."""
        self.panel.close()
        for root in (self.head, self.forks.box, *(b.box for b in self._blocks.values())):
            close_tree(root)  # those not in the tree drawn now
        super().close()


def _target(conv: Conversation, card: ToolCard) -> Target | None:
    if card.key is None or card.state != "completed":
        return None
    return (conv.run_id, "tool", card.key, card.result)


def _children(conv: Conversation) -> list[str]:
    out = [c.workflow_id for c in conv.children]
    for turn in conv.turns:
        for card in turn.tools:
            out += [c.workflow_id for c in card.children]
    return out


def _fork_id(run_id: str, source: Source) -> str:
    """A free-looking fork id: ``<run>-fork-<n>`` not in the workflows read so far."""
    known = source.steps.index if source.steps is not None else {}
    n = 1
    while f"{run_id}-fork-{n}" in known:
        n += 1
    return f"{run_id}-fork-{n}"
