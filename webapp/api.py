"""Small helpers shared by the JSON API views: errors as JSON, GET-only, typed query parameters."""

from __future__ import annotations

import functools
import hashlib
import json

from django.http import HttpResponseNotModified, JsonResponse

HISTORY_MAX_AGE_S = 600  # how long a CDN or browser may serve a finished run's history window unasked


class ApiError(Exception):
    def __init__(self, status: int, message: str, **extra):
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


def found(obj, message: str, **extra):
    """`obj`, unless it is None: then ApiError 404 with `message` (the API's one "not found" answer)."""
    if obj is None:
        raise ApiError(404, message, **extra)
    return obj


def api_view(view):
    """GET/HEAD only; ApiError -> {"error": message} with its status; public, read-only, cacheable briefly."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.method not in ("GET", "HEAD"):
            resp = JsonResponse({"error": f"method {request.method} not allowed"}, status=405)
            resp["Allow"] = "GET, HEAD"
            return resp
        try:
            return view(request, *args, **kwargs)
        except ApiError as e:
            return JsonResponse({"error": e.message, **e.extra}, status=e.status)

    return wrapper


def int_param(request, name: str, default: int | None, lo: int | None = None, hi: int | None = None) -> int | None:
    raw = request.GET.get(name)
    if raw is None or raw == "":
        return default
    try:
        val = int(raw)
    except ValueError:
        raise ApiError(400, f"parameter '{name}' must be an integer", parameter=name) from None
    if (lo is not None and val < lo) or (hi is not None and val > hi):
        bounds = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise ApiError(400, f"parameter '{name}' must be {bounds}", parameter=name)
    return val


def json_body(request, max_bytes: int) -> dict:
    """A request's JSON object body: 413 past `max_bytes`, 400 for anything but a JSON object."""
    if len(request.body) > max_bytes:
        raise ApiError(413, f"body larger than {max_bytes} bytes")
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        raise ApiError(400, "body must be a JSON object") from None
    if not isinstance(data, dict):
        raise ApiError(400, "body must be a JSON object")
    return data


def cached(request, resp, immutable: bool):
    """A strong ETag (hash of the body) on a GET answer; 304 when If-None-Match holds it. `immutable` (history
    that can no longer change): `public, max-age`, so a CDN serves it; otherwise `no-cache` (revalidate)."""
    etag = '"' + hashlib.blake2b(resp.content, digest_size=16).hexdigest() + '"'
    cache = f"public, max-age={HISTORY_MAX_AGE_S}" if immutable else "no-cache"
    tags = [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]
    if etag in tags or "*" in tags:
        resp = HttpResponseNotModified()
    resp["ETag"], resp["Cache-Control"] = etag, cache
    return resp
