"""OpenAPI fragment: reports (webapp/reports/api.py; written through the site's editor, read here)."""

from __future__ import annotations

from webapp.publicapi.spec import LIMIT_CURSOR, NEXT, NULLABLE_STR, PK, RUN_ID, array, int_query, obj, op

STR = {"type": "string"}
AUTHOR = {"type": ["object", "null"], "properties": {"id": {"type": "integer"}, "name": STR}}
SUMMARY = obj({"id": {"type": "integer"}, "title": STR, "author": AUTHOR, "published_at": NULLABLE_STR,
               "edited_at": NULLABLE_STR, "url": STR})
PART = obj({"kind": {"type": "string", "enum": ["markdown", "chart", "annotation", "anomaly", "forecast", "compare"]}},
           description="`markdown`: `html` (sanitised); `chart`: run, series, start, end (null: open); `annotation` / "
                       "`anomaly`: id, run; `forecast`: run; `compare`: runs, series, start, end")
REPORT = obj({"id": {"type": "integer"}, "title": STR, "author": AUTHOR, "body": STR, "body_html": STR,
              "parts": array(PART), "published_at": NULLABLE_STR, "draft": {"type": "boolean"},
              "runs": array(STR), "created_at": STR, "edited_at": NULLABLE_STR, "url": STR})
LIST = [int_query("limit", 1, 100, "default 100"), *LIMIT_CURSOR]

PATHS = {
    "/reports/": {"get": op("Published reports, newest first (paginated)", "reports",
                            obj({"reports": array(SUMMARY), "next": NEXT}), params=LIST, errors=(400,))},
    "/reports/{pk}/": {"get": op("One report: Markdown source, its parts (sanitised HTML and blocks), cited runs",
                                 "reports", REPORT, params=[PK], errors=(404,),
                                 description="Drafts and hidden reports answer 404 to all but their author "
                                             "(and moderators, for hidden ones).")},
    "/reports/{pk}/revisions/": {"get": op("A report's edit history, oldest first", "reports",
                                           obj({"report": {"type": "integer"}, "revisions": array(obj(
                                               {"id": {"type": "integer"}, "title": STR, "body": STR,
                                                "written_at": STR, "replaced_at": STR}))}),
                                           params=[PK], errors=(404,))},
    "/runs/{run_id}/reports/": {"get": op("Published reports that cite a run (a block names it)", "reports",
                                          obj({"run": STR, "reports": array(SUMMARY), "next": NEXT}),
                                          params=[RUN_ID, *LIST], errors=(400, 404))},
}
