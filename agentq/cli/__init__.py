"""The ``agentq`` command line: look into a store and record decisions in it (extra ``cli``).

``agentq ls | show | events | schedules | approve | reject | cancel | retry | send | export |
sweep | resume-lane STORE ...``, and
``agentq serve MODULE:ATTR`` (a worker process), also as ``python -m agentq``; ``docs/cli.md``
is the guide. The top layer: it reaches the rest of agentq only through public packages
(`agentq`, `agentq.store`, `agentq.frames`, `agentq.widgets`).

Reading order (each module imports only the ones below it):

- ``commands``: the commands (ls, show, events, approve, reject, cancel, retry, export);
- ``serve``: ``agentq serve MODULE:ATTR``: load the user's engine, serve it, stop on signals;
- ``schedules``: ``agentq schedules STORE``: the stored schedules, their next ticks;
- ``sweep``: ``agentq sweep STORE --ended-before T``: retention (`DurableStore.sweep`);
- ``send``: ``agentq send STORE WORKFLOW_ID TOPIC JSON``: a message for ``ctx.receive``;
- ``lanes``: ``agentq resume-lane STORE LANE``: lift a lane's stored ``Retry-After`` pause;
- ``group``: the click group, the settings, opening STORE for a command (`run_on`), exit
  codes, the one-line refusals; a new command is a module of its own on this group;
- ``export``: ``agentq export``: Parquet frames and the static HTML dashboard;
- ``actions``: approve / reject / cancel / retry, each recorded through the store's verb;
- ``members``: ``ls --group``: a run group's members and its summary line;
- ``pages``: the pages of ``ls`` and ``events`` and the line naming the next one;
- ``conversation``: ``show``'s messages section: an agent run's conversation as a transcript
  (read by `agentq.widgets.load_conversation`, the notebook's reader);
- ``views``: the rich tables the commands print (pure functions of rows);
- ``params``: option types whose errors name the value (whole numbers, JSON);
- ``target``: opening STORE (a SQLite path, never created, or a PostgreSQL DSN) and
  `Refused`, the one-line "no" of every command;
- ``literal``: the one sanitiser of everything printed: stored strings and typed values
  literally, never markup, their control and bidi characters made visible.
"""

from agentq.cli.commands import cli, main

__all__ = ["cli", "main"]
