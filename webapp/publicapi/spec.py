"""Builders for the OpenAPI document (openapi.py assembles it from the spec_* fragments).

Each fragment is a dict {path: {method: operation}}, paths relative to the server URL `/api/v1` (the same
routes answer under `/api/` too). Response bodies are described loosely (the keys clients rely on, with their
types; extra keys allowed), which is what schemathesis checks the live answers against.
"""

from __future__ import annotations

from observatory import contract

NULLABLE_INT = {"type": ["integer", "null"]}
NULLABLE_STR = {"type": ["string", "null"]}
NEXT = {"type": ["string", "null"], "description": "URL of the next page (same query, `cursor` set); null on the last"}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: dict | None = None, optional: dict | None = None, **kw) -> dict:
    required, optional = required or {}, optional or {}
    out = {"type": "object", "properties": {**required, **optional}, **kw}
    if required:
        out["required"] = list(required)
    return out


def array(items: dict) -> dict:
    return {"type": "array", "items": items}


STATUS_TEXT = {200: "OK", 201: "Created", 202: "Accepted", 304: "Not modified (If-None-Match held the ETag)",
               400: "Bad parameter or body", 401: "Sign in (or a write token) required",
               403: "Forbidden for your role (or a session write without its CSRF token)",
               404: "No such run / resource / route", 405: "Method not allowed", 409: "Conflict",
               413: "Body too large", 429: "Rate limited", 503: "Unavailable"}

# a path parameter every run route has, with an example the fuzz test's fixture creates
RUN_ID = {"name": "run_id", "in": "path", "required": True, "example": "api-fuzz-run",
          "schema": {"type": "string", "pattern": contract.RUN_ID_PATTERN}}
PK = {"name": "pk", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1,
                                                              "maximum": 2**62}}


def query(name: str, schema: dict, description: str = "", example=None) -> dict:
    out = {"name": name, "in": "query", "required": False, "schema": schema, "description": description}
    if example is not None:
        out["example"] = example
    return out


def int_query(name: str, lo: int, hi: int, description: str = "") -> dict:
    return query(name, {"type": "integer", "minimum": lo, "maximum": hi}, description)


LIMIT_CURSOR = [query("cursor", {"type": "string"}, "opaque cursor from a previous answer's `next`")]


def op(summary: str, tag: str, ok: dict | None = None, *, params=(), status: int = 200, errors=(400, 404),
       body: dict | None = None, description: str = "", security: bool = False, content: dict | None = None,
       extra_ok: dict | None = None) -> dict:
    """One operation. `ok`: the JSON schema of the success body (or `content` for non-JSON media types)."""
    responses = {str(status): {"description": STATUS_TEXT.get(status, "OK"),
                               "content": content or {"application/json": {"schema": ok or obj()}}}}
    for code, schema in (extra_ok or {}).items():
        responses[str(code)] = {"description": STATUS_TEXT.get(code, "OK"),
                                "content": {"application/json": {"schema": schema}}}
    for code in errors:
        responses[str(code)] = {"description": STATUS_TEXT[code], "content": {"application/json": {
            "schema": ref("Error")}}}
    out = {"summary": summary, "tags": [tag], "parameters": list(params), "responses": responses}
    if description:
        out["description"] = description
    if body is not None:
        out["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if security:
        out["security"] = [{"session": []}]
    return out


def write(summary: str, tag: str, ok: dict | None = None, *, status: int = 200, errors=(400, 404),
          **kw) -> dict:
    """A write: session (with CSRF token) of a role the matrix allows; anonymous 401, others 403."""
    return op(summary, tag, ok, status=status, errors=tuple(sorted({*errors, 401, 403, 405, 413, 429})),
              security=True, **kw)
