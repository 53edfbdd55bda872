"""Link previews: Open Graph / Twitter card tags for a run's page and an annotation's (?annotation=<pk>), and the
PNG of its loss curve they point at (webapp/front/render.py), cached until the run moves on.

Cache key: the run, the annotation (its range and title), the run's state and name, and its loss series' last
step rounded down to a bucket that doubles as the run grows (64 buckets a run: every step early on, every 16 at
step 1,000): a crawler asking again while the run trains gets the stored bytes, and the image follows the run.
The key's hash is the ETag and the `?v=` of the tag's image URL, so a preview cache that keys on the URL refetches.
"""

from __future__ import annotations

import hashlib
import math
from django.core.cache import cache
from django.http import HttpResponse, HttpResponseNotModified
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_GET

from observatory import contract
from webapp.accounts.permissions import public
from webapp.annotations.models import Annotation
from webapp.front import render
from webapp.front.moments import plain
from webapp.metrics import queries
from webapp.metrics.models import Series
from webapp.runs.models import Run
from webapp.public import absolute

POINTS = 600  # buckets of min and max: one pair per ~2 px of the 1,104 px plot
BUCKETS_PER_RUN = 64
CACHE_S = 24 * 3600  # a key names its data exactly; expiry only frees memory
MAX_AGE_S = 60  # browsers and crawlers may reuse a run's image this long without asking
# An annotation's image: `no-cache` (with its ETag): every cache asks again each time, a 304 while nothing changed, so
# a moderator's hiding takes effect at once (the next answer is a 404), never up to MAX_AGE_S later.
MODERATED_CACHE = "no-cache"
DESCRIPTION_CHARS = 200


def step_bucket(last_step: int | None) -> int:
    """last_step rounded down to a power-of-two width of ~1/64 of the run (1 below step 128)."""
    s = max(0, last_step or 0)
    width = 1 << int(math.log2(s / BUCKETS_PER_RUN)) if s >= BUCKETS_PER_RUN else 1
    return s - s % width


def _loss(run: Run) -> Series | None:
    return Series.objects.filter(run=run, name=contract.M_LOSS).first()


def _key(run: Run, loss: Series | None, note: Annotation | None) -> str:
    parts = [run.id, run.name, run.state, str(step_bucket(loss.last_step if loss else None))]
    if note is not None:
        parts += [str(note.pk), note.title, str(note.step_start), str(note.step_end)]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


def _image(run: Run, loss: Series | None, note: Annotation | None) -> tuple[str, bytes]:
    key = _key(run, loss, note)
    body = cache.get("ogimage:" + key)
    if body is None:
        steps, values = [], []
        if loss is not None and loss.last_step is not None:
            w = queries.window(loss, 0, loss.last_step, POINTS).window
            steps, values = w.steps, w.values
        title = run.name or run.id
        if note is not None:
            sub = f"“{note.title}” · steps {note.step_start:,}–{note.step_end:,}"
        else:
            sub = f"{contract.M_LOSS} · {run.state}" + (f" · step {run.last_step:,}" if run.last_step else "")
        body = render.png(title, sub, steps, values,
                          (note.step_start, note.step_end) if note is not None else None)
        cache.set("ogimage:" + key, body, CACHE_S)
    return key, body


def _answer(request, key: str, body: bytes, moderated: bool = False):
    etag = f'"{key}"'
    if etag in [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]:
        resp = HttpResponseNotModified()
    else:
        resp = HttpResponse(body, content_type="image/png")
    resp["ETag"] = etag
    resp["Cache-Control"] = MODERATED_CACHE if moderated else f"public, max-age={MAX_AGE_S}"
    return resp


def _public_note(pk: int) -> Annotation:
    return get_object_or_404(Annotation.objects.public().select_related("run"), pk=pk)


@public
@require_GET
def run_image(request, run_id: str):
    run = get_object_or_404(Run, pk=run_id)
    return _answer(request, *_image(run, _loss(run), None))


@public
@require_GET
def annotation_image(request, pk: int):
    note = _public_note(pk)
    return _answer(request, *_image(note.run, _loss(note.run), note), moderated=True)


def _plain(html: str) -> str:
    text = plain(html)
    return text if len(text) <= DESCRIPTION_CHARS else text[:DESCRIPTION_CHARS - 1] + "…"


def meta(request, run: Run) -> dict | None:
    """runs.extensions.PREVIEW_META contributor: the tags of the run's page, or of the annotation its ?annotation= names
    (a public one of this run; anything else gets the run's)."""
    note = None
    raw = request.GET.get("annotation", "")
    if raw.isdigit():
        note = Annotation.objects.public().filter(run=run, pk=int(raw)).first()
    loss = _loss(run)
    version = _key(run, loss, note)
    page = reverse("run-dashboard", args=[run.id])
    name = run.name or run.id
    if note is not None:
        title = f"{note.title} · {name}"
        desc = _plain(note.body_html) or f"A note on steps {note.step_start:,}–{note.step_end:,} of {name}."
        image = reverse("preview-annotation", args=[note.pk])
        page += f"?annotation={note.pk}"
    else:
        title = f"{name} · Observatory"
        step = f", step {run.last_step:,}" if run.last_step is not None else ""
        desc = f"{name}: {run.state}{step}. Live loss curve, anomalies and the community's notes, every spike kept."
        image = reverse("preview-run", args=[run.id])
    image = absolute(request, f"{image}?v={version}")
    return {"og:type": "website", "og:site_name": "Observatory", "og:title": title, "og:description": desc,
            "og:url": absolute(request, page), "og:image": image, "og:image:type": "image/png",
            "og:image:width": str(render.W), "og:image:height": str(render.H),
            "og:image:alt": f"Training loss of {name}" + (", the annotated steps shaded" if note else ""),
            "twitter:card": "summary_large_image", "twitter:title": title, "twitter:description": desc,
            "twitter:image": image}
