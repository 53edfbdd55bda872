"""The OpenAPI 3.1 document of the public JSON API, assembled once from the spec_* fragments.

Views are plain Django views (today's response shapes and speed); this document describes them. A test
(tests/web/publicapi/test_schema.py) fails when a routed `/api/` pattern is missing here, and schemathesis
checks the live answers against it.
"""

from __future__ import annotations

import functools

from webapp.publicapi import spec_front, spec_reads, spec_reports, spec_writes
from webapp.publicapi.middleware import API_VERSION
from webapp.publicapi.spec import obj

DESCRIPTION = """The public API of Observatory, a live training observatory (docs/API.md).

* **Versioning**: every route is served under `/api/v1/` (this document's server) and, as an alias of the
  current version, under `/api/`. Every answer carries `API-Version: 1`.
* **Errors**: always JSON `{"error": "<message>", "code": "<slug>"}` with the HTTP status (slugs: bad_request,
  unauthorized, forbidden, not_found, method_not_allowed, conflict, too_large, rate_limited, server_error);
  some add context (`parameter`, `action`, `missing`).
* **Pagination**: lists take `?limit=&cursor=` and answer `next` (a URL, or null on the last page).
* **Caching**: series windows carry a strong ETag; a finished run's are `public, max-age=600`.
* **Auth**: reads are public. Writes need a session (and its CSRF token) of a role the authorization matrix allows;
  the telemetry intake takes a write token (`Authorization: Bearer`).
"""


@functools.cache
def document() -> dict:
    paths: dict = {}
    for fragment in (spec_reads.PATHS, spec_writes.PATHS, spec_reports.PATHS, spec_front.PATHS):
        for path, ops in fragment.items():
            paths.setdefault(path, {}).update(ops)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Observatory API", "version": API_VERSION, "description": DESCRIPTION},
        "servers": [{"url": f"/api/v{API_VERSION}"}],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": {"Error": obj({"error": {"type": "string"}, "code": {"type": "string"}}),
                        **spec_reads.SCHEMAS},
            "securitySchemes": {"session": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
                                "writeToken": {"type": "http", "scheme": "bearer"}},
        },
    }
