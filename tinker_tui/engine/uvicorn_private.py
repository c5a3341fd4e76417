"""Every use the engine's HTTP endpoints make of uvicorn's internals, in one module.

uvicorn has no public way to time out a request that arrives too slowly, nor to leave
signals to the application that embeds it. The loopback server (`engine.loopback_http`)
subclasses its HTTP/1.1 protocol (`H11Protocol`, from a module uvicorn does not document)
and overrides `Server.capture_signals`; an upgrade that renames either would make the
override silently never run. Each name relied on (the protocol's `conn`, `transport`, `loop`
and `client`; the server's `capture_signals`, `started` and `should_exit`) is in
`PRIVATE_NAMES`; the suite checks the installed uvicorn still has every one
(tests/test_private_names.py) and that no other module reaches into uvicorn's internals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

#: (owner, name): the internals used below.
PRIVATE_NAMES = (
    ("uvicorn.protocols.http.h11_impl.H11Protocol", "conn"),
    ("uvicorn.protocols.http.h11_impl.H11Protocol", "transport"),
    ("uvicorn.protocols.http.h11_impl.H11Protocol", "loop"),
    ("uvicorn.protocols.http.h11_impl.H11Protocol", "client"),
    ("uvicorn.Server", "capture_signals"),
    ("uvicorn.Server", "started"),
    ("uvicorn.Server", "should_exit"),
)


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, plus a deadline for each request to arrive whole.

    Armed when the connection opens and when the first byte of a request arrives; disarmed
    once the request (head and body) is complete. When it fires, the connection is closed:
    an app still reading that body sees a disconnect."""

    request_timeout: float
    request_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self.arm_deadline()

    def data_received(self, data: bytes) -> None:
        if self.request_deadline is None and self.request_incomplete():
            self.arm_deadline()  # a new request starts on a kept-alive connection
        super().data_received(data)
        if not self.request_incomplete():
            self.disarm_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm_deadline()
        super().connection_lost(exc)

    def request_incomplete(self) -> bool:
        return self.conn.their_state in (h11.IDLE, h11.SEND_BODY)

    def arm_deadline(self) -> None:
        self.disarm_deadline()
        self.request_deadline = self.loop.call_later(self.request_timeout, self.deadline_passed)

    def disarm_deadline(self) -> None:
        if self.request_deadline is not None:
            self.request_deadline.cancel()
            self.request_deadline = None

    def deadline_passed(self) -> None:
        self.request_deadline = None
        if not self.transport.is_closing():
            logger.debug(
                "closing a connection from %s: its request did not arrive whole within %g s",
                self.client,
                self.request_timeout,
            )
            self.transport.close()


def deadline_protocol(request_timeout: float) -> type[DeadlineH11Protocol]:
    """The protocol class uvicorn's `Config(http=...)` takes, with this request deadline."""
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"request_timeout": request_timeout})


class EmbeddedUvicorn(uvicorn.Server):
    """uvicorn that leaves signal handling to the application that embeds it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    @property
    def listening(self) -> bool:
        return self.started

    def request_exit(self) -> None:
        """Stop accepting; in-flight requests get the configured graceful shutdown time."""
        self.should_exit = True
