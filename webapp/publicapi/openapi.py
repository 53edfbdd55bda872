"""The OpenAPI 3.1 document of the public JSON API, assembled once from the spec_* fragments.

Views are plain Django views (today's response shapes and speed); this document describes them. A test
(tests/web/publicapi/test_schema.py) fails when a routed `/api/` pattern is missing here, and schemathesis
checks the live answers against it.
"""

from __future__ import annotations

import functools
import json
import re

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


def _resolve(doc: dict, s):
    """A `$ref` ("#/components/schemas/X") followed to what it names; anything else as it is."""
    if isinstance(s, dict) and "$ref" in s:
        out = doc
        for key in s["$ref"].split("/")[1:]:
            out = out[key]
        return out
    return s


def _inline(doc: dict, s):
    """A schema with every `$ref` in it, at any depth, replaced by what it names (for people to read)."""
    s = _resolve(doc, s)
    if isinstance(s, dict):
        return {k: _inline(doc, v) for k, v in s.items()}
    if isinstance(s, list):
        return [_inline(doc, v) for v in s]
    return s


def _schema_text(doc: dict, s) -> str:
    return json.dumps(_inline(doc, s), indent=1, ensure_ascii=False)


def _param(p: dict) -> dict:
    s = p.get("schema", {})
    if "minimum" in s:
        extent = f" [{s['minimum']}, {s.get('maximum')}]"
    elif "enum" in s:
        extent = " ∈ {" + ", ".join(map(str, s["enum"])) + "}"
    else:
        extent = ""
    return {"name": p["name"] + (" *" if p.get("required") else ""), "in": p["in"],
            "type": s.get("type", "") + extent, "description": p.get("description", "")}


def _operation(doc: dict, path: str, method: str, op: dict) -> dict:
    body = (op.get("requestBody") or {}).get("content", {}).get("application/json")
    responses = []
    for code, r in op["responses"].items():
        media, content = next(iter((r.get("content") or {}).items()), ("", {}))
        schema = content.get("schema") if media == "application/json" else None
        responses.append({"code": code, "description": r.get("description", ""), "media": media,
                          "schema": _schema_text(doc, schema) if schema else ""})
    return {"id": re.sub(r"[^A-Za-z0-9]+", "-", f"{method}-{path}"), "method": method,
            "path": doc["servers"][0]["url"] + path, "summary": op.get("summary", ""),
            "description": op.get("description", ""), "params": [_param(p) for p in op.get("parameters", [])],
            "body": _schema_text(doc, body["schema"]) if body else "", "responses": responses}


@functools.cache
def reference() -> dict:
    """The browsable reference's content (/api/docs/): the document's operations grouped by their first tag,
    tags in name order, operations in path order. The template writes it as text (auto-escaped)."""
    doc = document()
    groups: dict[str, list] = {}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            groups.setdefault((op.get("tags") or ["other"])[0], []).append(_operation(doc, path, method, op))
    return {"intro": doc["info"]["description"], "tags": sorted(groups.items())}
