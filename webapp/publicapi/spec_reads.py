"""OpenAPI fragment: the public reads (runs, series, anomalies, compare, forecast, events, exports)."""

from __future__ import annotations

from webapp.publicapi.spec import (LIMIT_CURSOR, NEXT, NULLABLE_INT, NULLABLE_STR, RUN_ID, array, int_query, obj,
                                   op, query, ref)

SERIES_NAME = {"name": "name", "in": "path", "required": True, "example": "train/loss",
               "schema": {"type": "string", "minLength": 1}, "description": "metric name; may contain `/`"}
STEPS = [int_query("start", 0, 2**62, "first step (default: the series' first)"),
         int_query("end", 0, 2**62, "last step (default: the series' last)")]
POINTS = int_query("points", 10, 20_000, "at most this many points, min/max downsampled (spikes kept)")
SERIES_PARAM = query("series", {"type": "string"}, "series names, comma-separated or repeated (default: all)",
                     example="train/loss")
NONFINITE = ("Non-finite values: Parquet keeps IEEE NaN/±Inf; CSV and JSON write the strings `NaN`, `Infinity`, "
             "`-Infinity`.")

SCHEMAS = {
    "RunSummary": obj({"id": {"type": "string"}, "name": {"type": "string"}, "state": {"type": "string"},
                       "health": {"type": "string"}, "last_step": NULLABLE_INT, "updated_at": NULLABLE_STR,
                       "source": {"type": "string"}}, {"progress": {"type": "object"}}),
    "Event": obj({"id": {"type": "integer"}, "kind": {"type": "string"}, "name": {"type": "string"},
                  "step": NULLABLE_INT, "payload": {}, "t": NULLABLE_STR}),
    "SeriesInfo": obj({"name": {"type": "string"}, "count": {"type": "integer"}, "first_step": NULLABLE_INT,
                       "last_step": NULLABLE_INT}),
    "Anomaly": obj({"id": {"type": "integer"}, "kind": {"type": "string"}, "metric": {"type": "string"},
                    "start_step": {"type": "integer"}, "severity": {"type": "string"}, "status": {"type": "string"},
                    "superseded": {"type": "boolean"}}),
}

CACHE_NOTE = ("Strong `ETag` on every answer (304 on `If-None-Match`). A finished run's (stopped/failed) window "
              "is history that cannot change: `Cache-Control: public, max-age=600`; a live run's: `no-cache`.")

