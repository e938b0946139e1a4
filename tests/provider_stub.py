"""A local HTTP server that answers as a model provider does, from a script of replies.

`ProviderStub` serves, in order, the `Reply` objects it is given, whatever the path, and keeps
each request it received (path and JSON body) in `requests`. A reply is a JSON body, or a
stream of server-sent events (``text/event-stream``), with a status and headers: enough for
the OpenAI chat-completions and Anthropic messages endpoints, their streams, a 429 with
``Retry-After`` and a 500. The server runs in a thread of its own on 127.0.0.1 (no network);
the SDKs talk to it through their ``base_url``.

The recorded response shapes themselves are in `provider_shapes`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One HTTP response: a JSON `body`, or `events` sent as server-sent events.

    `events` are ``(event name or None, data)`` pairs; data that is not a str is sent as JSON.
    With `stall_after` the stream stops after that many events: the stub sets its `stalled`
    event and holds the connection until `release` is set (a provider that hangs mid-stream,
    a process killed while it streams), then closes it.
    """

    body: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    events: Sequence[tuple[str | None, Any]] | None = None
    stall_after: int | None = None


@dataclass
class Received:
    """A request the stub received: its path and its JSON body."""

    path: str
    body: Any


class ProviderStub:
    """Serves `replies` in order; `requests` are the requests received, in order."""

    def __init__(self, replies: Sequence[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[Received] = []
        self.stalled = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    @property
    def served(self) -> int:
        """How many requests were answered."""
        return len(self.requests)

    def _next(self, path: str, body: Any) -> Reply:
        with self._lock:
            self.requests.append(Received(path, body))
            if len(self.requests) > len(self.replies):
                return Reply({"error": {"message": "the stub's script has ended"}}, status=599)
            return self.replies[len(self.requests) - 1]

    @contextmanager
    def serving(self) -> Iterator[str]:
        """Serve on a free port of 127.0.0.1; yield the base URL (``http://127.0.0.1:<port>``)."""
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                reply = stub._next(self.path, body)
                if reply.events is None:
                    self._send(reply, "application/json", json.dumps(reply.body).encode())
                    return
                chunks = [_event(name, data) for name, data in reply.events]
                if reply.stall_after is None:
                    self._send(reply, "text/event-stream", b"".join(chunks))
                    return
                self._send(reply, "text/event-stream", b"".join(chunks[: reply.stall_after]),
                           length=len(b"".join(chunks)))
                stub.stalled.set()
                stub.release.wait(timeout=60)
                self.close_connection = True

            def _send(
                self, reply: Reply, content_type: str, payload: bytes, length: int | None = None
            ) -> None:
                self.send_response(reply.status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload) if length is None else length))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, name="provider-stub", daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            self.release.set()
            server.shutdown()
            server.server_close()
            thread.join()


def _event(name: str | None, data: Any) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {name}\n" if name is not None else ""
    return f"{head}data: {text}\n\n".encode()
