"""Streamed exports of a run's series: CSV, JSON or Parquet, full resolution or downsampled, memory bounded by one
chunk. Paging past MAX_POINTS and non-finite values: docs/API.md "Exports in detail".
"""

from __future__ import annotations

import csv
import io
import json
import math

from django.db import connection
from django.http import QueryDict

from observatory.downsample import FINITE, NAN, POSINF
from webapp.api import ApiError, StreamedResponse, int_param
from webapp.metrics import queries
from webapp.metrics.models import Point, Series
from webapp.public import absolute

CHUNK = 10_000  # rows per keyset page (and per Parquet row group)
MAX_POINTS = 1_000_000  # points per export request (all series together); the rest is the next page
MAX_STEP = 2**62
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json",
                 "parquet": "application/vnd.apache.parquet"}
NONFINITE_JSON = {"NaN": '"NaN"', "Infinity": '"Infinity"', "-Infinity": '"-Infinity"'}


def _special_float(special: int) -> float:
    return math.nan if special == NAN else (math.inf if special == POSINF else -math.inf)


def _text(v: float) -> str | float:
    """A value as CSV/JSON carry it: finite floats as the shortest repr that round-trips, else the string."""
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def _raw_chunks(series: Series, start: int, end: int):
    """[(step, value)] pages of CHUNK rows, in step order: WHERE step > last ORDER BY step LIMIT CHUNK."""
    qn = connection.ops.quote_name
    sql = (f"SELECT {qn('step')}, {qn('value')}, {qn('special')} FROM {qn(Point._meta.db_table)} "
           f"WHERE {qn('series_id')} = %s AND {qn('step')} > %s AND {qn('step')} <= %s "
           f"ORDER BY {qn('step')} LIMIT {CHUNK}")
    after = start - 1
    while True:
        with connection.cursor() as cur:
            cur.execute(sql, [series.id, after, end])
            rows = cur.fetchall()
        if not rows:
            return
        yield [(s, v if sp == FINITE else _special_float(sp)) for s, v, sp in rows]
        if len(rows) < CHUNK:
            return
        after = rows[-1][0]


def _downsampled(series: Series, start: int, end: int, points: int):
    win = queries.window(series, start, end, points).window
    by_step = {s: v for s, v in zip(win.steps, win.values) if v is not None}
    inf = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
    by_step.update((s, inf[name]) for s, name in win.nonfinite)
    rows = sorted(by_step.items())
    for i in range(0, len(rows), CHUNK):
        yield rows[i:i + CHUNK]


def _longest_span(counts: list[int], budget: int) -> int:
    """The most steps a page may span so that sum(min(count, span)) <= budget (0 if even one step would not)."""
    lo, hi = 0, budget
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(c, mid) for c in counts) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


class Plan:
    """What one export request asks for, validated: the run, its series, the step range, the resolution."""

    def __init__(self, request, run):
        self.run = run
        self.start = int_param(request, "start", 0, lo=0, hi=MAX_STEP)
        self.end = int_param(request, "end", MAX_STEP, lo=0, hi=MAX_STEP)
        if self.start > self.end:
            raise ApiError(400, "parameter 'end' must be >= start", parameter="end")
        self.points = int_param(request, "points", None, lo=queries.MIN_POINTS, hi=queries.MAX_POINTS)
        every = {s.name: s for s in Series.objects.filter(run=run).order_by("name")}
        wanted = [n for raw in request.GET.getlist("series")
                  for n in ([raw] if raw in every else [p for p in raw.split(",") if p])]
        missing = [n for n in wanted if n not in every]
        if missing:
            raise ApiError(404, f"no series {', '.join(map(repr, missing))} in run {run.id!r}", parameter="series",
                           missing=missing)
        self.series = [every[n] for n in dict.fromkeys(wanted)] if wanted else list(every.values())
        self.next_start = self._bound()
        self.next = self._next_url(request)  # the rest of the range asked for, or None

    def _bound(self) -> int | None:
        """Cut the range so that the answer holds at most MAX_POINTS points; the next page's start, or None."""
        if self.points is not None:
            if self.points * len(self.series) > MAX_POINTS:
                raise ApiError(400, f"points x series must be at most {MAX_POINTS}: ask for fewer series "
                                    "(series=a,b)", parameter="points")
            return None
        live = [s for s in self.series if s.first_step is not None and s.first_step <= self.end
                and s.last_step >= self.start]
        if sum(s.count for s in live) <= MAX_POINTS:
            return None
        span = _longest_span([s.count for s in live], MAX_POINTS)
        if span == 0:
            raise ApiError(400, f"more than {MAX_POINTS} series: ask for fewer (series=a,b)", parameter="series")
        first = max(self.start, min(s.first_step for s in live))
        last = min(self.end, max(s.last_step for s in live))
        if first + span - 1 >= last:
            return None
        self.start, self.end = first, first + span - 1
        return self.end + 1

    def _next_url(self, request) -> str | None:
        if self.next_start is None:
            return None
        params = QueryDict(mutable=True)
        params.update(request.GET)
        params["start"] = str(self.next_start)
        return absolute(request, f"{request.path}?{params.urlencode()}")

    def chunks(self):
        """(series name, [(step, value), ...]) pages, series by series."""
        for s in self.series:
            if s.first_step is None:
                continue
            pages = (_downsampled(s, self.start, self.end, self.points) if self.points
                     else _raw_chunks(s, self.start, self.end))
            for rows in pages:
                yield s.name, rows


