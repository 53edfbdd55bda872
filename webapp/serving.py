"""The web server's HTTP protocol: uvicorn's httptools protocol with a header timeout.

uvicorn times out only idle kept-alive connections (`--timeout-keep-alive`, and any byte received disarms it): a
client that connects and sends nothing, or sends its headers a byte at a time, holds the connection for ever. Here
each request's headers must be complete within OBS_HEADER_TIMEOUT_S of the connection (or of the request's first
byte on a kept-alive connection), trickling or not; else 408 and the connection is closed. The body's own
timeout is webapp.limits.BodyLimits'. Selected by deploy/run_local.py's `--http webapp.serving:HttpProtocol`.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_BODY = b"request headers not received in time\n"
RESPONSE_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(_BODY), _BODY))


def header_timeout_s() -> float:
    from django.conf import settings  # configured by the time connections arrive (uvicorn loads the app first)

    return float(settings.OBS_HEADER_TIMEOUT_S)


class HttpProtocol(HttpToolsProtocol):
    _header_timer = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._header_timer is None:  # the next request on a kept-alive connection
            self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(header_timeout_s(), self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.write(RESPONSE_408)
            self.transport.close()
