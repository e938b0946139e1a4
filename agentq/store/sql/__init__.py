"""What both SQL stores (SQLite and PostgreSQL) share: row decoding, the read queries, the
read verbs.

Imports the rules and the contract, never a backend. Read the modules in this order (each
imports only modules above it):

    ``rows``            the column lists of the tables and decoding a result row.
    ``reads``           the read verbs as queries; `Dialect` names what differs between
                        the two (placeholder, key parameters, row locks, JSON in SQL).
    ``groups``          the run-group tables (``run_groups``, ``run_group_items``) as
                        queries: record, forget, load a manifest; a group's member rows.
    ``sweep``           one transaction of a sweep (retention) as SQL: `sweep_batch`.
    ``rates``           `RateSql`: the shared rate windows (`RateLedger`) as SQL, in either
                        dialect (run by each store's `rate_rules`).
    ``messages``        the ``messages`` table: the `Tx` statements and the read.
    ``hooks``           the ``end_hooks`` outbox table: the `Tx` statements and the read.
    ``kept``            `KeptRows`: the `Tx` methods over those two, a base of both stores'
                        `Tx`.
    ``verbs``           `SqlStore`: the read verbs of the SQL stores once, over `_read`.
"""
