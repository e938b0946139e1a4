"""The widgets' models: what the views show, as plain values and the store reads behind them.

Nothing here imports ipywidgets, the HTML renderers (``agentq.widgets.html``) or the live
machinery (``agentq.widgets.live``): a script, a test or the static export uses these without a
kernel (import-linter contract "Widget models import no view and no ipywidgets"). Reading order
(each module imports only the ones below it, and the layers below the widgets):

- ``bulk``: `WaitFilter`, `pending_waits`, `answer_waits`, `BulkReport`: answering many waits;
- ``search``: `Query` and `page_of`: search and paging over the workflow index;
- ``group``: `GroupProgress` (`read_progress`, `fold_progress`): a run group's counts,
  failures, tokens, cost, rate and time left;
- ``schedules``: `ScheduleList`: the store's schedules, read when the log moved or now and
  then;
- ``source``: `Source`: what changed in a store since the last refresh (one read per widget
  tree), and `StepCache`, the step rows it keeps;
- ``runs``: `load_conversation` (an agent run read and folded), `lineage_in` / `lineage_of`
  (a fork's parent), `compare_conversations` (`Comparison`: where two runs first differ) and
  `event_page` (a page of a workflow's events);
- ``folding``: `fold_conversation`: an agent run's rows folded into a `Conversation`;
- ``conversation``: `Conversation`, `Turn`, `ToolCard`, `ApprovalAsk`, `ChildRun`: an agent
  run as the conversation view draws it (prompt, model turns, tool cards, approvals, child
  runs, final answer);
- ``tree``: `build_tree`: a workflow's rows folded into its run tree (its steps' statuses
  by ``detail``'s `shown_step`);
- ``calls``: `CallTally`: the event log's call events folded into call counts per step;
- ``detail``: `load_detail` (one workflow read for its detail view), a step's attempts, and
  `shown_step` (the status every view shows a step with);
- ``timeline``: `Timeline`: the event log folded into spans per workflow step;
- ``prices``: `Price`, `price_table`, `cost_of`: what a model request cost (per million
  tokens, a table the person sets).
"""
