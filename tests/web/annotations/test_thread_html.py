"""An annotation's thread rendered by the server (/annotations/<id>/thread/, the piece the panel puts in place): what
each viewer may see and do, user text escaped, the sanitised body as stored, 304 while nothing changed, and 404
for what the viewer may not read."""

from __future__ import annotations

from .conftest import create, post


def _thread(client, aid, **headers):
    return client.get(f"/annotations/{aid}/thread/", **headers)


def test_the_thread_arrives_rendered_with_each_viewers_own_buttons(run, personas):
    aid = create(personas["member"], title="<b>spike</b> & co", body="the **loader** <script>x()</script>").json()["id"]
    assert post(personas["member"], f"/api/annotations/{aid}/replies/", {"body": "seen *too*"}).status_code == 201
    anon = _thread(personas["anonymous"], aid)
    assert anon.status_code == 200 and anon["Cache-Control"] == "no-cache" and anon["ETag"]
    html = anon.content.decode()
    assert "<h3>&lt;b&gt;spike&lt;/b&gt; &amp; co</h3>" in html and "<strong>loader</strong>" in html
    assert "<script>" not in html and "Replies (1)" in html and "<em>too</em>" in html
    assert 'data-post="annotation-' in html and 'data-post="reply-' in html
    # anonymous: reads only (no reply box, no edit, reactions disabled and only where counted)
    assert 'name="reply"' not in html and 'data-act="edit"' not in html and 'data-kind=' not in html
    mine = _thread(personas["member"], aid).content.decode()
    assert 'name="reply"' in mine and mine.count('data-act="edit"') == 2 and 'data-kind="+1"' in mine
    assert 'data-act="moderate"' not in mine
    assert 'data-verb="Hide"' in _thread(personas["moderator"], aid).content.decode()


def test_an_unchanged_thread_is_a_304_and_a_changed_one_a_new_etag(run, personas):
    aid = create(personas["member"]).json()["id"]
    first = _thread(personas["anonymous"], aid)
    again = _thread(personas["anonymous"], aid, HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again.content == b""
    assert post(personas["member"], f"/api/annotations/{aid}/reactions/", {"kind": "+1"}).status_code == 200
    changed = _thread(personas["anonymous"], aid, HTTP_IF_NONE_MATCH=first["ETag"])
    assert changed.status_code == 200 and changed["ETag"] != first["ETag"] and b"+1 1" in changed.content


def test_a_hidden_thread_is_a_404_to_those_who_may_not_read_it(run, personas):
    aid = create(personas["member"]).json()["id"]
    assert post(personas["moderator"], f"/api/annotations/{aid}/moderation/",
                {"action": "hide", "reason": "spam"}).status_code == 200
    assert _thread(personas["anonymous"], aid).status_code == 404
    assert _thread(personas["anonymous"], 999999).status_code == 404
    seen = _thread(personas["moderator"], aid).content.decode()
    assert "Hidden by a moderator: spam" in seen and 'data-verb="Restore"' in seen
