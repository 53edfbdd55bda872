"""The annotations API: create, list (step window, tags), edit with history, soft delete, replies, reactions,
input validation, rate limits, CSRF and the Grafana export."""

from __future__ import annotations

import json

import pytest
from django.db import IntegrityError
from django.test import Client

from webapp.annotations.models import Annotation, Reaction, Reply, Revision
from webapp.runs.models import Run

from .conftest import LOSS, RUN, annotation_by, create, make_user, post

pytestmark = pytest.mark.django_db


def test_a_member_annotates_a_range_and_everyone_reads_it(run, personas):
    resp = create(personas["member"], body="see `loss` at $x^2$")
    assert resp.status_code == 201, resp.content
    a = resp.json()
    assert (a["title"], a["step_start"], a["step_end"], a["metric"], a["tags"]) == (
        "loss spike", 100, 120, LOSS, ["spike"])
    assert a["author"]["name"] == "member-user" and a["reply_count"] == 0
    assert '<code>loss</code>' in a["body_html"] and '<span class="math">$x^2$</span>' in a["body_html"]
    listed = personas["anonymous"].get(f"/api/runs/{RUN}/annotations/").json()
    assert [x["id"] for x in listed["annotations"]] == [a["id"]]
    assert listed["viewer"] == {"id": None, "name": None, "can": {"create": False, "edit_own": False,
                                                                  "react": False, "moderate": False}}
    assert "hidden" not in listed["annotations"][0]  # a public record says nothing about moderation


def test_one_step_is_a_marker_and_step_end_defaults_to_it(run, personas):
    a = create(personas["member"], step_start=7, step_end=None).json()
    assert a["step_start"] == a["step_end"] == 7


def test_the_list_filters_by_step_window_and_tag(run, personas):
    member = personas["member"]
    for start, end, tag in ((0, 10, "data"), (50, 60, "spike"), (200, 300, "spike")):
        assert create(member, step_start=start, step_end=end, tags=[tag]).status_code == 201

    def ranges(query):
        resp = personas["anonymous"].get(f"/api/runs/{RUN}/annotations/?{query}")
        assert resp.status_code == 200, resp.content
        return [(a["step_start"], a["step_end"]) for a in resp.json()["annotations"]]

    assert ranges("") == [(0, 10), (50, 60), (200, 300)]
    assert ranges("start=55&end=250") == [(50, 60), (200, 300)]  # overlapping the window counts
    assert ranges("end=5") == [(0, 10)]
    assert ranges("tag=spike&start=100") == [(200, 300)]
    assert personas["anonymous"].get(f"/api/runs/{RUN}/annotations/?tag=nope").status_code == 400
    assert personas["anonymous"].get(f"/api/runs/{RUN}/annotations/?start=x").status_code == 400
    assert personas["anonymous"].get("/api/runs/no-such-run/annotations/").status_code == 404


@pytest.mark.parametrize("fields,field", [
    ({"title": ""}, "title"),
    ({"title": "x" * 201}, "title"),
    ({"title": 5}, "title"),
    ({"body": "x" * 10_001}, "body"),
    ({"tags": ["spike", "nonsense"]}, "tags"),
    ({"tags": "spike"}, "tags"),
    ({"tags": ["spike", "data", "eval", "idea", "question", "hardware"]}, "tags"),
    ({"step_start": -1}, "step_start"),
    ({"step_start": 50, "step_end": 40}, "step_start"),
    ({"step_start": 900, "step_end": 1001}, "step_start"),  # past the run's last step
    ({"step_start": "10"}, "step_start"),
    ({"step_start": True}, "step_start"),
    ({"step_start": 1.5}, "step_start"),
    ({"metric": "not/a/series/of/this/run"}, "metric"),
    ({"metric": "bad name with spaces"}, "metric"),
    ({"anomaly": 999_999}, "anomaly"),
])
def test_bad_input_is_a_400_naming_the_field(run, personas, fields, field):
    resp = create(personas["member"], **fields)
    assert resp.status_code == 400, resp.content
    assert resp.json()["field"] == field
    assert not Annotation.objects.exists()


def test_bodies_that_are_not_json_objects_or_too_large_are_refused(run, personas):
    url = f"/api/runs/{RUN}/annotations/"
    member = personas["member"]
    assert member.post(url, "{nope", content_type="application/json").status_code == 400
    assert member.post(url, "[1, 2]", content_type="application/json").status_code == 400
    assert member.post(url, "[" * 100_000, content_type="application/json").status_code == 413
    assert member.put(url, "{}", content_type="application/json").status_code == 405


