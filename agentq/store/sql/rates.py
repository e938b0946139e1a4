"""The shared rate windows (`agentq.queue.rate_ledger.RateLedger`) as SQL, for both SQL stores.

Two tables (``rate_lanes``: a lane's pause; ``rate_charges``: one row a start, when and its
tokens). Each function runs inside one write transaction the store opens and is given its
connection (sqlite3's or psycopg's). A take locks the lane's row first (``lock``: ``FOR
UPDATE`` on PostgreSQL; SQLite's write transaction holds the whole file), so two processes
taking at once are judged one after the other, each seeing the other's charge.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from agentq.queue import BudgetGrant, Rate
from agentq.store.rules.rates import (
    check_pause,
    check_resume,
    check_settle,
    check_take,
    future_limit,
    horizon,
    judge,
    warn_ahead,
)

__all__ = ["RateSql"]


class RateSql(NamedTuple):
    """The rate verbs in one SQL dialect.

    Attributes:
        placeholder: ``"?"`` (sqlite3) or ``"%s"`` (psycopg).
        lock: Appended to the select of the lane's row (``" FOR UPDATE"``), or "".
    """

    placeholder: str
    lock: str

    def _sql(self, text: str) -> str:
        return text.replace("?", self.placeholder)

    def take(
        self,
        conn: Any,
        lane: str,
        rate: Rate | None,
        tokens: Rate | None,
        estimate: int,
        now: float,
    ) -> BudgetGrant:
        """`RateLedger.take_budget` in the transaction of `conn`."""
        lane, rate, tokens, estimate, now = check_take(lane, rate, tokens, estimate, now)
        sql = self._sql
        conn.execute(
            sql("INSERT INTO rate_lanes (lane, paused_until) VALUES (?, 0) "
                "ON CONFLICT (lane) DO NOTHING"),
            (lane,),
        )
        paused = conn.execute(
            sql("SELECT paused_until FROM rate_lanes WHERE lane = ?" + self.lock), (lane,)
        ).fetchone()[0]
        since = now - horizon(rate, tokens)
        conn.execute(sql("DELETE FROM rate_charges WHERE lane = ? AND at <= ?"), (lane, since))
        rows = conn.execute(
            sql("SELECT at, tokens FROM rate_charges WHERE lane = ? ORDER BY at, id"), (lane,)
        ).fetchall()
        limit = future_limit(rate, tokens, now)
        if rows and rows[-1][0] > limit:  # dated by a clock ahead: count them from now
            conn.execute(
                sql("UPDATE rate_charges SET at = ? WHERE lane = ? AND at > ?"),
                (now, lane, limit),
            )
            warn_ahead(lane, float(rows[-1][0]), now)
            rows = sorted((now if at > limit else at, used) for at, used in rows)
        wait = judge(rows, paused, rate, tokens, estimate, now)
        if wait > 0:
            return BudgetGrant(None, wait, paused)
        charge = conn.execute(
            sql("INSERT INTO rate_charges (lane, at, tokens) VALUES (?, ?, ?) RETURNING id"),
            (lane, now, estimate),
        ).fetchone()[0]
        return BudgetGrant(int(charge), 0.0, paused)

    def settle(self, conn: Any, charge: int, tokens: int) -> None:
        """`RateLedger.settle_budget` in the transaction of `conn`."""
        charge, tokens = check_settle(charge, tokens)
        conn.execute(self._sql("UPDATE rate_charges SET tokens = ? WHERE id = ?"), (tokens, charge))

    def pause(self, conn: Any, lane: str, until: float) -> None:
        """`RateLedger.pause_lane` in the transaction of `conn`."""
        lane, until = check_pause(lane, until)
        conn.execute(
            self._sql(
                "INSERT INTO rate_lanes (lane, paused_until) VALUES (?, ?) ON CONFLICT (lane) "
                "DO UPDATE SET paused_until = CASE WHEN rate_lanes.paused_until > "
                "excluded.paused_until THEN rate_lanes.paused_until ELSE excluded.paused_until END"
            ),
            (lane, until),
        )

    def resume(self, conn: Any, lane: str, now: float) -> bool:
        """`RateLedger.resume_lane` in the transaction of `conn`."""
        lane, now = check_resume(lane, now)
        lifted = conn.execute(
            self._sql("UPDATE rate_lanes SET paused_until = 0 WHERE lane = ? AND paused_until > ?"),
            (lane, now),
        )
        return bool(lifted.rowcount)
