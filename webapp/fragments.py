"""A piece of a page rendered for a script to put in place (static/js/plotkit.js Obs.refreshFragment).

The answer carries an ETag (a hash of its bytes: weak, as the same piece may travel gzipped or not) and
`Cache-Control: no-cache`: the browser keeps the piece and asks again with If-None-Match, and a poll that finds
nothing changed is answered 304 with no body; the script then leaves the page alone. A piece goes gzipped to a
browser that takes it (HTML is wordier than the JSON it replaces; nothing here compresses responses otherwise), and
holds no secret (no CSRF token), so compressing it beside text a user wrote gives nothing away. The piece is
rendered to be hashed, so a 304 saves the bytes and the page's work, not the query: keep what a fragment renders
cheap.
"""

from __future__ import annotations

import hashlib

from django.http import HttpResponse
from django.template.loader import render_to_string
from django.utils.cache import get_conditional_response, patch_vary_headers
from django.utils.text import compress_string

GZIP_FROM_BYTES = 512  # smaller pieces go as they are


def fragment(request, template: str, context: dict) -> HttpResponse:
    body = render_to_string(template, context, request).encode()
    etag = 'W/"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'
    resp = get_conditional_response(request, etag=etag)
    if resp is None:
        resp = HttpResponse(body, content_type="text/html; charset=utf-8")
        if len(body) >= GZIP_FROM_BYTES and "gzip" in request.headers.get("Accept-Encoding", ""):
            resp.content = compress_string(body)
            resp["Content-Encoding"] = "gzip"
    resp["ETag"] = etag
    resp["Cache-Control"] = "no-cache"
    patch_vary_headers(resp, ("Accept-Encoding",))
    return resp
