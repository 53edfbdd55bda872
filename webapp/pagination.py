"""Keyset pagination for the JSON API's lists: `?limit=&cursor=`, answered with a `next` link.

The cursor is opaque to clients (URL-safe base64 of the last row's ordering values); a page is one indexed range
read (WHERE (a, b) after the cursor ORDER BY a, b LIMIT n+1), so deep pages cost what the first one does.
A request without `cursor` gets the first page exactly as before pagination existed; `next` is null on the last.
"""

from __future__ import annotations

import base64
import json

from django.db.models import Q
from django.http import QueryDict

from webapp.api import ApiError, int_param


def _encode(values: list) -> str:
    raw = json.dumps([v.isoformat() if hasattr(v, "isoformat") else v for v in values], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(cursor: str, n: int) -> list:
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, UnicodeDecodeError):
        values = None
    if not isinstance(values, list) or len(values) != n or not all(
            isinstance(v, (int, str)) and not isinstance(v, bool) for v in values):
        raise ApiError(400, "parameter 'cursor' is not a cursor this list handed out", parameter="cursor")
    return values


def after_cursor(qs, order: list[str], values: list) -> Q:
    """Rows strictly after `values` in `order` ("-field" descending): (a > x) | (a = x & b > y) | ..."""
    cond, equal = Q(), Q()
    for field, raw in zip(order, values):
        name = field.lstrip("-")
        try:
            value = qs.model._meta.get_field(name).to_python(raw)
        except Exception:  # noqa: BLE001  (ValidationError, OverflowError: a forged cursor)
            raise ApiError(400, "parameter 'cursor' is not a cursor this list handed out", parameter="cursor") from None
        cond |= equal & Q(**{f"{name}__{'lt' if field.startswith('-') else 'gt'}": value})
        equal &= Q(**{name: value})
    return cond


def page(request, qs, order: list[str], default: int, maximum: int, limit_param: int | None = None):
    """(rows of this page, the `next` URL or None). `order` must end in a unique field (the pk)."""
    limit = limit_param if limit_param is not None else int_param(request, "limit", default, lo=1, hi=maximum)
    cursor = request.GET.get("cursor")
    qs = qs.order_by(*order)
    if cursor:
        qs = qs.filter(after_cursor(qs, order, _decode(cursor, len(order))))
    rows = list(qs[: limit + 1])
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    last = rows[-1]
    params = QueryDict(mutable=True)
    params.update(request.GET)
    params["cursor"] = _encode([getattr(last, f.lstrip("-")) for f in order])
    params["limit"] = str(limit)
    return rows, f"{request.path}?{params.urlencode()}"
