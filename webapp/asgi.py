"""The ASGI application: Django for HTTP (plus /static/ when OBS_SERVE_STATIC), Channels for WebSockets.

Run: daphne -b 127.0.0.1 -p 8000 webapp.asgi:application
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_http = get_asgi_application()  # before importing consumers: it sets up the app registry

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from webapp.live.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter({
    "http": ASGIStaticFilesHandler(django_http) if settings.SERVE_STATIC else django_http,
    # Browsers always send Origin; the validator rejects cross-site pages (and clients without Origin).
    "websocket": AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns)),
})