def test_a_run_without_steps_cannot_be_annotated(db, personas):
    Run.objects.create(id=RUN, name="empty")
    resp = create(personas["member"])
    assert resp.status_code == 400 and "no steps" in resp.json()["error"]


def test_an_annotation_links_an_anomaly_of_its_run(run, personas):
    from webapp.anomalies.models import Anomaly

    def anomaly(run_id):
        return Anomaly.objects.create(run_id=run_id, key=f"spike loss {run_id}", kind="spike", metric=LOSS,
                                      start_step=110, peak_step=111, detected_step=112, severity="warning",
                                      score=9.0, explanation="loss 5x its median")

    mine = anomaly(RUN)
    Run.objects.create(id="other-run", last_step=10)
    assert create(personas["member"], anomaly=anomaly("other-run").id).status_code == 400
    a = create(personas["member"], anomaly=mine.id).json()
    assert a["anomaly"] == mine.id and mine.annotations.get().id == a["id"]


def test_the_author_edits_with_history_kept_and_others_may_not(run, personas):
    member = personas["member"]
    a = create(member, title="first", body="one", tags=["spike"]).json()
    url = f"/api/annotations/{a['id']}/"
    assert post(member, url, {"title": "second", "body": "two *2*", "tags": ["data"]}, "patch").status_code == 200
    assert post(member, url, {"body": "three"}, "patch").status_code == 200
    assert post(member, url, {"body": "three"}, "patch").status_code == 200  # no change: no revision
    now = personas["anonymous"].get(url).json()["annotation"]
    assert (now["title"], now["body"], now["tags"], now["body_html"]) == ("second", "three", ["data"],
                                                                          "<p>three</p>\n")
    assert now["edited_at"] is not None
    history = personas["anonymous"].get(url + "revisions/").json()["revisions"]
    assert [(r["title"], r["body"], r["tags"]) for r in history] == [("first", "one", ["spike"]),
                                                                     ("second", "two *2*", ["data"])]
    assert history[1]["body_html"] == "<p>two <em>2</em></p>\n"
    for persona in ("moderator", "operator"):
        assert post(personas[persona], url, {"body": "not yours"}, "patch").status_code == 403
    assert post(personas["anonymous"], url, {"body": "x"}, "patch").status_code == 401
    assert post(member, url, {"step_start": 1}, "patch").status_code == 400  # the range stays as drawn
    assert Revision.objects.count() == 2


def test_delete_is_soft_and_own_only(run, personas):
    a = create(personas["member"]).json()
    url = f"/api/annotations/{a['id']}/"
    assert personas["moderator"].delete(url).status_code == 403
    assert personas["member"].delete(url).status_code == 200
    assert Annotation.objects.get(pk=a["id"]).deleted_at is not None  # kept: a soft delete
    assert personas["anonymous"].get(url).status_code == 404
    assert personas["member"].get(f"/api/runs/{RUN}/annotations/").json()["annotations"] == []
    assert personas["member"].delete(url).status_code == 404  # already gone for its author too


def test_replies_thread_with_counts_edit_history_and_delete(run, personas):
    a = create(personas["member"]).json()
    replies = f"/api/annotations/{a['id']}/replies/"
    r1 = post(personas["moderator"], replies, {"body": "checked the **logs**"})
    assert r1.status_code == 201, r1.content
    r2 = post(personas["operator"], replies, {"body": "same on node 3"}).json()
    assert post(personas["member"], replies, {"body": ""}).status_code == 400
    assert post(personas["member"], replies, {"body": "x" * 5001}).status_code == 400
    assert post(personas["anonymous"], replies, {"body": "hi"}).status_code == 401
    thread = personas["anonymous"].get(f"/api/annotations/{a['id']}/").json()
    assert [r["body"] for r in thread["replies"]] == ["checked the **logs**", "same on node 3"]
    assert thread["annotation"]["reply_count"] == 2
    assert thread["replies"][0]["body_html"] == "<p>checked the <strong>logs</strong></p>\n"
    url = f"/api/replies/{r2['id']}/"
    assert post(personas["member"], url, {"body": "hijack"}, "patch").status_code == 403
    assert post(personas["operator"], url, {"body": "same on nodes 3 and 4"}, "patch").status_code == 200
    assert [r["body"] for r in personas["anonymous"].get(url + "revisions/").json()["revisions"]] == [
        "same on node 3"]
    assert personas["operator"].delete(url).status_code == 200
    thread = personas["anonymous"].get(f"/api/annotations/{a['id']}/").json()
    assert [r["id"] for r in thread["replies"]] == [r1.json()["id"]] and thread["annotation"]["reply_count"] == 1
    assert Reply.objects.filter(pk=r2["id"]).exists()  # soft


