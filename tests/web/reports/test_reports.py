"""Reports: blocks parsed and checked on write, Markdown sanitised as annotations are, drafts private, publish,
edit history, moderation, the list, the run page's links, and the JSON API."""

from __future__ import annotations

import re

import pytest

from webapp.reports import blocks
from webapp.reports.models import Report

from .conftest import RUN, body_for, make_user


def _write(client, world, action="publish", **fields):
    data = {"title": "What happened at step 300", "body": body_for(world), "action": action, **fields}
    return client.post("/reports/new/", data)


def test_a_body_splits_into_sanitised_markdown_and_checked_blocks(world):
    parts = blocks.parse(body_for(world))
    kinds = [p["kind"] for p in parts]
    assert kinds == ["markdown", "chart", "annotation", "anomaly", "markdown"]
    assert parts[1] == {"kind": "chart", "run": RUN, "series": "train/loss", "start": 100, "end": None}
    assert "<strong>bold</strong>" in parts[0]["html"] and "<script" not in parts[0]["html"]
    assert blocks.cited_runs(parts) == {RUN}


def test_a_block_inside_fenced_code_stays_text(world):
    parts = blocks.parse(f"```\n{{{{chart run={RUN} series=train/loss}}}}\n```")
    assert [p["kind"] for p in parts] == ["markdown"] and "{{chart" in parts[0]["html"]


@pytest.mark.parametrize("line,message", [
    ("{{chart run=nope series=train/loss}}", "no run"),
    (f"{{{{chart run={RUN}}}}}", "takes run, series"),
    (f"{{{{chart run={RUN} series=train/loss steps=9..3}}}}", "after the last"),
    (f"{{{{chart run={RUN} series=train/loss steps=x}}}}", "steps must be"),
    ("{{annotation id=999999}}", "no annotation 999999"),
    ("{{video url=x}}", "unknown block"),
    (f"{{{{compare runs={RUN} series=train/loss}}}}", "2 to 4 runs"),
])
def test_a_bad_block_is_refused_with_its_line(world, personas, line, message):
    resp = personas["member"].post("/reports/new/", {"title": "t", "body": f"text\n\n{line}", "action": "draft"})
    assert resp.status_code == 400
    assert "line 3" in resp.content.decode() and message in resp.content.decode()
    assert not Report.objects.exists()


def test_a_draft_is_its_authors_until_published(world, personas):
    resp = _write(personas["member"], world, action="draft")
    assert resp.status_code == 302
    report = Report.objects.get()
    url = f"/reports/{report.id}/"
    assert report.draft and personas["member"].get(url).status_code == 200
    for other in ("anonymous", "moderator", "operator"):
        assert personas[other].get(url).status_code == 404
        assert personas[other].get(f"/api/reports/{report.id}/").status_code == 404
    assert "What happened" not in personas["anonymous"].get("/reports/").content.decode()
    assert personas["member"].post(f"/reports/{report.id}/publish/").status_code == 302
    page = personas["anonymous"].get(url).content.decode()
    assert "What happened at step 300" in page and "<strong>bold</strong>" in page and "<script>alert" not in page
    assert "spike at 300" in page and "shard 7 restarted" in page  # the annotation block with its thread summary
    assert f"/runs/{RUN}/?annotation={world['annotation'].id}&amp;from=290&amp;to=310" in page  # opens the thread
    assert "loss 6 at step 301" in page  # the anomaly block
    assert 'class="minichart" data-chart="0"' in page
    assert "What happened" in personas["anonymous"].get("/reports/").content.decode()


