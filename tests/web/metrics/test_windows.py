"""Several series' windows at once (GET /api/runs/<id>/windows/, what a zoom reads), and the first windows the
dashboard page carries (webapp/metrics/firstpaint.py): both are exactly what the one-series API answers."""

import json
import math
import re

import pytest
from django.db import transaction

from observatory import contract
from webapp.metrics import firstpaint, storage
from webapp.metrics.models import Series
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db
DOMAIN = contract.domain_loss("code")


@pytest.fixture
def run():
    run = Run.objects.create(id="w1", name="windows", state="training", last_step=4999)
    for k, name in enumerate((contract.M_LOSS, contract.M_LR, DOMAIN, "eval/loss")):
        s = Series.objects.create(run=run, name=name)
        with transaction.atomic():
            storage.bulk_load(s.id, [(i, (k + 1) * 1000.0 / (i + 1) + (50.0 if i == 3210 else 0.0))
                                     for i in range(5000)])
    return run


def one(client, name, query):
    return client.get(f"/api/runs/w1/metrics/{name}/?{query}").json()


def test_a_batch_answers_each_series_as_its_own_endpoint_and_null_for_a_missing_one(client, run):
    query = "start=1000&end=4000&points=200"
    body = client.get(f"/api/runs/w1/windows/?series={contract.M_LOSS},{contract.M_LR}&series=no/such&{query}")
    assert body.status_code == 200 and body["ETag"]
    wins = body.json()["windows"]
    assert list(wins) == [contract.M_LOSS, contract.M_LR, "no/such"]
    assert wins["no/such"] is None
    for name in (contract.M_LOSS, contract.M_LR):
        assert wins[name] == one(client, name, query)
        assert 3210 in wins[name]["steps"]  # the spike survives the downsampling


@pytest.mark.parametrize("query,param", [("", "series"), ("series=,", "series"),
                                         ("series=" + ",".join(f"m{i}" for i in range(33)), "series"),
                                         ("series=train/loss&points=5", "points"),
                                         ("series=train/loss&start=9&end=3", "end")])
def test_a_bad_batch_is_a_400_naming_the_parameter(client, run, query, param):
    resp = client.get(f"/api/runs/w1/windows/?{query}")
    assert resp.status_code == 400 and resp.json()["parameter"] == param


def test_the_batch_of_an_unknown_run_is_a_404(client, run):
    assert client.get("/api/runs/nope/windows/?series=train/loss").status_code == 404


def test_a_batch_reads_its_own_runs_series_and_says_what_the_server_spent(client, run):
    Run.objects.create(id="w2", name="another", state="training")
    other = client.get(f"/api/runs/w2/windows/?series={contract.M_LOSS}")  # w1 has it, w2 has not
    assert other.status_code == 200 and other.json() == {"run_id": "w2", "points": 1000,
                                                         "windows": {contract.M_LOSS: None}}
    spent = dict(p.split(";dur=") for p in other["Server-Timing"].split(", "))
    assert list(spent) == ["lookup", "read", "json", "etag"] and all(float(v) >= 0 for v in spent.values())


def test_the_dashboard_carries_its_first_windows_the_run_and_its_metric_list(client, run):
    html = client.get("/runs/w1/").content.decode()
    page = json.loads(re.search(r'<script id="page-data" type="application/json">(.*?)</script>', html, re.S)[1])
    # every series a default chart draws (the loss chart's per-domain losses too), none it does not (eval/loss)
    assert set(page["initial_windows"]) == {contract.M_LOSS, contract.M_LR, DOMAIN}
    for name, win in page["initial_windows"].items():
        assert win == one(client, name, f"points={firstpaint.INITIAL_POINTS}")
    assert page["metrics"] == client.get("/api/runs/w1/metrics/").json()["metrics"]
    detail = client.get("/api/runs/w1/").json()
    assert page["detail"] == detail


def test_wanted_keeps_chart_order_and_only_one_segment_domain_losses():
    charts = [{"metrics": ["a"], "optional": ["b"], "extra_prefix": "loss/"}, {"metrics": ["c"]}]
    names = ["c", "loss/x", "loss/x/y", "b", "a", "z"]
    assert firstpaint.wanted(charts, names) == ["a", "b", "loss/x", "c"]


def page_windows(client) -> dict:
    html = client.get("/runs/w1/").content.decode()
    return json.loads(re.search(r'<script id="page-data" type="application/json">(.*?)</script>', html, re.S)[1]
                      )["initial_windows"]


def write(msgs) -> None:
    from webapp.metrics.apply import apply_messages

    with transaction.atomic():
        apply_messages([("", contract.decode(contract.encode("w1", kind, data))) for kind, data in msgs])


