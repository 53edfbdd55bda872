"""WebSocket URL routes."""

from django.urls import re_path

from webapp.live.consumers import RunConsumer

websocket_urlpatterns = [
    re_path(r"^ws/runs/(?P<run_id>[A-Za-z0-9][A-Za-z0-9_.-]{0,63})/$", RunConsumer.as_asgi()),
]
