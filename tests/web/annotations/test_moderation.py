"""Moderation: hidden content is gone for the public, kept and marked for moderators, operators and its author."""

from __future__ import annotations

import pytest
from django.test import Client

from .conftest import RUN, create, make_user, post

pytestmark = pytest.mark.django_db


def _ids(client, path=f"/api/runs/{RUN}/annotations/"):
    return [a["id"] for a in client.get(path).json()["annotations"]]


def _hide(client, target, pk, action="hide", reason="spam link"):
    return post(client, f"/api/{target}/{pk}/moderation/", {"action": action, "reason": reason})


def test_a_hidden_annotation_is_gone_for_the_public_and_marked_for_moderators_and_its_author(run, personas):
    a = create(personas["member"], title="buy cheap GPUs").json()
    resp = _hide(personas["moderator"], "annotations", a["id"])
    assert resp.status_code == 200, resp.content
    assert resp.json()["hidden"] is True and resp.json()["hidden_by"] == "moderator-user"
    other = Client()
    other.force_login(make_user("other-member", "member"))
    for client in (personas["anonymous"], other):  # the public, and a member who did not write it
        assert _ids(client) == []
        assert client.get(f"/api/annotations/{a['id']}/").status_code == 404
        assert client.get(f"/api/annotations/{a['id']}/revisions/").status_code == 404
    for persona in ("moderator", "operator"):
        rec = personas[persona].get(f"/api/runs/{RUN}/annotations/").json()["annotations"][0]
        assert (rec["hidden"], rec["hidden_reason"], rec["hidden_by"]) == (True, "spam link", "moderator-user")
    own = personas["member"].get(f"/api/annotations/{a['id']}/").json()["annotation"]
    assert own["hidden"] is True and own["hidden_reason"] == "spam link" and "hidden_by" not in own
    assert post(personas["member"], f"/api/annotations/{a['id']}/replies/", {"body": "hi"}).status_code == 409
    assert post(personas["moderator"], f"/api/annotations/{a['id']}/reactions/", {"kind": "+1"}).status_code == 409

    assert _hide(personas["operator"], "annotations", a["id"], "unhide", "it was a real question").status_code == 200
    assert _ids(personas["anonymous"]) == [a["id"]]
    assert "hidden" not in personas["anonymous"].get(f"/api/annotations/{a['id']}/").json()["annotation"]


def test_hiding_needs_a_reason_a_known_action_and_the_role(run, personas):
    a = create(personas["member"]).json()
    assert _hide(personas["moderator"], "annotations", a["id"], reason="").status_code == 400
    assert _hide(personas["moderator"], "annotations", a["id"], action="ban").status_code == 400
    assert _hide(personas["member"], "annotations", a["id"]).status_code == 403
    assert _hide(personas["anonymous"], "annotations", a["id"]).status_code == 401
    assert _hide(personas["moderator"], "annotations", 999_999).status_code == 404
    assert _ids(personas["anonymous"]) == [a["id"]]


def test_a_hidden_reply_leaves_the_thread_for_the_public_only(run, personas):
    a = create(personas["member"]).json()
    replies = f"/api/annotations/{a['id']}/replies/"
    keep = post(personas["member"], replies, {"body": "useful"}).json()
    bad = post(personas["operator"], replies, {"body": "abuse"}).json()
    assert _hide(personas["moderator"], "replies", bad["id"]).status_code == 200

    public = personas["anonymous"].get(f"/api/annotations/{a['id']}/").json()
    assert [r["id"] for r in public["replies"]] == [keep["id"]] and public["annotation"]["reply_count"] == 1
    assert [r["id"] for r in personas["anonymous"].get(replies).json()["replies"]] == [keep["id"]]
    mod = personas["moderator"].get(f"/api/annotations/{a['id']}/").json()
    assert [(r["id"], r.get("hidden", False)) for r in mod["replies"]] == [(keep["id"], False), (bad["id"], True)]
    author = personas["operator"].get(f"/api/annotations/{a['id']}/").json()  # its author sees it, marked
    assert [r.get("hidden", False) for r in author["replies"]] == [False, True]
    assert personas["anonymous"].get(f"/api/replies/{bad['id']}/revisions/").status_code == 404


def test_replies_of_a_hidden_annotation_are_hidden_with_it(run, personas):
    a = create(personas["member"]).json()
    replier = Client()
    replier.force_login(make_user("replier", "member"))
    r = post(replier, f"/api/annotations/{a['id']}/replies/", {"body": "x"}).json()
    _hide(personas["moderator"], "annotations", a["id"])
    assert personas["anonymous"].get(f"/api/annotations/{a['id']}/replies/").status_code == 404
    assert personas["anonymous"].get(f"/api/replies/{r['id']}/revisions/").status_code == 404
    assert post(replier, f"/api/replies/{r['id']}/", {"body": "y"}, "patch").status_code == 404
    assert [x["id"] for x in personas["operator"].get(f"/api/annotations/{a['id']}/replies/").json()["replies"]] == [
        r["id"]]


def test_deleted_posts_are_shown_to_moderators_marked_and_cannot_be_moderated(run, personas):
    a = create(personas["member"]).json()
    personas["member"].delete(f"/api/annotations/{a['id']}/")
    rec = personas["moderator"].get(f"/api/runs/{RUN}/annotations/").json()["annotations"][0]
    assert rec["deleted"] is True
    assert _hide(personas["moderator"], "annotations", a["id"]).status_code == 409
    assert _ids(personas["anonymous"]) == []
