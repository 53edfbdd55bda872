"""The API's envelope: versioned paths, the version header, one error shape.

* `/api/v1/<route>` is the versioned path of every `/api/<route>` (same views; `/api/<route>` stays as the
  unversioned alias of the current version for existing callers). Another `/api/vN/` answers 404.
* Every `/api/` response carries `API-Version: 1`.
* Every `/api/` error (status >= 400) is JSON `{"error": "<message>", "code": "<slug>", ...}`: views already
  answer `{"error": ...}` (the code is added); Django's own refusals (unknown route, method not allowed, CSRF,
  server error) are rewritten into that shape, keeping their status and headers (Allow, WWW-Authenticate).
"""

from __future__ import annotations

import json
import re

from django.http import JsonResponse

API_VERSION = "1"
_VERSIONED = re.compile(r"^/api/v(\d+)(/.*)?$")
CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
         409: "conflict", 410: "gone", 413: "too_large", 415: "unsupported_media_type", 429: "rate_limited",
         500: "server_error", 502: "bad_gateway", 503: "unavailable"}
_KEEP = ("Allow", "WWW-Authenticate", "Retry-After", "Vary")


def code_for(status: int) -> str:
    return CODES.get(status, "client_error" if status < 500 else "server_error")


def error_response(status: int, message: str, **extra) -> JsonResponse:
    resp = JsonResponse({"error": message, "code": code_for(status), **extra}, status=status)
    resp["API-Version"] = API_VERSION
    return resp


def _message(request, resp) -> str:
    if resp.status_code == 404:
        return f"no API route {request.path!r}"
    if resp.status_code == 405:
        return f"method {request.method} not allowed"
    if resp.status_code == 403:
        return "forbidden (a session POST needs its CSRF token)" if "CSRF" in _text(resp) else "forbidden"
    return resp.reason_phrase.lower()


def _text(resp) -> str:
    return "" if resp.streaming else resp.content[:4096].decode("utf-8", "replace")


def _shaped(request, resp):
    if resp.streaming:
        return resp
    if resp.get("Content-Type", "").startswith("application/json"):
        try:
            body = json.loads(resp.content or b"null")
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            if "code" not in body:
                body["code"] = code_for(resp.status_code)
                resp.content = json.dumps(body).encode()
                if resp.has_header("Content-Length"):  # (set by CommonMiddleware, inside: else the body is cut)
                    resp["Content-Length"] = str(len(resp.content))
            return resp
    out = error_response(resp.status_code, _message(request, resp))
    for h in _KEEP:
        if h in resp:
            out[h] = resp[h]
    return out


class ApiMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path_info
        if not path.startswith("/api"):
            return self.get_response(request)
        m = _VERSIONED.match(path)
        if m:
            if m.group(1) != API_VERSION:
                return error_response(404, f"API version {m.group(1)} is not served here; use /api/v{API_VERSION}/")
            request.path_info = "/api" + (m.group(2) or "/")
        elif not path.startswith("/api/"):
            return self.get_response(request)
        resp = self.get_response(request)
        if resp.status_code >= 400:
            resp = _shaped(request, resp)
        resp["API-Version"] = API_VERSION
        return resp
