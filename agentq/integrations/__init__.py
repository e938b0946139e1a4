"""Integrations: agent frameworks run on agentq, each an optional extra.

==================  ===========================================================================
``pydantic_ai``     `DurableAgent`: a pydantic-ai `Agent` whose model requests and tool calls
                    are durable calls and whose approvals are durable waits (extra
                    ``pydantic-ai``)
==================  ===========================================================================

The top layer: an integration imports agentq only through its public packages
(`agentq.workflows`, `agentq.store`, `agentq.queue`, the foundation modules) and nothing in
agentq imports an integration.
"""
