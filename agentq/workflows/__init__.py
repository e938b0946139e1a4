"""Durable workflows: the model, the engine, attempts and leases, recovery."""