def test_the_first_windows_come_from_the_cache_until_a_write_and_never_stale_after_one(client, run):
    """Every kind of write to a series (an appended step, a step written again with another value, a rewind) gives
    the next page the new windows; with no write in between the page reads no window from the database."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as cold:
        first = page_windows(client)
    with CaptureQueriesContext(connection) as warm:
        assert page_windows(client) == first
    reads = [q["sql"] for q in cold.captured_queries if "metrics_block" in q["sql"] or "metrics_point" in q["sql"]]
    assert reads and not [q for q in warm.captured_queries if q["sql"] in reads]
    for msgs in ([("metrics", {"t": 1.0, "step": 5000, "values": {contract.M_LOSS: 999.0}})],  # appended
                 [("metrics", {"t": 2.0, "step": 4321, "values": {contract.M_LOSS: -77.0}})],  # rewritten
                 [("rewind", {"t": 3.0, "from_step": 5000, "to_step": 2000})]):  # cut
        write(msgs)
        now = page_windows(client)
        assert now[contract.M_LOSS] != first[contract.M_LOSS]
        for name, win in now.items():  # (a rewind cuts every series of the run; a point, its own)
            assert win == one(client, name, f"points={firstpaint.INITIAL_POINTS}")
        first = now
    assert max(first[contract.M_LOSS]["steps"]) <= 2000 and first[contract.M_LOSS]["last_step"] == 2000


def test_with_the_cache_unreachable_the_page_computes_its_windows(client, run, settings):
    """The windows' cache is an accelerator: with its Redis away (here: a port nothing listens on) the page still
    carries every window, equal to the API's, and says so in the log rather than failing."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": "redis://127.0.0.1:1/0"}}  # (Django's test signals reset caches)
    windows = page_windows(client)
    assert windows and all(win == one(client, name, f"points={firstpaint.INITIAL_POINTS}")
                           for name, win in windows.items())


def unpacked(resp) -> dict:
    """A format=f64 answer read as the page reads it (static/js/series.js, unpackWindows): the JSON answer's body."""
    import struct

    raw = resp.content
    size = struct.unpack_from("<I", raw)[0]
    head, cols = json.loads(raw[4:4 + size]), 4 + size + -(4 + size) % 8
    for win in head["windows"].values():
        if win is not None:
            n, at = win.pop("n"), cols + win.pop("at")
            win["steps"] = [int(x) for x in struct.unpack_from(f"<{n}d", raw, at)]
            win["values"] = [None if math.isnan(x) else x for x in struct.unpack_from(f"<{n}d", raw, at + 8 * n)]
    return head


@pytest.mark.parametrize("query", ["start=1000&end=4000&points=200", "start=0&end=4999&points=10",
                                   "start=3200&end=3300&points=1000", "points=20000"])
def test_the_packed_batch_is_the_json_batch_bit_for_bit(client, run, query):
    # a series with non-finite points, and values whose shortest decimal form takes up to 17 digits
    s = Series.objects.create(run=run, name="grad/norm/total")
    with transaction.atomic():
        storage.bulk_load(s.id, [(i, math.nan if i % 997 == 5 else math.inf if i == 3250 else math.pi * (i + 1) / 7)
                                 for i in range(5000)])
    names = f"series={contract.M_LOSS},grad/norm/total,no/such&{query}"
    as_json = client.get(f"/api/runs/w1/windows/?{names}")
    packed = client.get(f"/api/runs/w1/windows/?{names}&format=f64")
    assert packed.status_code == 200 and packed["Content-Type"] == "application/octet-stream" and packed["ETag"]
    got, want = unpacked(packed), as_json.json()
    assert got == want  # every float equal: the same 64 bits (== on floats; NaN never appears, it is null in both)
    assert got["windows"]["grad/norm/total"]["nonfinite"] and got["windows"]["no/such"] is None
    assert client.get(f"/api/runs/w1/windows/?{names}&format=xml").json()["parameter"] == "format"


def test_a_cached_window_is_the_text_the_page_carries_as_it_is(client, run):
    """The cache holds each window as the JSON text the page carries (compact, as the API answers it), spliced into
    the page data with no decoding and encoding again a view: the page's text of a window is the cached text."""
    from django.core.cache import cache

    html = client.get("/runs/w1/").content.decode()
    series = Series.objects.get(run=run, name=contract.M_LOSS)
    text = cache.get(firstpaint.cache_key(series))
    assert isinstance(text, str) and json.loads(text) == one(client, contract.M_LOSS,
                                                             f"points={firstpaint.INITIAL_POINTS}")
    assert f'"{contract.M_LOSS}":{text}' in html
