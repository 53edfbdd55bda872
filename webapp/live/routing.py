"""WebSocket URL routes. A path outside them is refused at the handshake (404 where the server can say so), not
answered with an HTTP 500 (Channels' router raises on an unmatched path)."""

from django.urls import re_path

from observatory import contract

from webapp.control.consumers import websocket_urlpatterns as control_routes
from webapp.live.consumers import RunConsumer


async def no_such_endpoint(scope, receive, send):
    """ASGI app for an unmatched WebSocket path: a 404 through the denial-response extension, else a refusal."""
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": 404,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")]})
        await send({"type": "websocket.http.response.body", "body": b"no WebSocket endpoint at this path\n"})
    else:
        await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake is refused (403)


websocket_urlpatterns = [
    re_path(rf"^ws/runs/(?P<run_id>{contract.RUN_ID_PATTERN.strip('^$')})/$", RunConsumer.as_asgi()),
    *control_routes,  # the operator panel
    re_path(r"", no_such_endpoint),
]
