"""The ``agentq`` command line: look into a store and record decisions in it (extra ``cli``).

``agentq ls | show | events | approve | reject | cancel | retry | export STORE ...``, and
``agentq serve MODULE:ATTR`` (a worker process), also as ``python -m agentq``; ``docs/cli.md``
is the guide. The top layer: it reaches the rest of agentq only through public packages
(`agentq`, `agentq.store`, `agentq.frames`, `agentq.widgets`).

Reading order (each module imports only the ones below it):

- ``commands``: the click group and its commands; exit codes; the console;
- ``serve``: ``agentq serve MODULE:ATTR``: load the user's engine, serve it, stop on signals;
- ``export``: ``agentq export``: Parquet frames and the static HTML dashboard;
- ``actions``: approve / reject / cancel / retry, each recorded through the store's verb;
- ``views``: the rich tables the commands print (pure functions of rows);
- ``target``: opening STORE (a SQLite path, never created, or a PostgreSQL DSN) and
  `Refused`, the one-line "no" of every command.
"""

from agentq.cli.commands import cli, main

__all__ = ["cli", "main"]