def test_an_edit_keeps_history_and_only_the_author_edits(world, personas):
    _write(personas["member"], world)
    report = Report.objects.get()
    for other in ("moderator", "operator"):
        assert personas[other].post(f"/reports/{report.id}/edit/", {"title": "x", "body": "y"}).status_code == 403
    assert personas["anonymous"].post(f"/reports/{report.id}/edit/", {"title": "x"}).status_code == 302
    resp = personas["member"].post(f"/reports/{report.id}/edit/", {"title": "Revised", "body": "only text",
                                                                   "action": "publish"})
    assert resp.status_code == 302
    report.refresh_from_db()
    assert report.title == "Revised" and report.edited_at is not None and report.runs.count() == 0
    revs = personas["anonymous"].get(f"/api/reports/{report.id}/revisions/").json()["revisions"]
    assert [r["title"] for r in revs] == ["What happened at step 300"]
    assert "What happened at step 300" in personas["anonymous"].get(f"/reports/{report.id}/history/").content.decode()


def test_a_moderator_hides_a_report_from_the_public_with_a_reason(world, personas):
    _write(personas["member"], world)
    report = Report.objects.get()
    url = f"/reports/{report.id}/"
    assert personas["member"].post(f"{url}moderation/", {"action": "hide", "reason": "spam"}).status_code == 403
    assert personas["moderator"].post(f"{url}moderation/", {"action": "hide", "reason": ""}).status_code == 400
    assert personas["moderator"].post(f"{url}moderation/", {"action": "hide", "reason": "spam"}).status_code == 302
    assert personas["anonymous"].get(url).status_code == 404
    assert personas["anonymous"].get("/api/reports/").json()["reports"] == []
    assert "hidden: spam" in personas["moderator"].get(url).content.decode()
    assert "hidden: spam" in personas["member"].get(url).content.decode()  # its author sees why
    assert personas["moderator"].post(f"{url}moderation/", {"action": "restore", "reason": "ok"}).status_code == 302
    assert personas["anonymous"].get(url).status_code == 200


def test_the_run_page_links_the_published_reports_that_cite_it(world, personas):
    _write(personas["member"], world, action="draft", title="Draft one")
    _write(personas["member"], world, title="Published one")
    page = personas["anonymous"].get(f"/runs/{RUN}/").content.decode()
    assert "report: Published one" in page and "Draft one" not in page
    api = personas["anonymous"].get(f"/api/runs/{RUN}/reports/").json()
    assert [r["title"] for r in api["reports"]] == ["Published one"]


def test_the_api_lists_published_reports_with_their_parts(world, personas):
    _write(personas["member"], world)
    listed = personas["anonymous"].get("/api/v1/reports/").json()["reports"]
    assert len(listed) == 1 and listed[0]["url"] == f"/reports/{listed[0]['id']}/"
    one = personas["anonymous"].get(f"/api/v1/reports/{listed[0]['id']}/").json()
    assert one["runs"] == [RUN] and [p["kind"] for p in one["parts"]][:2] == ["markdown", "chart"]
    assert "<script" not in one["body_html"]


def test_a_hidden_annotation_leaves_the_report_that_quoted_it(world, personas):
    _write(personas["member"], world)
    report = Report.objects.get()
    a = world["annotation"]
    a.hide(make_user("rep-mod", "moderator"), "abuse")
    a.save()
    page = personas["anonymous"].get(f"/reports/{report.id}/").content.decode()
    assert "spike at 300" not in page and "[annotation no longer available]" in page


def test_a_report_page_carries_its_own_preview_tags_over_its_runs_curve_image(world, personas):
    _write(personas["member"], world, title="The spike at 300")
    pk = Report.objects.get(title="The spike at 300").pk
    html = personas["anonymous"].get(f"/reports/{pk}/").content.decode()
    tags = dict(re.findall(r'<meta (?:property|name)="((?:og|twitter):[^"]+)" content="([^"]*)">', html))
    assert tags["og:title"] == "The spike at 300" and tags["og:type"] == "article"
    assert tags["og:url"] == f"http://testserver/reports/{pk}/" and tags["og:description"]
    assert tags["og:image"].startswith(f"http://testserver/runs/{RUN}/preview.png?v=")
    assert tags["twitter:card"] == "summary_large_image"
    img = personas["anonymous"].get(tags["og:image"].removeprefix("http://testserver"))
    assert img.status_code == 200 and img["Content-Type"] == "image/png"
