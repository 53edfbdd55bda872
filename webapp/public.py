"""Absolute links to this site (og:url, og:image, oEmbed, the confirmation mail, exports' next pages): from
OBS_PUBLIC_URL where it is set, else from the request's own scheme and Host (which a proxy passes with its port)."""

from __future__ import annotations

from django.conf import settings


def absolute(request, path: str) -> str:
    """`path` ("/runs/x/", or "/a?b=c") as an absolute URL."""
    if settings.OBS_PUBLIC_URL_SET and path.startswith("/"):
        return settings.OBS_PUBLIC_URL + path
    return request.build_absolute_uri(path)
