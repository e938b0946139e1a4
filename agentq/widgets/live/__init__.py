"""The live machinery under every widget: the refresher task and the cell that owns it.

No view and no store here: the widgets (``agentq.widgets``) build on it. Reading order (each
module imports only the ones below it):

- ``refresher``: `Live`, the refresher every widget runs on the kernel's loop (start, stop,
  errors, closing), `Spawner` (tasks started by clicks) and `Confirmation` (a question with
  Yes / No), and `widgets()` (ipywidgets, imported when a widget is first built);
- ``cells``: `CellOwner`: a refresher belongs to the notebook cell that started it.
"""
