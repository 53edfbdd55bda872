"""OpenAPI fragment: annotations and their threads, triage, operator control, and the intake."""

from __future__ import annotations

from webapp.annotations.models import TAGS
from webapp.publicapi.spec import LIMIT_CURSOR, NEXT, PK, RUN_ID, array, int_query, obj, op, query, write

ANNOTATION = obj({"id": {"type": "integer"}, "run": {"type": "string"}, "title": {"type": "string"},
                  "tags": array({"type": "string"}), "step_start": {"type": "integer"},
                  "step_end": {"type": "integer"}})
THREAD = obj({"annotation": {"type": "object"}, "replies": array({"type": "object"})})
REACTIONS = obj({"reactions": {"type": "object"}, "mine": array({"type": "string"})})
STR = {"type": "string"}

NEW_ANNOTATION = obj({"title": STR, "step_start": {"type": "integer", "minimum": 0}},
                     {"body": STR, "tags": array(STR), "metric": STR, "step_end": {"type": "integer"},
                      "anomaly": {"type": "integer"}})
EDIT = obj(optional={"title": STR, "body": STR, "tags": array(STR)})
REACT = obj({"kind": STR}, {"on": {"type": "boolean"}})
MODERATE = obj({"action": {"type": "string", "enum": ["hide", "restore"]}, "reason": STR})


def _post_routes(target: str, plural: str) -> dict:
    base = f"/{plural}/{{pk}}/"
    return {
        f"{base}revisions/": {"get": op(f"A {target}'s edit history, oldest first", "annotations",
                                        obj({target: {"type": "integer"}, "revisions": array({"type": "object"})}),
                                        params=[PK], errors=(404,))},
        f"{base}reactions/": {"post": write(f"React to a {target} (`annotation.react`)", "annotations", REACTIONS,
                                            params=[PK], body=REACT, errors=(400, 404, 409))},
        f"{base}moderation/": {"post": write(f"Hide or restore a {target} (`annotation.moderate`)",
                                             "annotations", params=[PK], body=MODERATE, errors=(400, 404, 409))},
    }


PATHS = {
    "/runs/{run_id}/annotations/": {
        "get": op("A run's annotations in step order (paginated; `format=grafana` for Grafana)", "annotations",
                  obj({"run": STR, "annotations": array(ANNOTATION), "next": NEXT, "truncated": {"type": "boolean"}}),
                  params=[RUN_ID, int_query("start", 0, 2**62), int_query("end", 0, 2**62),
                          query("tag", {"type": "string", "enum": list(TAGS)}),
                          query("format", {"type": "string", "enum": ["json"]}),
                          int_query("limit", 1, 2000, "default 2000"), *LIMIT_CURSOR]),
        "post": write("Annotate a step range (`annotation.create`)", "annotations", ANNOTATION, status=201,
                      params=[RUN_ID], body=NEW_ANNOTATION)},
    "/annotations/{pk}/": {
        "get": op("An annotation's thread", "annotations", THREAD, params=[PK], errors=(404,)),
        "patch": write("Edit one's own annotation (`annotation.edit_own`)", "annotations", ANNOTATION, params=[PK],
                       body=EDIT, errors=(400, 404, 409)),
        "delete": write("Delete one's own annotation", "annotations", params=[PK], errors=(404, 409))},
    "/annotations/{pk}/replies/": {
        "get": op("An annotation's replies", "annotations", obj({"annotation": {"type": "integer"},
                                                                 "replies": array({"type": "object"})}),
                  params=[PK], errors=(404,)),
        "post": write("Reply in a thread (`annotation.create`)", "annotations", status=201, params=[PK],
                      body=obj({"body": STR}), errors=(400, 404, 409))},
    "/replies/{pk}/": {
        "patch": write("Edit one's own reply", "annotations", params=[PK], body=obj({"body": STR}),
                       errors=(400, 404, 409)),
        "delete": write("Delete one's own reply", "annotations", params=[PK], errors=(404, 409))},
    **_post_routes("annotation", "annotations"),
    **_post_routes("reply", "replies"),
    "/runs/{run_id}/anomalies/{pk}/": {"post": write(
        "Triage an anomaly (`anomaly.acknowledge`)", "anomalies", params=[RUN_ID, PK],
        body=obj({"action": {"type": "string", "enum": ["acknowledge", "explain", "false_alarm"]}}, {"note": STR}),
        errors=(400, 404, 409))},
    "/operate/": {"get": write("The operator console's snapshot (`run.command`)", "control", errors=())},
    "/runs/{run_id}/commands/": {
        "get": write("A run's command log (`run.command`)", "control", obj({"commands": array({"type": "object"})}),
                     params=[RUN_ID], errors=(404,)),
        "post": write("Send a command to the trainer (`run.command`)", "control", status=202, params=[RUN_ID],
                      body=obj({"command": STR, "id": STR}, {"args": {"type": "object"}, "reason": STR}),
                      errors=(400, 404, 409, 503))},
    "/runs/{run_id}/plan/": {"get": write("Preview a budget change (`run.command`)", "control", params=[
        RUN_ID, int_query("tokens", 1, 2**62)], errors=(400, 404))},
    "/runs/{run_id}/telemetry/": {"post": write(
        "Publish contract messages with a write token (`run.publish`, `Authorization: Bearer`)", "intake",
        obj({"run_id": STR, "accepted": {"type": "integer"}}), status=202, params=[RUN_ID],
        body=obj({"messages": array({"type": "object"})}), errors=(400, 503))},
}
