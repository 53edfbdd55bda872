"""The client's address, as the log-in lockout reads it (django-ratelimit reads the same REMOTE_ADDR itself)."""

from __future__ import annotations


def client_address(request) -> str | None:
    """REMOTE_ADDR: the ASGI scope's client, which the web server takes from X-Forwarded-For only when the peer is
    one of OBS_TRUSTED_PROXIES (deploy/run_local.py). No header is read here: a client can write any of them.
    None for a request that came through no server (Django's force_login)."""
    return request.META.get("REMOTE_ADDR") or None