PATHS = {
    "/runs/": {"get": op("List runs, newest activity first", "runs", obj(
        {"runs": array(ref("RunSummary")), "next": NEXT}), params=[int_query("limit", 1, 1000, "default 200"),
                                                                   *LIMIT_CURSOR], errors=(400,))},
    "/runs/{run_id}/": {"get": op("One run: its record and its latest 200 events", "runs", obj(
        {"id": {"type": "string"}, "events": array(ref("Event")), "full_detail": {"type": "boolean"},
         "config": {}, "summary": {}, "manifest": {}, "last_event_id": {"type": "integer"}}), params=[RUN_ID],
        errors=(404,))},
    "/runs/{run_id}/events/": {"get": op("A run's event log, oldest first (paginated)", "runs", obj(
        {"run_id": {"type": "string"}, "events": array(ref("Event")), "next": NEXT}),
        params=[RUN_ID, int_query("limit", 1, 1000, "default 200"), *LIMIT_CURSOR])},
    "/runs/{run_id}/metrics/": {"get": op("A run's series", "series", obj(
        {"run_id": {"type": "string"}, "metrics": array(ref("SeriesInfo"))}), params=[RUN_ID], errors=(404,))},
    "/runs/{run_id}/metrics/{name}/": {"get": op(
        "A series window, downsampled to at most `points`", "series", obj(
            {"run_id": {"type": "string"}, "metric": {"type": "string"}, "steps": array({"type": "integer"}),
             "values": array({"type": ["number", "null"]}), "exact": {"type": "boolean"},
             "count": {"type": "integer"}, "nonfinite": array(array({})), "level": {"type": "integer"},
             "bucket_steps": {"type": "integer"}, "start": NULLABLE_INT, "end": NULLABLE_INT}),
        params=[RUN_ID, SERIES_NAME, *STEPS, POINTS], description=CACHE_NOTE,
        extra_ok={304: obj()})},
    "/runs/{run_id}/windows/": {"get": op(
        "The same step window of several series at once (what a zoom reads)", "series", obj(
            {"run_id": {"type": "string"}, "points": {"type": "integer"},
             "windows": {"type": "object", "additionalProperties": {"type": ["object", "null"]},
                         "description": "series name -> the window /metrics/{name}/ answers (null: no such series)"}}),
        params=[RUN_ID, {**query("series", {"type": "string", "minLength": 1},
                                 "series names, comma-separated or repeated (at most 32)", example="train/loss"),
                         "required": True}, *STEPS, POINTS],
        description=CACHE_NOTE, extra_ok={304: obj()})},
    "/runs/{run_id}/anomalies/": {"get": op("A run's anomaly log, newest episode first (paginated)", "anomalies",
        obj({"run_id": {"type": "string"}, "count": {"type": "integer"}, "anomalies": array(ref("Anomaly")),
             "next": NEXT, "filters": {"type": "object"}}),
        params=[RUN_ID, query("kind", {"type": "string", "pattern": "^[a-z_]{1,40}$"}),
                query("severity", {"type": "string", "enum": ["info", "warning", "critical"]}),
                query("status", {"type": "string"}), query("superseded", {"type": "string", "enum": ["0", "1"]}),
                int_query("limit", 1, 5000, "default 500"), *LIMIT_CURSOR])},
    "/runs/{run_id}/interventions/": {"get": op("Operator interventions on a run (public view)", "control", obj(
        {"run_id": {"type": "string"}, "interventions": array({"type": "object"})}), params=[RUN_ID],
        errors=(404,))},
    "/runs/{run_id}/forecast/": {"get": op("A run's pre-registered forecast, and whether it verifies", "runs", obj(
        {"run_id": {"type": "string"}, "verified": {"type": "boolean"}}), params=[RUN_ID], errors=(404,))},
    "/compare/": {"get": op("Several runs' series and x axes, for the compare view", "series", obj(
        {"runs": array(ref("RunSummary")), "tokens_metric": {"type": "string"}}),
        params=[query("runs", {"type": "string"}, "run ids, comma-separated (at most 12)", example="api-fuzz-run")])},
    "/runs/{run_id}/records.json": {"get": op(
        "Export a run's record, events, anomalies and annotations (streamed JSON)", "exports", obj(
            {"run": {"type": "object"}, "events": array(ref("Event")), "anomalies": array(ref("Anomaly")),
             "annotations": array({"type": "object"})}), params=[RUN_ID], errors=(404, 429))},
    "/schema/": {"get": op("This OpenAPI document", "meta", obj({"openapi": {"type": "string"}}), errors=())},
    "/docs/": {"get": op("The browsable API reference (HTML)", "meta", content={"text/html": {"schema": {
        "type": "string"}}}, errors=())},
}

_EXPORT_DOC = ("Rows (series, step, value) in step order, series by series; streamed with bounded memory "
               "(keyset reads of 10k points). Full resolution unless `points` is given. " + NONFINITE +
               " At most 1,000,000 points per request: a longer range is cut, and `Link: <...>; rel=\"next\"` "
               "(JSON: `next`) and `Export-Next-Start` give the rest. 60 export requests a minute per user or "
               "address (429 past it).")
for _fmt, _media, _schema in (
        ("csv", "text/csv", {"type": "string"}),
        ("json", "application/json", obj({"run_id": {"type": "string"}, "resolution": {"type": "string"},
                                          "series": array(obj({"name": {"type": "string"},
                                                               "points": array(array({}))}))})),
        ("parquet", "application/vnd.apache.parquet", {"type": "string", "format": "binary"})):
    PATHS[f"/runs/{{run_id}}/export.{_fmt}"] = {"get": op(
        f"Export series as {_fmt.upper()}", "exports", params=[RUN_ID, SERIES_PARAM, *STEPS, POINTS],
        description=_EXPORT_DOC, content={_media: {"schema": _schema}}, errors=(400, 404, 429))}
