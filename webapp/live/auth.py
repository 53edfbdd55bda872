"""WebSocket authentication: channels' AuthMiddlewareStack (session cookie -> scope["user"]), skipped for a
handshake that carries no session cookie at all: that viewer is anonymous, and a crowd of them should not each
pay a trip through the session store's thread (the consumer still consults the authorization matrix)."""

from __future__ import annotations

from channels.auth import AuthMiddlewareStack
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import parse_cookie


class SessionAuth:
    def __init__(self, inner):
        self.inner = inner
        self.with_session = AuthMiddlewareStack(inner)

    async def __call__(self, scope, receive, send):
        raw = b"; ".join(v for k, v in scope.get("headers", ()) if k == b"cookie")
        if settings.SESSION_COOKIE_NAME in parse_cookie(raw.decode("latin-1")):
            return await self.with_session(scope, receive, send)
        return await self.inner({**scope, "user": AnonymousUser()}, receive, send)
