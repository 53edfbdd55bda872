"""Pages: the run list and a run's dashboard (its data comes from the API and the WebSocket)."""

import datetime as dt
import gzip
import json
import re

import pytest

from observatory import contract
from webapp.runs.models import Run, RunEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def run():
    return Run.objects.create(id="r1", name="demo run", state="training", last_step=9)


def page_data(html: str) -> dict:
    m = re.search(r'<script id="page-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def test_the_run_list_page_shows_runs_with_progress_and_polls_the_api(client, run):
    run.heartbeat = {"tokens": 250, "token_budget": 1000, "eta_s": 60.0, "steps_per_s": 2.0}
    run.save()
    resp = client.get("/runs/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "demo run" in html and "/runs/r1/" in html
    assert 'value="25"' in html  # tokens of budget
    assert "/static/js/runlist.js" in html and page_data(html)["poll_s"] > 0


def test_the_list_answers_only_the_rows_it_is_asked_for_with_the_pages_own_row(client, run):
    Run.objects.create(id="imp", name="imported one", source="wandb")
    page = client.get("/runs/").content.decode()
    rows = client.get("/runs/?rows=imp,nope").content.decode()
    assert rows.count("<tr ") == 1 and 'data-run="imp"' in rows and "imported</span>" in rows
    row = re.search(r'<tr data-run="imp">.*?</tr>', page, re.S).group(0)
    assert row == re.search(r'<tr data-run="imp">.*?</tr>', rows, re.S).group(0)  # one template renders both
    for bad in ("", "a,,b/../c", ",".join(f"r{i}" for i in range(101)), "<script>"):
        resp = client.get("/runs/", {"rows": bad})
        assert resp.status_code == 400 and b"run ids" in resp.content and b"<script>" not in resp.content


def test_the_list_polls_its_rows_as_a_fragment_answered_304_while_nothing_changed(client, run):
    """runlist.js asks for the table's rows (/runs/?part=rows) every poll: the server renders them, time left
    included, and answers 304 with no body to the ETag of rows that did not change."""
    run.state, run.health = "training", "alive"
    run.heartbeat = {"tokens": 250, "token_budget": 1000, "eta_s": 125.0, "steps_per_s": 2.0}
    run.save()
    first = client.get("/runs/?part=rows")
    assert first.status_code == 200 and first["Cache-Control"] == "no-cache" and first["ETag"].startswith('W/"')
    html = first.content.decode()
    assert html.count("<tr ") == 1 and '<td class="num eta">≈ 2 min 5 s</td>' in html and "<html" not in html
    again = client.get("/runs/?part=rows", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == first["ETag"]
    Run.objects.filter(pk=run.pk).update(last_step=77)
    changed = client.get("/runs/?part=rows", HTTP_IF_NONE_MATCH=first["ETag"])
    assert changed.status_code == 200 and changed["ETag"] != first["ETag"] and b">77</td>" in changed.content
    zipped = client.get("/runs/?part=rows", HTTP_ACCEPT_ENCODING="gzip, br")  # (to a browser: gzipped)
    assert zipped["Content-Encoding"] == "gzip" and gzip.decompress(zipped.content) == changed.content


def test_the_api_summary_carries_progress_for_the_live_list(client, run):
    run.heartbeat = {"tokens": 250, "token_budget": 1000, "eta_s": 60.0, "steps_per_s": 2.0, "pid": 7}
    run.save()
    (r,) = client.get("/api/runs/").json()["runs"]
    assert r["progress"] == {"tokens": 250, "token_budget": 1000, "eta_s": 60.0, "steps_per_s": 2.0}


def test_the_dashboard_page_loads_vendored_plotly_and_no_cdn(client, run):
    resp = client.get("/runs/r1/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "/static/vendor/plotly-cartesian.min.js" in html and "/static/js/dashboard.js" in html
    # no other origin; the link-preview tags name this site's own absolute URLs, as Open Graph requires
    outside = re.sub(r'<meta (?:property|name)="(?:og|twitter):[^"]+" content="http://testserver/[^"]*">', "", html)
    assert "https://" not in outside and "http://" not in outside
    assert '"default_metrics"' in html
    assert 'href="#main"' in html and 'id="theme-toggle"' in html  # skip link, dark-mode toggle


def test_the_dashboards_answer_preloads_the_scripts_its_first_paint_runs(client, run):
    """The answer's Link header names the scripts the page's head runs before its first paint, in their order, so
    that the browser asks for them as the answer comes, before it has set up the page to parse it."""
    resp = client.get("/runs/r1/")
    html = resp.content.decode()
    scripts = re.findall(r'<script defer fetchpriority="high" blocking="render" src="([^"]+)"></script>', html)
    assert scripts == ["/static/js/dashboard-bundle.js", "/static/js/dashboard.js"]
    preloads = [re.fullmatch(r"<([^>]+)>; rel=preload; as=script; fetchpriority=high", link.strip())[1]
                for link in resp["Link"].split(",")]
    assert preloads == scripts


def test_the_dashboard_names_charts_from_the_contract_registry(client, run):
    page = page_data(client.get("/runs/r1/").content.decode())
    assert page["loss_metrics"] == {"train": contract.M_LOSS, "eval": contract.M_EVAL_LOSS}  # forecast.js's charts
    reg = page["registry"]
    assert reg["fixed"][contract.M_LOSS]["title"] == "Training loss"
    assert reg["fixed"][contract.M_LOSS]["unit"] == "nats"
    assert "router_load" in reg["glossary"] and "token_drop" in reg["glossary"]
    # patterns are plain regexes a browser reads the same way
    pattern, title = reg["titles"][0]
    assert re.match(pattern, "train/router/layer_2/routing_hist/5") and "{2}" in title
    assert [c["topic"] for c in page["charts"]] == ["loss", "learning_rate", "grad_norm", "throughput", "token_drop"]


def test_mfu_is_hidden_when_the_peak_is_a_guess_and_shown_when_known(client, run):
    RunEvent.objects.create(run=run, kind="event", name="compiled", step=0,
                            payload={"peak_flops": 1.5e12, "peak_flops_source": "cpu assumption: 4 cores",
                                     "flops_per_token": 1e6})
    page = page_data(client.get("/runs/r1/").content.decode())
    tput = page["charts"][3]
    assert contract.M_MFU not in tput.get("optional", []) and "MFU hidden" in tput["note"]
    assert not page["peak"]["known"]
    RunEvent.objects.create(run=run, kind="event", name="compiled", step=0,
                            payload={"peak_flops": 989e12, "peak_flops_source": "H100 dense bf16 x 1",
                                     "flops_per_token": 1e9})
    page = page_data(client.get("/runs/r1/").content.decode())
    assert contract.M_MFU in page["charts"][3]["optional"]
    # the trainer's own CPU measurement (training.telemetry.peak_flops) is a peak, not a guess
    RunEvent.objects.create(run=run, kind="event", name="compiled", step=0,
                            payload={"peak_flops": 2.1e11, "flops_per_token": 1e6,
                                     "peak_flops_source": "cpu: measured 512x512 fp32 matmul"})
    page = page_data(client.get("/runs/r1/").content.decode())
    assert page["peak"]["known"] and contract.M_MFU in page["charts"][3]["optional"]
    RunEvent.objects.create(run=run, kind="event", name="compiled", step=0,
                            payload={"peak_flops": 989e12, "peak_flops_source": "H100 dense bf16 x 1",
                                     "flops_per_token": 1e9})
    page = page_data(client.get("/runs/r1/").content.decode())
    # values no hardware can reach are flagged, never drawn as part of the line
    assert page["bounds"][contract.M_MFU]["max"] == 1.0
    assert page["bounds"][contract.M_TOKENS_PER_S]["max"] == pytest.approx(989e12 / 1e9)


def test_a_client_run_gets_only_the_charts_of_the_series_it_has(client, run):
    # issue 43: a client run logging loss and LR showed empty Throughput and Token drop charts with the trainer's text
    from webapp.metrics.models import Series

    for name in (contract.M_LOSS, contract.M_LR, "eval/accuracy"):
        Series.objects.create(run=run, name=name, count=1, first_step=0, last_step=0)
    page = page_data(client.get("/runs/r1/").content.decode())
    assert [c["topic"] for c in page["charts"]] == ["loss", "learning_rate"]
    Series.objects.create(run=run, name=contract.domain_loss("code"), count=1, first_step=0, last_step=0)
    Series.objects.create(run=run, name=contract.M_DROP, count=1, first_step=0, last_step=0)
    page = page_data(client.get("/runs/r1/").content.decode())
    assert [c["topic"] for c in page["charts"]] == ["loss", "learning_rate", "token_drop"]


def test_a_run_with_a_forecast_shows_its_held_out_loss_where_the_band_is_drawn(client, run):
    from webapp.metrics.models import Series

    Series.objects.create(run=run, name=contract.M_LOSS, count=1, first_step=0, last_step=0)
    RunEvent.objects.create(run=run, kind="event", name="forecast", step=0, payload={})
    page = page_data(client.get("/runs/r1/").content.decode())
    assert [c["metrics"][0] for c in page["charts"]] == [contract.M_LOSS, contract.M_EVAL_LOSS]
    assert page["charts"][1]["title"] == "Held-out loss"


def test_a_measured_cpu_peak_flags_no_real_step_as_impossible(client, run):
    # issue 43: the demo's throughput chart said "26 impossible ▲" on real steps: its peak is the trainer's own
    # best-of matmul, measured while other processes shared the CPU, and real steps went past it
    RunEvent.objects.create(run=run, kind="event", name="compiled", step=0,
                            payload={"peak_flops": 2.1e11, "flops_per_token": 1e6,
                                     "peak_flops_source": "cpu: measured 512x512 fp32 matmul"})
    page = page_data(client.get("/runs/r1/").content.decode())
    assert page["peak"]["known"] and page["bounds"] == {}


def test_a_restart_keeps_the_first_start_and_reads_as_resumed(client, run):
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    RunEvent.objects.create(run=run, kind="state", name="starting", step=0, t=t0)
    RunEvent.objects.create(run=run, kind="state", name="training", step=0, t=t0 + dt.timedelta(seconds=5))
    RunEvent.objects.create(run=run, kind="state", name="starting", step=0, t=t0 + dt.timedelta(hours=1))
    RunEvent.objects.create(run=run, kind="rewind", name="rewind", step=20, t=t0 + dt.timedelta(hours=1),
                            payload={"from_step": 29, "to_step": 20})
    run.started_at = t0 + dt.timedelta(hours=1)  # the restart's `run` message moved it
    run.save()
    html = client.get("/runs/r1/").content.decode()
    assert "2026-01-01 00:00" in html  # "started": the first start, not the restart
    page = page_data(html)
    assert page["rewinds"] == [{"from_step": 29, "to_step": 20, "label": "resumed at 20",
                                "t": (t0 + dt.timedelta(hours=1)).isoformat()}]  # (when: marks before it abandoned)
    assert [a[0] for a in page["time_anchors"]] == [0, 20]  # step -> time for the wall-time axis


def test_the_dashboard_of_an_unknown_run_is_404(client, db):
    assert client.get("/runs/nope/").status_code == 404


def test_the_page_data_escapes_markup_in_spliced_json_and_the_rest(client):
    """pagedata.script: Django's json_script, with values that are JSON text already (RawJSON) spliced in: markup in
    either comes out escaped, and the whole parses back to the values."""
    from webapp.runs import pagedata

    page = {"name": "</script><script>alert(1)</script> & co", "raw": pagedata.RawJSON('{"t": "</script>&"}')}
    html = str(pagedata.script(page, "pd"))
    body = re.fullmatch(r'<script id="pd" type="application/json">(.*)</script>', html, re.S)[1]
    assert "<" not in body and ">" not in body and "&" not in body
    assert json.loads(body) == {"name": page["name"], "raw": {"t": "</script>&"}}
    assert json.loads(re.fullmatch(r"<script[^>]*>(.*)</script>", str(pagedata.script({"raw": page["raw"]})))[1]) \
        == {"raw": {"t": "</script>&"}}
