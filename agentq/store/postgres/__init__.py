"""`PostgresStore`: a pool of connections on worker threads, many processes on one database.

Imports `agentq.store.sql`, the rules and the contract, never another backend. Read the
modules in this order (each imports only modules above it):

    ``schema``          migrations from ``schema.sql`` (in this package), under an advisory
                        lock.
    ``tx``              `PostgresTx` (the rules' `Tx`: the workflow row locked, the next
                        sequence number), rebuilding the projection.
    ``jobs``            the ``job_outcomes`` table in PostgreSQL.
    ``connection``      connecting, migrating, the pool, one transaction (retries).
    ``listen``          ``LISTEN`` for new work on a connection of its own.
    ``store``           `PostgresStore`: the pool, worker threads, dispatch, wake-ups.
"""
