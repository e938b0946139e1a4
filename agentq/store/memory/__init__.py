"""`MemoryStore`: the reference store, in dicts; a test double.

Imports the rules and the contract, never another backend. Read the modules in this order:

    ``detach``          `detached`: the copies `MemoryStore` hands out, sharing only
                        immutable values.
    ``rates``           `RateBook`: the shared rate windows (`RateLedger`) in dicts.
    ``staging``         what a transaction stages beside the rows: messages and end-hook
                        outbox rows (`StagedKept`); the committed outbox (`Outbox`).
    ``tx``              `MemoryTx`: one transaction over the store's dicts (`Tables`),
                        staged and applied on commit.
    ``verbs``           the families the store keeps its own way: job outcomes, run groups,
                        rate windows, one transaction of a sweep.
    ``store``           `MemoryStore`: the dicts, the verbs run through `MemoryTx`, the
                        reads.
"""
