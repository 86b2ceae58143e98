"""uvicorn's h11 protocol with a time limit on request headers.

uvicorn arms no timer on a connection until it has answered one request, so a client that opens
a socket and sends headers slowly, or never finishes them, holds a connection slot forever; a few
dozen such sockets (slowloris) starve every other client. Here a connection whose next request's
headers are not complete within ``header_timeout`` seconds is closed. Bodies have their own limit
(``ServerLimits.body_timeout_s``, a 408 from the app).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeaderTimeoutH11Protocol(H11Protocol):
    header_timeout: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._watch_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _watch_headers(self) -> None:
        """Armed while the client owes us a request's headers (their state IDLE), cancelled as
        soon as they are complete."""
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if waiting and self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)
        elif not waiting:
            self._cancel_header_timer()

    def _cancel_header_timer(self) -> None:
        if getattr(self, "_header_timer", None) is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.close()


def protocol_with_header_timeout(seconds: float) -> type[HeaderTimeoutH11Protocol]:
    """The protocol class to pass as ``uvicorn.run(..., http=...)``."""
    if not seconds > 0:
        raise ValueError(f"header timeout must be > 0 seconds, got {seconds}")
    return type("HeaderTimeoutH11Protocol", (HeaderTimeoutH11Protocol,), {"header_timeout": float(seconds)})
