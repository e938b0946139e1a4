"""Recorded response shapes of the OpenAI chat-completions and Anthropic messages APIs.

Written from the providers' API references, for `provider_stub.ProviderStub`: the first
response of each script thinks, says a few words and asks for two tool calls at once (the
Anthropic one also runs its built-in web search: a ``server_tool_use`` block and its
``web_search_tool_result``); the second answers in text (with a citation). Each comes as one
JSON body and as the server-sent events of a stream. OpenAI's Responses API (JSON only): a
reasoning item, a web search, two function calls; then a generated image. Errors: a 429 with
``Retry-After`` and a 500, as both providers send them.
"""

from __future__ import annotations

import json
from typing import Any

from provider_stub import Reply

CREATED = 1_765_000_000
"""The ``created`` time of the OpenAI responses (Unix seconds)."""

OPENAI_MODEL = "gpt-4o-2024-08-06"
ANTHROPIC_MODEL = "claude-sonnet-4-5-20250929"
CITY_ARGS = ({"city": "Paris"}, {"city": "Rome"})


# ------------------------------------------------------------------------------------ OpenAI


def _openai_usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 7, "audio_tokens": 0},
    }


def _openai_call(i: int) -> dict[str, Any]:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "weather", "arguments": json.dumps(CITY_ARGS[i])},
    }


def openai_replies() -> list[Reply]:
    """A reasoning response with two parallel tool calls, then a text with a url citation."""
    calls = {
        "id": "chatcmpl-1", "object": "chat.completion", "created": CREATED,
        "model": OPENAI_MODEL, "system_fingerprint": "fp_1",
        "choices": [{
            "index": 0, "finish_reason": "tool_calls", "logprobs": None,
            "message": {
                "role": "assistant", "content": "Checking both cities.",
                "reasoning_content": "The user wants two cities: call weather twice.",
                "tool_calls": [_openai_call(0), _openai_call(1)],
            },
        }],
        "usage": _openai_usage(50, 30),
    }
    text = "Paris is sunny, Rome is rainy (source: example.com)."
    answer = {
        "id": "chatcmpl-2", "object": "chat.completion", "created": CREATED + 2,
        "model": OPENAI_MODEL, "system_fingerprint": "fp_1",
        "choices": [{
            "index": 0, "finish_reason": "stop", "logprobs": None,
            "message": {
                "role": "assistant", "content": text,
                "annotations": [{"type": "url_citation", "url_citation": {
                    "url": "https://example.com/weather", "title": "Weather",
                    "start_index": 0, "end_index": len(text),
                }}],
            },
        }],
        "usage": _openai_usage(90, 12),
    }
    return [Reply(calls), Reply(answer)]


def _chunk(n: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-s{n}", "object": "chat.completion.chunk", "created": CREATED + n,
        "model": OPENAI_MODEL, "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def _usage_chunk(n: int, prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-s{n}", "object": "chat.completion.chunk", "created": CREATED + n,
        "model": OPENAI_MODEL, "choices": [], "usage": _openai_usage(prompt, completion),
    }


def openai_stream_replies() -> list[Reply]:
    """The same script streamed: reasoning, text and tool-call argument deltas, then usage."""
    first: list[tuple[str | None, Any]] = [
        (None, _chunk(1, {"role": "assistant", "reasoning_content": "Two cities: "})),
        (None, _chunk(1, {"reasoning_content": "call weather twice."})),
        (None, _chunk(1, {"content": "Checking "})),
        (None, _chunk(1, {"content": "both cities."})),
    ]
    for i, args in enumerate(CITY_ARGS):
        text = json.dumps(args)
        start = {"index": i, "id": f"call_{i}", "type": "function",
                 "function": {"name": "weather", "arguments": text[:5]}}
        first.append((None, _chunk(1, {"tool_calls": [start]})))
        rest = {"index": i, "function": {"arguments": text[5:]}}
        first.append((None, _chunk(1, {"tool_calls": [rest]})))
    first += [(None, _chunk(1, {}, "tool_calls")), (None, _usage_chunk(1, 50, 30)),
              (None, "[DONE]")]
    second: list[tuple[str | None, Any]] = [
        (None, _chunk(2, {"role": "assistant", "content": "Paris is sunny, "})),
        (None, _chunk(2, {"content": "Rome is rainy."})),
        (None, _chunk(2, {}, "stop")), (None, _usage_chunk(2, 90, 12)), (None, "[DONE]"),
    ]
    return [Reply(events=first), Reply(events=second)]


def openai_error(status: int, retry_after: int | None = None) -> Reply:
    """An OpenAI error body: a 429 (``rate_limit_exceeded``) or a 500 (``server_error``)."""
    code = "rate_limit_exceeded" if status == 429 else "server_error"
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    body = {"error": {"message": f"status {status}", "type": code, "param": None, "code": code}}
    return Reply(body, status=status, headers=headers)


# --------------------------------------------------------------------------------- Anthropic


def _anthropic_usage(inputs: int, outputs: int) -> dict[str, Any]:
    return {
        "input_tokens": inputs, "output_tokens": outputs,
        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 6,
        "server_tool_use": {"web_search_requests": 1},
    }


_SEARCH_RESULT = {
    "type": "web_search_result", "url": "https://example.com/weather", "title": "Weather",
    "encrypted_content": "ZW5jcnlwdGVk", "page_age": "1 day ago",
}


