"""Link previews: a run's page and an annotation's carry Open Graph / Twitter tags with absolute URLs, and the image
they name is a PNG of the run's loss that follows the run (a new ETag as it advances, 304 while it does not)."""

from __future__ import annotations

import io
import re

import pytest
from django.core.cache import cache
from PIL import Image

from observatory import contract
from webapp.annotations.models import Annotation
from webapp.front import previews
from webapp.runs.models import Run

RUN = "og-run"


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()


def tags(html: str) -> dict[str, str]:
    return dict(re.findall(r'<meta (?:property|name)="((?:og|twitter):[^"]+)" content="([^"]*)">', html))


def feed(trainer, ingestor, steps):
    for s in steps:
        trainer.metrics_named(s, {contract.M_LOSS: 5.0 - s / 1000 + (3.0 if s == 40 else 0.0)})
    ingestor.drain()


@pytest.fixture
def run(trainer, ingestor, db):
    Run.objects.create(id=RUN, name="preview demo")
    trainer.run_id = RUN
    trainer.stream = contract.telemetry_stream(RUN)
    trainer.r.sadd(contract.RUNS_KEY, RUN)
    feed(trainer, ingestor, range(0, 100))
    return Run.objects.get(pk=RUN)


def test_a_run_page_carries_open_graph_and_twitter_tags_with_absolute_urls(client, run):
    t = tags(client.get(f"/runs/{RUN}/").content.decode())
    assert t["twitter:card"] == "summary_large_image"
    assert t["og:url"] == f"http://testserver/runs/{RUN}/"
    assert t["og:image"].startswith(f"http://testserver/runs/{RUN}/preview.png?v=")
    assert t["twitter:image"] == t["og:image"]
    assert "preview demo" in t["og:title"] and t["og:description"]
    img = client.get(t["og:image"].removeprefix("http://testserver"))
    assert img.status_code == 200 and img["Content-Type"] == "image/png"
    assert Image.open(io.BytesIO(img.content)).size == (1200, 630)


def test_the_image_is_cached_and_changes_as_the_run_advances(client, run, trainer, ingestor):
    first = client.get(f"/runs/{RUN}/preview.png")
    etag = first["ETag"]
    again = client.get(f"/runs/{RUN}/preview.png")
    assert again["ETag"] == etag and again.content == first.content
    assert client.get(f"/runs/{RUN}/preview.png", HTTP_IF_NONE_MATCH=etag).status_code == 304
    v1 = tags(client.get(f"/runs/{RUN}/").content.decode())["og:image"]

    feed(trainer, ingestor, range(100, 400))  # past the step bucket the first image was drawn at
    later = client.get(f"/runs/{RUN}/preview.png", HTTP_IF_NONE_MATCH=etag)
    assert later.status_code == 200 and later["ETag"] != etag and later.content != first.content
    assert tags(client.get(f"/runs/{RUN}/").content.decode())["og:image"] != v1  # a preview cache refetches


def test_the_step_bucket_follows_every_step_early_and_doubles_as_the_run_grows():
    assert [previews.step_bucket(s) for s in (None, 0, 5, 63, 127)] == [0, 0, 5, 63, 127]
    assert previews.step_bucket(1000) == 1000 - 1000 % 8 and previews.step_bucket(100_000) % 1024 == 0


def test_an_annotation_link_previews_the_annotation_with_its_range(client, run):
    note = Annotation.objects.create(run=run, title="the spike at 40", body="**data** loader restarted & more",
                                     body_html="<p><strong>data</strong> loader restarted &amp; more</p>",
                                     step_start=35, step_end=45)
    html = client.get(f"/runs/{RUN}/?annotation={note.pk}").content.decode()
    t = tags(html)
    assert t["og:title"].startswith("the spike at 40") and t["og:description"] == "data loader restarted &amp; more"
    assert t["og:url"] == f"http://testserver/runs/{RUN}/?annotation={note.pk}"
    assert t["og:image"].startswith(f"http://testserver/annotations/{note.pk}/preview.png?v=")
    shaded = client.get(f"/annotations/{note.pk}/preview.png")
    plain = client.get(f"/runs/{RUN}/preview.png")
    assert shaded.status_code == 200 and shaded.content != plain.content


def test_a_hidden_annotation_previews_nothing_of_itself(client, run):
    note = Annotation.objects.create(run=run, title="abuse", body="b", body_html="<p>b</p>", step_start=1,
                                     step_end=2, hidden=True)
    t = tags(client.get(f"/runs/{RUN}/?annotation={note.pk}").content.decode())
    assert "abuse" not in t["og:title"] and "/annotations/" not in t["og:image"]
    assert client.get(f"/annotations/{note.pk}/preview.png").status_code == 404


def test_an_annotations_image_is_revalidated_every_time_so_hiding_it_takes_effect_at_once(client, run):
    """Not `public, max-age`: a cache would go on serving a hidden annotation's image for that long."""
    note = Annotation.objects.create(run=run, title="to be hidden", body="b", body_html="<p>b</p>", step_start=1,
                                     step_end=2)
    first = client.get(f"/annotations/{note.pk}/preview.png")
    assert first.status_code == 200 and first["Cache-Control"] == "no-cache" and first["ETag"]
    again = client.get(f"/annotations/{note.pk}/preview.png", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again["Cache-Control"] == "no-cache"
    Annotation.objects.filter(pk=note.pk).update(hidden=True)
    assert client.get(f"/annotations/{note.pk}/preview.png", HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 404
    assert "max-age" in client.get(f"/runs/{RUN}/preview.png")["Cache-Control"]  # a run's image: nothing moderated


def test_an_unknown_run_is_a_plain_404_with_no_host_path(client, db):
    resp = client.get("/runs/nope/preview.png")
    body = resp.content.decode(errors="replace")
    assert resp.status_code == 404 and "Traceback" not in body and "/work/" not in body and "site-packages" not in body


def test_a_run_without_loss_points_still_gets_an_image(client, db):
    Run.objects.create(id="empty-run", name="empty")
    resp = client.get("/runs/empty-run/preview.png")
    assert resp.status_code == 200 and Image.open(io.BytesIO(resp.content)).format == "PNG"
