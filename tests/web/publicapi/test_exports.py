"""Exports: series as CSV/JSON/Parquet (full resolution and downsampled, non-finite values exact), a run's
records as JSON, streamed answers."""

from __future__ import annotations

import csv
import io
import json
import math

import pyarrow.parquet as pq
import pytest
from django.db import transaction

from webapp.metrics import storage
from webapp.metrics.models import Series
from webapp.runs.models import Run, RunEvent

pytestmark = pytest.mark.django_db
RUN = "export-run"
SPECIAL = {5: math.nan, 6: math.inf, 7: -math.inf}


def _values(n: int) -> list[tuple[int, float]]:
    return [(i, SPECIAL.get(i, 0.1 * i + 1e-17 * i * i if i % 3 else -1.0 / (i + 3))) for i in range(n)]


@pytest.fixture
def run():
    run = Run.objects.create(id=RUN, name="export", state="stopped", last_step=99)
    loss = Series.objects.create(run=run, name="train/loss")
    lr = Series.objects.create(run=run, name="train/lr,odd")  # a comma in the name: repeated series= params
    with transaction.atomic():
        storage.bulk_load(loss.id, _values(50_001))  # > 2 keyset chunks
        storage.bulk_load(lr.id, [(i * 10, 1.0 / (i + 1)) for i in range(100)])
    return run


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _rows_from(fmt: str, content: bytes) -> list[tuple[str, int, float]]:
    if fmt == "csv":
        reader = csv.reader(io.StringIO(content.decode()))
        assert next(reader) == ["series", "step", "value"]
        return [(s, int(step), float(v)) for s, step, v in reader]
    if fmt == "json":
        body = json.loads(content)
        return [(s["name"], step, float(v)) for s in body["series"] for step, v in s["points"]]
    t = pq.read_table(io.BytesIO(content))
    return list(zip(t["series"].to_pylist(), t["step"].to_pylist(), t["value"].to_pylist()))


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_full_resolution_export_reads_back_exact_with_nonfinite_values(client, run, fmt):
    resp = client.get(f"/api/v1/runs/{RUN}/export.{fmt}?series=train/loss")
    assert resp.status_code == 200 and resp.streaming
    assert resp["Content-Disposition"] == f'attachment; filename="{RUN}-full.{fmt}"'
    rows = _rows_from(fmt, b"".join(resp.streaming_content))
    want = _values(50_001)
    assert len(rows) == len(want)
    assert all(name == "train/loss" and step == s and _same(v, x) for (name, step, v), (s, x) in zip(rows, want))
    assert [math.isnan(rows[5][2]), rows[6][2], rows[7][2]] == [True, math.inf, -math.inf]


def test_csv_and_json_spell_nonfinite_values_as_javascript_does(client, run):
    text = b"".join(client.get(f"/api/runs/{RUN}/export.csv?series=train/loss&end=8").streaming_content).decode()
    assert text.splitlines()[6:9] == ["train/loss,5,NaN", "train/loss,6,Infinity", "train/loss,7,-Infinity"]
    body = json.loads(b"".join(client.get(f"/api/runs/{RUN}/export.json?series=train/loss&end=8").streaming_content))
    assert body["series"][0]["points"][5:8] == [[5, "NaN"], [6, "Infinity"], [7, "-Infinity"]]


def test_whole_run_export_has_every_series_in_name_order(client, run):
    resp = client.get(f"/api/runs/{RUN}/export.parquet")
    t = pq.read_table(io.BytesIO(b"".join(resp.streaming_content)))
    assert t.num_rows == 50_001 + 100
    assert sorted(set(t["series"].to_pylist())) == ["train/loss", "train/lr,odd"]
    assert pq.ParquetFile(io.BytesIO(b"".join(client.get(
        f"/api/runs/{RUN}/export.parquet").streaming_content))).num_row_groups >= 4  # one per keyset chunk


def test_series_parameter_takes_commas_or_repeats_and_names_missing_ones(client, run):
    rows = _rows_from("csv", b"".join(client.get(
        f"/api/runs/{RUN}/export.csv?series=train/lr,odd&end=30").streaming_content))
    assert rows == [("train/lr,odd", 0, 1.0), ("train/lr,odd", 10, 0.5), ("train/lr,odd", 20, 1 / 3),
                    ("train/lr,odd", 30, 0.25)]
    resp = client.get(f"/api/runs/{RUN}/export.json?series=train/loss,nope")
    assert resp.status_code == 404 and resp.json()["missing"] == ["nope"] and resp.json()["code"] == "not_found"
    assert client.get(f"/api/runs/{RUN}/export.csv?points=3").json()["parameter"] == "points"
    assert client.get("/api/runs/no-such-run/export.csv").status_code == 404


def test_downsampled_export_is_the_charts_window_with_spikes_and_nonfinite_kept(client, run):
    from webapp.metrics import queries

    series = Series.objects.get(run_id=RUN, name="train/loss")
    win = queries.window(series, 0, 2**62, 500).window
    rows = _rows_from("json", b"".join(client.get(
        f"/api/runs/{RUN}/export.json?series=train/loss&points=500").streaming_content))
    assert len(rows) <= 500 + 3
    got = {step: v for _, step, v in rows}
    assert all(_same(got[s], v) for s, v in zip(win.steps, win.values) if v is not None)
    assert math.isnan(got[5]) and got[6] == math.inf and got[7] == -math.inf
    top = max((p for p in _values(50_001) if math.isfinite(p[1])), key=lambda p: p[1])
    assert got[top[0]] == top[1]  # the maximum survives downsampling


def test_records_export_has_events_anomalies_and_annotations(client, run):
    from webapp.anomalies.models import Anomaly

    for i in range(3):
        RunEvent.objects.create(run=run, kind="event", name=f"e{i}", step=i, payload={"dir": "/srv/x/y"})
    Anomaly.objects.create(run_id=RUN, key="loss_spike train/loss 10", kind="loss_spike", metric="train/loss",
                           start_step=10, peak_step=10, detected_step=10, severity="critical", score=2.0)
    resp = client.get(f"/api/v1/runs/{RUN}/records.json")
    assert resp.status_code == 200 and resp["API-Version"] == "1"
    body = json.loads(b"".join(resp.streaming_content))
    assert [e["name"] for e in body["events"]] == ["e0", "e1", "e2"]
    assert "/srv/" not in json.dumps(body["events"])  # the public sees redacted payloads, as on /api/runs/<id>/
    assert [a["kind"] for a in body["anomalies"]] == ["loss_spike"] and body["annotations"] == []
    assert body["run"]["id"] == RUN and body["full_detail"] is False
