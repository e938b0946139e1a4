"""Durable stores: the `DurableStore` protocol and its implementations."""
