"""Absolute links to this site (og:url, og:image, oEmbed, the confirmation mail, exports' next pages): from
OBS_PUBLIC_URL where it is set, else from the request's own scheme and Host (which a proxy passes with its port)."""

from __future__ import annotations

from urllib.parse import urlparse

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def absolute(request, path: str) -> str:
    """`path` ("/runs/x/", or "/a?b=c") as an absolute URL."""
    if settings.OBS_PUBLIC_URL_SET and path.startswith("/"):
        return settings.OBS_PUBLIC_URL + path
    return request.build_absolute_uri(path)


def public_url(raw: str) -> str:
    """OBS_PUBLIC_URL ("https://observatory.example.org", "http://127.0.0.1:8000"): scheme, host and port only;
    ImproperlyConfigured naming what is wrong."""
    u = urlparse(raw.strip())
    try:
        u.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        raise ImproperlyConfigured(f"OBS_PUBLIC_URL {raw!r}: the port is not a number") from None
    if u.scheme not in ("http", "https") or not u.hostname or u.path.strip("/") or u.query or u.fragment \
            or u.username or u.password:
        raise ImproperlyConfigured(f"OBS_PUBLIC_URL {raw!r} must be http(s)://host[:port], the address browsers "
                                   "use, with no path, query or credentials")
    return f"{u.scheme}://{u.netloc.lower()}"