def anthropic_replies() -> list[Reply]:
    """Thinking (signed and redacted), a web search and its result, text and two tool uses;
    then a text with a web-search citation."""
    calls = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": ANTHROPIC_MODEL,
        "content": [
            {"type": "thinking", "thinking": "Two cities: search, then call weather twice.",
             "signature": "c2lnbmF0dXJlLTE="},
            {"type": "redacted_thinking", "data": "cmVkYWN0ZWQ="},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
             "input": {"query": "weather paris rome"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
             "content": [_SEARCH_RESULT]},
            {"type": "text", "text": "Checking both cities."},
            {"type": "tool_use", "id": "toolu_0", "name": "weather", "input": CITY_ARGS[0]},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": CITY_ARGS[1]},
        ],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": _anthropic_usage(50, 30),
    }
    answer = {
        "id": "msg_2", "type": "message", "role": "assistant", "model": ANTHROPIC_MODEL,
        "content": [{
            "type": "text", "text": "Paris is sunny, Rome is rainy.",
            "citations": [{
                "type": "web_search_result_location", "url": "https://example.com/weather",
                "title": "Weather", "encrypted_index": "aW5kZXg=",
                "cited_text": "Paris sunny, Rome rainy",
            }],
        }],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": _anthropic_usage(90, 12),
    }
    return [Reply(calls), Reply(answer)]


def _message_start(n: int, inputs: int) -> tuple[str, Any]:
    message: dict[str, Any] = {
        "id": f"msg_s{n}", "type": "message", "role": "assistant", "model": ANTHROPIC_MODEL,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": inputs, "output_tokens": 1,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 6},
    }
    return "message_start", {"type": "message_start", "message": message}


def _block(index: int, block: dict[str, Any], *deltas: dict[str, Any]) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = [
        ("content_block_start",
         {"type": "content_block_start", "index": index, "content_block": block}),
    ]
    events += [
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
        for d in deltas
    ]
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def _message_end(stop: str, outputs: int) -> list[tuple[str, Any]]:
    delta = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
             "usage": {"output_tokens": outputs}}
    return [("message_delta", delta), ("message_stop", {"type": "message_stop"})]


def anthropic_stream_replies() -> list[Reply]:
    """The same script streamed: thinking and signature deltas, text deltas, tool-use input
    as partial JSON."""
    first = [_message_start(1, 50)]
    first += _block(
        0, {"type": "thinking", "thinking": "", "signature": ""},
        {"type": "thinking_delta", "thinking": "Two cities: "},
        {"type": "thinking_delta", "thinking": "call weather twice."},
        {"type": "signature_delta", "signature": "c2lnbmF0dXJlLTE="},
    )
    first += _block(1, {"type": "text", "text": ""},
                    {"type": "text_delta", "text": "Checking "},
                    {"type": "text_delta", "text": "both cities."})
    for i, args in enumerate(CITY_ARGS):
        text = json.dumps(args)
        first += _block(
            2 + i, {"type": "tool_use", "id": f"toolu_{i}", "name": "weather", "input": {}},
            {"type": "input_json_delta", "partial_json": text[:5]},
            {"type": "input_json_delta", "partial_json": text[5:]},
        )
    first += _message_end("tool_use", 30)
    second = [_message_start(2, 90)]
    second += _block(0, {"type": "text", "text": ""},
                     {"type": "text_delta", "text": "Paris is sunny, "},
                     {"type": "text_delta", "text": "Rome is rainy."})
    second += _message_end("end_turn", 12)
    return [Reply(events=first), Reply(events=second)]


def anthropic_error(status: int, retry_after: int | None = None) -> Reply:
    """An Anthropic error body: a 429 (``rate_limit_error``) or a 500 (``api_error``)."""
    kind = "rate_limit_error" if status == 429 else "api_error"
    headers = {} if retry_after is None else {"retry-after": str(retry_after)}
    body = {"type": "error", "error": {"type": kind, "message": f"status {status}"}}
    return Reply(body, status=status, headers=headers)


# --------------------------------------------------------------------- OpenAI Responses API

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
    "rkJggg=="
)
"""A 1x1 PNG, base64: the image the image-generation call returns."""


def _response(n: int, output: list[dict[str, Any]], inputs: int, outputs: int) -> dict[str, Any]:
    return {
        "id": f"resp_{n}", "object": "response", "created_at": CREATED + n,
        "status": "completed", "model": "gpt-5-2025-08-07", "output": output,
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": inputs, "output_tokens": outputs,
                  "total_tokens": inputs + outputs,
                  "input_tokens_details": {"cached_tokens": 4},
                  "output_tokens_details": {"reasoning_tokens": 7}},
    }


def openai_responses_replies() -> list[Reply]:
    """The Responses API: a reasoning item (summary and encrypted content), a built-in web
    search, a message and two function calls; then an image generated by the built-in tool
    (returned as a file) and a message."""
    calls = _response(1, [
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "ZW5jcnlwdGVk",
         "summary": [{"type": "summary_text", "text": "Two cities: call weather twice."}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "weather paris rome"}},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking both cities.",
                      "annotations": []}]},
        *({"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": "weather",
           "arguments": json.dumps(args), "status": "completed"}
          for i, args in enumerate(CITY_ARGS)),
    ], 50, 30)
    answer = _response(2, [
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": PNG,
         "output_format": "png", "size": "1024x1024", "quality": "low",
         "background": "opaque", "revised_prompt": "A sunny Paris, a rainy Rome"},
        {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Paris is sunny, Rome is rainy.",
                      "annotations": []}]},
    ], 90, 12)
    return [Reply(calls), Reply(answer)]
