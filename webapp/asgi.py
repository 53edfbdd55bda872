"""The ASGI application: Django for HTTP (static files through WhiteNoise when OBS_SERVE_STATIC), Channels for
WebSockets (session auth, so the live consumer can consult the authorization matrix).

Run: deploy/run_local.py's web command, i.e. uvicorn with uvloop/httptools and no per-message deflate
(`python -m uvicorn webapp.asgi:application --ws websockets-sansio --ws-per-message-deflate false ...`); daphne
(`daphne -b 127.0.0.1 -p 8000 webapp.asgi:application`) works too.
"""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django  # noqa: E402

django.setup(set_prefix=False)  # (what get_asgi_application does) before importing consumers: the app registry

from webapp.threads import PooledASGIHandler  # noqa: E402

django_http = PooledASGIHandler()  # Django's ASGI handler, its request threads (and their DB connections) reused

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from webapp.live.auth import SessionAuth  # noqa: E402 (channels.auth.AuthMiddlewareStack when a session exists)
from webapp.limits import BodyLimits  # noqa: E402
from webapp.proxied import SocketProxyHeaders  # noqa: E402
from webapp.live.routing import websocket_urlpatterns  # noqa: E402

application = SocketProxyHeaders(ProtocolTypeRouter({
    "http": BodyLimits(django_http),  # a body over the size limit or slower than OBS_BODY_TIMEOUT_S: refused
    # Browsers always send Origin; the validator rejects cross-site pages (and clients without Origin).
    "websocket": AllowedHostsOriginValidator(SessionAuth(URLRouter(websocket_urlpatterns))),
}))

# What starting up made (modules, settings, URL patterns, the app: ~150k objects) lives as long as the process: kept
# out of the cycle collector's sight, a full collection walks only what requests have made since (each such pause
# in a request, ~90 ms with everything in sight, becomes a few ms).
gc.freeze()