def test_reactions_are_once_per_user_and_kind(run, personas):
    a = create(personas["member"]).json()
    url = f"/api/annotations/{a['id']}/reactions/"
    for _ in range(2):
        resp = post(personas["moderator"], url, {"kind": "+1"})
        assert resp.status_code == 200 and resp.json() == {"reactions": {"+1": 1}, "mine": ["+1"]}
    assert post(personas["member"], url, {"kind": "+1"}).json()["reactions"] == {"+1": 2}
    assert post(personas["member"], url, {"kind": "explains"}).json() == {
        "reactions": {"+1": 2, "explains": 1}, "mine": ["+1", "explains"]}
    assert post(personas["member"], url, {"kind": "+1", "on": False}).json()["reactions"] == {"+1": 1, "explains": 1}
    assert post(personas["member"], url, {"kind": "party"}).status_code == 400
    assert post(personas["member"], url, {"kind": "+1", "on": "yes"}).status_code == 400
    assert post(personas["anonymous"], url, {"kind": "+1"}).status_code == 401
    thread = personas["moderator"].get(f"/api/annotations/{a['id']}/").json()
    assert thread["annotation"]["reactions"] == {"+1": 1, "explains": 1} and thread["mine"]["annotation"] == ["+1"]
    with pytest.raises(IntegrityError):  # the database itself refuses a second one
        Reaction.objects.create(annotation_id=a["id"], user=thread_user("moderator-user"), kind="+1")


def thread_user(username):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=username)


def test_reactions_on_replies(run, personas):
    a = create(personas["member"]).json()
    r = post(personas["member"], f"/api/annotations/{a['id']}/replies/", {"body": "yes"}).json()
    url = f"/api/replies/{r['id']}/reactions/"
    assert post(personas["operator"], url, {"kind": "same"}).json() == {"reactions": {"same": 1}, "mine": ["same"]}
    thread = personas["operator"].get(f"/api/annotations/{a['id']}/").json()
    assert thread["replies"][0]["reactions"] == {"same": 1}
    assert thread["mine"]["replies"] == {str(r["id"]): ["same"]}


def test_posting_is_rate_limited(run, personas):
    codes = [create(personas["member"]).status_code for _ in range(11)]
    assert codes[:10] == [201] * 10 and codes[10] == 429


def test_session_posts_need_the_csrf_token(run):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("csrf-member", "member"))
    url = f"/api/runs/{RUN}/annotations/"
    body = json.dumps({"title": "t", "step_start": 1})
    assert client.post(url, body, content_type="application/json").status_code == 403
    a = annotation_by(thread_user("csrf-member"))
    assert client.patch(f"/api/annotations/{a.id}/", "{}", content_type="application/json").status_code == 403
    assert client.delete(f"/api/annotations/{a.id}/").status_code == 403
    client.get(f"/runs/{RUN}/")  # the dashboard's panel form sets the token
    token = client.cookies["csrftoken"].value
    resp = client.post(url, body, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert resp.status_code == 201, resp.content


def test_grafana_export_has_grafanas_shape_with_steps_as_time(run, personas):
    a = create(personas["member"], title="spike", body="why", tags=["spike", "data"]).json()
    create(personas["member"], title="one step", body="", step_start=5, step_end=5, metric=None, tags=[])
    hidden = create(personas["member"], title="hidden").json()
    post(personas["moderator"], f"/api/annotations/{hidden['id']}/moderation/", {"action": "hide", "reason": "x"})
    out = personas["anonymous"].get(f"/api/runs/{RUN}/annotations/?format=grafana").json()
    assert isinstance(out, list) and [x["text"] for x in out] == ["one step", "spike\n\nwhy"]
    g = out[1]
    assert {"id", "time", "timeEnd", "tags", "text", "dashboardUID", "panelId", "login", "created",
            "updated", "data"} <= set(g)
    assert (g["id"], g["time"], g["timeEnd"], g["tags"], g["dashboardUID"]) == (a["id"], 100, 120,
                                                                                ["spike", "data"], RUN)
    assert g["login"] == "member-user" and isinstance(g["created"], int)
    assert g["data"]["metric"] == LOSS and g["data"]["time_axis"] == "step"
    assert g["data"]["url"].endswith(f"/runs/{RUN}/?annotation={a['id']}")
    assert out[0]["time"] == out[0]["timeEnd"] == 5 and out[0]["data"]["metric"] is None
    assert personas["anonymous"].get(f"/api/runs/{RUN}/annotations/?format=csv").status_code == 400