def _csv_field(text: str) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([text])  # quoted only when it must be (commas, quotes)
    return buf.getvalue()


def csv_stream(plan: Plan):
    yield b"series,step,value\n"
    for name, rows in plan.chunks():
        field = _csv_field(name)
        yield "".join(f"{field},{s},{repr(v) if math.isfinite(v) else _text(v)}\n" for s, v in rows).encode()


def json_stream(plan: Plan):
    head = {"run_id": plan.run.id, "resolution": "full" if plan.points is None else "downsampled",
            "points": plan.points, "start": plan.start, "end": plan.end, "next": plan.next}
    yield (json.dumps(head)[:-1] + ', "series": [').encode()
    current, first_row = None, True
    for name, rows in plan.chunks():
        parts = []
        if name != current:
            parts.append(("]}, " if current is not None else "") + json.dumps({"name": name})[:-1] + ', "points": [')
            current, first_row = name, True
        body = ", ".join(f"[{s}, {repr(v) if math.isfinite(v) else NONFINITE_JSON[_text(v)]}]" for s, v in rows)
        parts.append(body if first_row else ", " + body)
        first_row = False
        yield "".join(parts).encode()
    yield (("]}" if current is not None else "") + "]}").encode()


class _Sink(io.RawIOBase):
    """A write-only file for ParquetWriter: keeps bytes only until take() hands them on; tell() counts them all."""

    def __init__(self):
        self.parts, self.pos = [], 0

    def writable(self):
        return True

    def write(self, b):
        self.parts.append(bytes(b))
        self.pos += len(b)
        return len(b)

    def tell(self):
        return self.pos

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


def parquet_stream(plan: Plan):
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("series", pa.string()), ("step", pa.int64()), ("value", pa.float64())])
    sink = _Sink()
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    try:
        for name, rows in plan.chunks():
            steps, values = zip(*rows)
            writer.write_table(pa.table({"series": pa.array([name] * len(rows), pa.string()),
                                         "step": pa.array(steps, pa.int64()),
                                         "value": pa.array(values, pa.float64())}, schema=schema))
            data = sink.take()
            if data:
                yield data
    finally:
        writer.close()
    yield sink.take()


STREAMS = {"csv": csv_stream, "json": json_stream, "parquet": parquet_stream}


def response(plan: Plan, fmt: str) -> StreamedResponse:
    resp = StreamedResponse(STREAMS[fmt](plan), content_type=CONTENT_TYPES[fmt])
    kind = "full" if plan.points is None else f"{plan.points}pts"
    resp["Content-Disposition"] = f'attachment; filename="{plan.run.id}-{kind}.{fmt}"'
    resp["Cache-Control"] = "no-cache"
    resp["Export-Max-Points"] = str(MAX_POINTS)
    if plan.next is not None:  # the range was cut: the rest starts at this step
        resp["Link"] = f'<{plan.next}>; rel="next"'
        resp["Export-Next-Start"] = str(plan.next_start)
    return resp
