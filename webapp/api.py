"""Small helpers shared by the JSON API views: errors as JSON, GET-only, typed query parameters."""

from __future__ import annotations

import functools
import hashlib
import json

from asgiref.sync import sync_to_async
from django.http import HttpResponseNotModified, JsonResponse, StreamingHttpResponse

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
    """A request's JSON object body: 413 past `max_bytes`, 400 for anything but a JSON object of well-formed text."""
    if len(request.body) > max_bytes:
        raise ApiError(413, f"body larger than {max_bytes} bytes")
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        raise ApiError(400, "body must be a JSON object") from None
    if not isinstance(data, dict):
        raise ApiError(400, "body must be a JSON object")
    well_formed(data)
    return data


def _bad_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def malformed_text(obj, path: str = "") -> str | None:
    """The path (`a.b[2]`) of the first string, or object key, in decoded JSON that is not well-formed Unicode (a lone
    UTF-16 surrogate: JSON's `\\ud800` escape decodes to one, and nothing downstream can encode it); None if all are.
    Iterative, so depth is bounded by the decoder alone."""
    stack = [(obj, path)]
    while stack:
        val, at = stack.pop()
        if isinstance(val, str):
            if _bad_text(val):
                return at or "body"
        elif isinstance(val, dict):
            if any(isinstance(k, str) and _bad_text(k) for k in val):
                return at or "body"
            stack.extend(reversed([(v, f"{at}.{k}" if at else str(k)) for k, v in val.items()]))
        elif isinstance(val, list):
            stack.extend(reversed([(v, f"{at}[{i}]") for i, v in enumerate(val)]))
    return None


def well_formed(obj, path: str = "") -> None:
    """ApiError 400 naming the field (`field`) unless every string in `obj` is well-formed Unicode."""
    bad = malformed_text(obj, path)
    if bad is not None:
        bad = bad[:200]
        raise ApiError(400, f"{bad} is not well-formed text (a lone UTF-16 surrogate)", field=bad)


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


_END = object()


class StreamedResponse(StreamingHttpResponse):
    """A streamed answer from a sync generator (its rows read from the database) that streams under ASGI too:
    Django's own answer to a sync iterator there is to read it whole into a list before the first byte (a 500k-point
    export held in memory at once); this one reads it a chunk at a time, each in the request's sync thread."""

    async def __aiter__(self):
        parts = iter(self.streaming_content)
        step = sync_to_async(next, thread_sensitive=True)
        while (part := await step(parts, _END)) is not _END:
            yield part
