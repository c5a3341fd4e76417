"""What the engine's two HTTP endpoints (the policy server and the control endpoint) share:
uvicorn serving an ASGI app on 127.0.0.1, on a free port, inside the engine's own event loop,
behind a bearer token.

One place for the rules every request meets before an app sees it:
- `BearerAuth`: `Authorization: Bearer <token>`, compared in constant time, on every request;
- a deadline for a whole request (head and body) to arrive, so a client that sends half a
  request cannot hold a connection open for ever (uvicorn itself only times out idle
  keep-alive connections; the protocol that adds it is in `engine.uvicorn_private`);
- `read_body`: a body over the app's limit is refused from its Content-Length before any of
  it is read, or as soon as a chunked body passes the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
from collections.abc import Callable

import uvicorn
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tinker_tui.engine.errors import TinkerTuiError
from tinker_tui.engine.uvicorn_private import EmbeddedUvicorn, deadline_protocol

#: Seconds a request may take to arrive whole, counted from its first byte (or from the
#: moment its connection opened).
REQUEST_TIMEOUT = 10.0


class BearerAuth:
    """Pure ASGI middleware: every HTTP request needs `Authorization: Bearer <token>`.

    `refusal` builds the 401 response, so each endpoint answers in its own error shape.
    With `api_key_header`, the token as that header's whole value is accepted too (Anthropic's
    clients send `x-api-key: <token>`)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        refusal: Callable[[], Response],
        api_key_header: bytes | None = None,
    ) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.refusal = refusal
        self.api_key_header = api_key_header
        self.api_key = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given, key_given = b"", b""
            for key, value in scope["headers"]:
                if key == b"authorization":
                    given = value
                elif key == self.api_key_header:
                    key_given = value
            ok = hmac.compare_digest(given, self.expected)
            if self.api_key_header is not None and key_given:
                ok = hmac.compare_digest(key_given, self.api_key) or ok
            if not ok:
                await self.refusal()(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyTooLarge(TinkerTuiError):
    """A request body over the endpoint's limit (its size, when the client declared it)."""

    def __init__(self, limit: int, size: int | None) -> None:
        declared = f"{size} bytes" if size is not None else "more"
        super().__init__(f"request body is {declared}; this endpoint accepts at most {limit} bytes")
        self.limit = limit
        self.size = size


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or BodyTooLarge without reading more than `limit` bytes of it.

    Starlette's ClientDisconnect when the client goes away first. What is left of a
    refused body is read and dropped by uvicorn after the response (or the connection is
    closed at the request deadline), so the client still gets the refusal."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            size = -1
        if size > limit:
            raise BodyTooLarge(limit, size)
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise BodyTooLarge(limit, None)
        chunks.append(chunk)
    return b"".join(chunks)


class LoopbackServer:
    """Serves `app` on 127.0.0.1 (a free port) in the running event loop; `start()` returns
    once it listens, `stop()` once it has stopped (in-flight requests get `shutdown_timeout`
    seconds to finish)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        name: str,
        request_timeout: float = REQUEST_TIMEOUT,
        shutdown_timeout: int = 5,
    ) -> None:
        self.app = app
        self.name = name
        self.request_timeout = request_timeout
        self.shutdown_timeout = shutdown_timeout
        self.port: int | None = None
        self._server: EmbeddedUvicorn | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says
        # TCP, and accepted sockets inherit it. Without it every response waits out Nagle's
        # algorithm against the client's delayed ACK: about 40 ms per request.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        # Loopback only: no proxy in front, so no proxy-header rewriting per request.
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            backlog=1024,
            proxy_headers=False,
            http=deadline_protocol(self.request_timeout),
            timeout_graceful_shutdown=self.shutdown_timeout,
        )
        self._server = EmbeddedUvicorn(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=self.name)
        while not self._server.listening:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop listening and wait for the server to finish. Safe to call more than once."""
        if self._server is None or self._task is None:
            return
        server, task = self._server, self._task
        self._server = self._task = None
        server.request_exit()
        with contextlib.suppress(asyncio.CancelledError):
            await task
