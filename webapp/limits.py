"""Request limits that hold in every mode, before any view runs.

* `RequestLimitsMiddleware` (Django): more query or form fields than DATA_UPLOAD_MAX_NUMBER_FIELDS -> 400, a body
  over DATA_UPLOAD_MAX_MEMORY_SIZE -> 413. Django raises these lazily, where a view first reads the fields, and
  its debug page (OBS_DEBUG, `make run`) reads them again and answers 500; here they are read once, up front.
* `BodyLimits` (ASGI, around Django in webapp.asgi): a declared or streamed body over that size is refused with 413
  before Django spools it, and a body that does not arrive within OBS_BODY_TIMEOUT_S is answered 408; both close
  the connection. Slow request headers are the server's to time out (webapp.serving).
"""

from __future__ import annotations

import asyncio
import json
import time

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpResponse, JsonResponse

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _refusal(request, status: int, message: str) -> HttpResponse:
    if request.path.startswith("/api"):
        return JsonResponse({"error": message}, status=status)
    return HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")


def _declared_length(request) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


class RequestLimitsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        most = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if most is not None and _declared_length(request) > most:
            return _refusal(request, 413, f"request body larger than {most} bytes")
        try:
            request.GET  # noqa: B018 (parsed here, once)
            if request.method == "POST" and request.content_type in FORM_TYPES:
                request.POST  # noqa: B018
        except (TooManyFieldsSent, TooManyFilesSent):
            return _refusal(request, 400, f"too many fields: at most {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} query "
                                          "or form parameters per request")
        except RequestDataTooBig:
            return _refusal(request, 413, f"request body larger than {most} bytes")
        return self.get_response(request)


class BodyLimits:
    """ASGI middleware for HTTP: the request body within `max_bytes` and `timeout_s` (from the first read)."""

    def __init__(self, app, max_bytes: int | None = None, timeout_s: float | None = None):
        self.app = app
        self.max_bytes = settings.DATA_UPLOAD_MAX_MEMORY_SIZE if max_bytes is None else max_bytes
        self.timeout_s = settings.OBS_BODY_TIMEOUT_S if timeout_s is None else timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if declared.isdigit() and self.max_bytes is not None and int(declared) > self.max_bytes:
            return await _answer(send, 413, f"request body larger than {self.max_bytes} bytes")
        state = {"done": False, "refused": None, "got": 0, "started": False}
        deadline = time.monotonic() + self.timeout_s

        async def limited_receive():
            if state["done"]:
                return await receive()  # after the body: Django listens for the disconnect, unbounded
            try:
                msg = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                state["refused"] = (408, f"request body not received within {self.timeout_s:g} s")
                return {"type": "http.disconnect"}
            if msg["type"] == "http.request":
                state["got"] += len(msg.get("body", b""))
                if self.max_bytes is not None and state["got"] > self.max_bytes:
                    state["refused"] = (413, f"request body larger than {self.max_bytes} bytes")
                    return {"type": "http.disconnect"}
                state["done"] = not msg.get("more_body", False)
            return msg

        async def tracked_send(message):
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await self.app(scope, limited_receive, tracked_send)
        if state["refused"] and not state["started"]:
            await _answer(send, *state["refused"])


async def _answer(send, status: int, message: str) -> None:
    """A JSON error that also closes the connection (the rest of the body is never read)."""
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
