"""The client's address and scheme behind `make run`'s nginx: the web server listens on a unix socket
(OBS_PROXY_SOCKET) in a directory only its user may open, so whatever arrives on it came through that nginx, and
nginx sets X-Forwarded-For to the peer's address (never appends) and X-Forwarded-Proto to its scheme.

uvicorn's own --proxy-headers cannot say this: a unix socket connection has no peer address to trust. Anywhere
else (a TCP port, a connection with a peer address) nothing is read from these headers here; deploy/'s proxies are
named to uvicorn instead (OBS_TRUSTED_PROXIES, deploy/run_local.py proxy_flags).
"""

from __future__ import annotations

import ipaddress

from django.conf import settings


def _last(headers, name: bytes) -> str | None:
    value = None
    for k, v in headers:
        if k == name:
            value = v
    return value.decode("latin1").split(",")[-1].strip() if value is not None else None


class SocketProxyHeaders:
    """ASGI middleware: on a connection without a peer address, when OBS_PROXY_SOCKET is set, the client is
    X-Forwarded-For's (last) address and the scheme X-Forwarded-Proto's."""

    def __init__(self, app, enabled: bool | None = None):
        self.app = app
        self.enabled = bool(settings.OBS_PROXY_SOCKET) if enabled is None else enabled

    async def __call__(self, scope, receive, send):
        if self.enabled and scope["type"] in ("http", "websocket") and not scope.get("client"):
            scope = dict(scope)
            addr = _last(scope["headers"], b"x-forwarded-for")
            try:
                scope["client"] = (str(ipaddress.ip_address(addr)), 0) if addr else None
            except ValueError:
                pass
            proto = _last(scope["headers"], b"x-forwarded-proto")
            if proto in ("http", "https"):
                scope["scheme"] = proto if scope["type"] == "http" else proto.replace("http", "ws")
        return await self.app(scope, receive, send)
