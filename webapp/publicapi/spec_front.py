"""OpenAPI fragment: what the front page refreshes from (webapp/front/views.py: front_api)."""

from __future__ import annotations

from webapp.publicapi.spec import array, obj, op

STR = {"type": "string"}
INT = {"type": "integer"}
MOMENT = obj({"kind": STR, "id": STR, "run_id": STR, "step": INT, "title": STR, "url": STR},
             {"run_name": STR, "from": INT, "to": INT, "detail": STR, "count": {"type": ["integer", "null"]},
              "t": STR},
             description="A notable moment: an anomaly, an annotation with its reply count, an operator's "
                         "intervention with its reason; `url` opens the run's chart at that step")
FEATURED = {"type": ["object", "null"], "description": "The featured run (a live run still heard from, else the "
                                                       "newest): its summary, progress and dashboard url"}
PATHS = {
    "/front/": {"get": op("What is happening now: the featured run, the latest moments across runs, experiments",
                          "runs", obj({"featured": FEATURED, "moments": array(MOMENT),
                                       "experiments": array({"type": "object"})}), errors=())},
}
