"""Input checks for the annotations API: every field typed, bounded and cleaned, or a 400 that says which."""

from __future__ import annotations


from django.apps import apps
from django.urls import reverse

from observatory import contract
from webapp.annotations import markdown
from webapp.annotations.models import REACTIONS, TAGS, Annotation
from webapp import api
from webapp.api import ApiError
from webapp.metrics.models import Series

MAX_BODY_BYTES = 64 * 1024
MAX_TITLE = 200
MAX_BODY = 10_000  # Markdown characters of an annotation
MAX_REPLY = 5_000
MAX_TAGS = 5
MAX_REASON = 500
EDITABLE = ("title", "body", "tags")  # what an author may change (the step range and metric stay as drawn)
LIMITS = {"title": MAX_TITLE, "body": MAX_BODY, "reply": MAX_REPLY, "tags": MAX_TAGS, "reason": MAX_REASON}


def json_body(request) -> dict:
    return api.json_body(request, MAX_BODY_BYTES)


def text(data: dict, name: str, limit: int, required: bool) -> str:
    val = data.get(name, "")
    if val is None:
        val = ""
    if not isinstance(val, str):
        raise ApiError(400, f"{name} must be a string", field=name)
    val = markdown.clean_text(val).strip()
    if required and not val:
        raise ApiError(400, f"{name} is required", field=name)
    if len(val) > limit:
        raise ApiError(400, f"{name} is longer than {limit} characters", field=name)
    return val


def title(data: dict) -> str:
    return " ".join(text(data, "title", MAX_TITLE, True).split())  # one line


def tags(data: dict) -> list[str]:
    val = data.get("tags", [])
    if val is None:
        return []
    if not isinstance(val, list) or not all(isinstance(t, str) for t in val):
        raise ApiError(400, "tags must be a list of strings", field="tags")
    out = list(dict.fromkeys(val))
    unknown = [t[:40] for t in out if t not in TAGS]
    if unknown:
        raise ApiError(400, f"unknown tags {unknown}; choose from {', '.join(TAGS)}", field="tags")
    if len(out) > MAX_TAGS:
        raise ApiError(400, f"at most {MAX_TAGS} tags", field="tags")
    return out


def _step(val, name: str) -> int:
    if not isinstance(val, int) or isinstance(val, bool):
        raise ApiError(400, f"{name} must be an integer", field=name)
    return val


def step_range(run, data: dict) -> tuple[int, int]:
    """[step_start, step_end] within the steps the run has reached (step_end defaults to step_start)."""
    start = _step(data.get("step_start"), "step_start")
    end = _step(data["step_end"], "step_end") if data.get("step_end") is not None else start
    if run.last_step is None:
        raise ApiError(400, "the run has no steps yet: nothing to annotate", field="step_start")
    if not 0 <= start <= end <= run.last_step:
        raise ApiError(400, f"steps must satisfy 0 <= step_start <= step_end <= {run.last_step} (the run's last "
                       "step)", field="step_start")
    return start, end


def metric(run, data: dict) -> str:
    val = data.get("metric") or ""
    if not isinstance(val, str) or (val and not contract.METRIC_NAME_RE.match(val)):
        raise ApiError(400, "metric must be a series name", field="metric")
    if val and not Series.objects.filter(run=run, name=val).exists():
        raise ApiError(400, f"the run has no series {val!r}", field="metric")
    return val


def anomaly(run, data: dict):
    """The anomaly of this run that `data["anomaly"]` names, or None (also when the anomaly log is not installed)."""
    val = data.get("anomaly")
    if val is None:
        return None
    if not isinstance(val, int) or isinstance(val, bool):
        raise ApiError(400, "anomaly must be an anomaly id", field="anomaly")
    model = anomaly_model()
    found = model.objects.filter(run=run, pk=val).first() if model is not None else None
    if found is None:
        raise ApiError(400, f"the run has no anomaly {val}", field="anomaly")
    return found


def reason(data: dict) -> str:
    return text(data, "reason", MAX_REASON, True)


def reaction(data: dict) -> tuple[str, bool]:
    kind = data.get("kind")
    if kind not in REACTIONS:
        raise ApiError(400, f"kind must be one of {', '.join(REACTIONS)}", field="kind")
    on = data.get("on", True)
    if not isinstance(on, bool):
        raise ApiError(400, "on must be true or false", field="on")
    return kind, on


def anomaly_model():
    """The anomaly log's model where that app is installed (it lands beside this one), else None."""
    try:
        return apps.get_model("anomalies", "Anomaly")
    except LookupError:
        return None


def resolve_refs(text_: str) -> dict:
    """{"annotation": {id: url}, "anomaly": {id: url}} for the public annotations and the anomalies `text_` names."""
    ann_ids, anomaly_ids = markdown.references(text_)
    refs: dict = {"annotation": {}, "anomaly": {}}
    if ann_ids:
        for pk, run_id in Annotation.objects.public().filter(pk__in=ann_ids).values_list("pk", "run_id")[:50]:
            refs["annotation"][pk] = f"{reverse('run-dashboard', args=[run_id])}?annotation={pk}"
    model = anomaly_model()
    if anomaly_ids and model is not None:
        for pk, run_id in model.objects.filter(pk__in=anomaly_ids).values_list("pk", "run_id")[:50]:
            refs["anomaly"][pk] = f"{reverse('run-dashboard', args=[run_id])}?anomaly={pk}"
    return refs


def render(text_: str) -> str:
    return markdown.render(text_, resolve_refs(text_))
