"""Replay the Berkeley Function Calling Leaderboard's multi-turn tasks (see README.md).

Modules, bottom to top:

- `errors`: the `ReplayError` tree.
- `dataset`: find the multi-turn categories bfcl-eval ships, load their tasks and parse their
  ground-truth calls with `ast`.
- `snapshot`: encode a service's state as JSON, restore it; convert call results to JSON.
- `services`: build a task's services as BFCL does for its category, classify functions
  (read / write / approval), invoke calls.
- `direct`: the ground truth run in a plain loop (the raw floor) and run comparison.
- `servicehost`: the services as durable external APIs honouring idempotency keys (SQLite).
- `plan`, `approval`, `crash`: ids, keys, lanes and retry policies; approvals; crash injection.
- `replay`: a task as an agentq workflow, a turn as a step, a call as a queued job.
- `selection`: the tasks of a run and its exports' name; recovery and reads limited to the
  run's own workflows.
- `report`, `export`, `run`: the check against the ground truth, the summary, the exports,
  and the whole run (`python -m examples.bfcl_replay`).

Needs the `bfcl` extra and bfcl-eval without its declared requirements:
``pip install -e '.[bfcl]' && pip install --no-deps bfcl-eval==2026.3.23`` (what
``make demo`` installs).
"""
