"""A piece of a page rendered for a script to put in place (static/js/plotkit.js Obs.refreshFragment).

The answer carries a strong ETag (a hash of its bytes) and `Cache-Control: no-cache`: the browser keeps the piece
and asks again with If-None-Match, and a poll that finds nothing changed is answered 304 with no body; the script
then leaves the page alone. The piece is rendered to be hashed, so a 304 saves the bytes and the page's work, not
the query; keep what a fragment renders cheap.
"""

from __future__ import annotations

import hashlib

from django.http import HttpResponse
from django.template.loader import render_to_string
from django.utils.cache import get_conditional_response


def fragment(request, template: str, context: dict) -> HttpResponse:
    body = render_to_string(template, context, request).encode()
    etag = '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'
    resp = get_conditional_response(request, etag=etag)
    if resp is None:
        resp = HttpResponse(body, content_type="text/html; charset=utf-8")
    resp["ETag"] = etag
    resp["Cache-Control"] = "no-cache"
    return resp
