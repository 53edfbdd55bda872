"""The client's address, as every rate limit and the log-in lockout read it."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


def client_address(request) -> str:
    """REMOTE_ADDR: the ASGI scope's client, which the web server takes from X-Forwarded-For only when the peer is
    one of OBS_TRUSTED_PROXIES (deploy/run_local.py). No header is read here: a client could write any of them."""
    addr = request.META.get("REMOTE_ADDR")
    if not addr:
        raise ImproperlyConfigured("the request has no client address (REMOTE_ADDR): serve the site over TCP, or "
                                   "behind a proxy named in OBS_TRUSTED_PROXIES")
    return addr
