"""`SqliteStore`: one file, one aiosqlite connection, group commit.

Imports `agentq.store.sql`, the rules and the contract, never another backend. Read the
modules in this order (each imports only modules above it):

    ``binds``           `Sparse`: a statement run with its None parameters written as
                        ``NULL`` (sqlite3 binds None and enum members slowly).
    ``tx``              the write lock, `SqliteTx` (the rules' `Tx`), rebuilding the
                        projection.
    ``schema``          migrations from ``schema.sql`` (in this package).
    ``jobs``            the ``job_outcomes`` table: the `JobOutcomeStore` verbs as SQL.
    ``transact``        a batch's transaction: its verbs in one ``BEGIN IMMEDIATE … COMMIT``,
                        waiting for the lock or only if it is free.
    ``connection``      opening the aiosqlite connection; running a call on its thread.
    ``inline``          `Inline`: a second connection, for the event loop's thread, where a
                        batch of light verbs runs when it cannot block (no thread hop).
    ``batch``           `GroupCommit` (the queue of waiting verbs), `Batch` and `Op`: the
                        verbs of one group-commit transaction.
    ``store``           `SqliteStore`: the connection and the verbs.
"""
