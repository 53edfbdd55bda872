"""The pre-registration record: its exact shape, a hash that round-trips, and edits that are caught and named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from observatory.scaling import Points, fit_law, make_forecast
from observatory.scaling import registration as reg

C = np.geomspace(1e9, 5e10, 5)
LOSS = 1.2 + 40.0 * C ** -0.12


@pytest.fixture(scope="module")
def record() -> dict:
    fc = make_forecast(fit_law("compute", Points.of(C=C), LOSS, bootstrap=10), 2.3e5, 2.0e6, C=3e12, points=16)
    return reg.make_registration(
        fc, experiment={"name": "demo", "goal": "forecast the target", "hypothesis": "a power law in C"},
        rung_runs=["lad-a", "lad-b", "lad-c", "lad-d", "lad-e"],
        target={"config_hash": "ab" * 32, "run_id": "target", "N": 2.3e5, "D": 2.0e6}, created_at=1.7e9 + 0.25)


def test_the_record_has_exactly_the_agreed_shape(record):
    assert set(record) == {"kind", "version", "experiment", "forecast", "rung_runs", "target", "created_at",
                           "sha256"}
    assert record["kind"] == "observatory.forecast_registration" and record["version"] == 1
    assert record["experiment"] == {"name": "demo", "goal": "forecast the target", "hypothesis": "a power law in C"}
    assert record["target"] == {"config_hash": "ab" * 32, "run_id": "target", "N": 2.3e5, "D": 2.0e6,
                                "x": "tokens"}
    assert record["rung_runs"] == ["lad-a", "lad-b", "lad-c", "lad-d", "lad-e"]
    assert record["created_at"] == 1.7e9 + 0.25
    assert record["forecast"]["law"] == "compute" and len(record["forecast"]["sha256"]) == 64
    assert record["forecast"]["hero"]["C"] == 3e12
    body = {k: v for k, v in record.items() if k != "sha256"}
    assert record["sha256"] == reg.registration_hash(body) and len(record["sha256"]) == 64


def test_the_hash_round_trips_through_json(record):
    text = reg.to_json(record)
    back = reg.from_json(text)
    assert back == record and back["sha256"] == record["sha256"]
    shuffled = json.loads(json.dumps(dict(reversed(list(record.items())))))  # key order does not matter
    assert reg.verify(shuffled)["sha256"] == record["sha256"]


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["forecast"]["hero"].__setitem__("loss", r["forecast"]["hero"]["loss"] - 0.01), "forecast hash"),
    (lambda r: r.__setitem__("created_at", r["created_at"] - 3600), "hash mismatch"),
    (lambda r: r["target"].__setitem__("config_hash", "cd" * 32), "hash mismatch"),
    (lambda r: r["experiment"].__setitem__("hypothesis", "anything goes"), "hash mismatch"),
    (lambda r: r["rung_runs"].pop(), "hash mismatch"),
    (lambda r: r.__setitem__("sha256", "0" * 64), "hash mismatch"),
    (lambda r: r.__setitem__("kind", "something.else"), "kind"),
    (lambda r: r.pop("target"), "missing field"),
    (lambda r: r.__setitem__("extra", 1), "unknown field"),
    (lambda r: r["target"].__setitem__("x", "flops"), "target.x"),
    (lambda r: r["target"].__setitem__("N", -1), "target.N"),
])
def test_tampering_is_detected_and_named(record, edit, message):
    tampered = json.loads(json.dumps(record))
    edit(tampered)
    with pytest.raises(ValueError, match=message):
        reg.verify(tampered)
    with pytest.raises(ValueError, match=message):
        reg.from_json(json.dumps(tampered))


def test_a_re_hashed_forecast_edit_is_still_caught_by_the_record_hash(record):
    """Editing the forecast and fixing its own hash still breaks the registration's hash."""
    from observatory.scaling import Forecast

    edited = json.loads(json.dumps(record))
    edited["forecast"]["hero"]["loss"] -= 0.01
    edited["forecast"]["sha256"] = Forecast.from_dict(edited["forecast"], verify=False).sha256
    with pytest.raises(ValueError, match="hash mismatch"):
        reg.verify(edited)


def test_not_json_is_a_value_error():
    with pytest.raises(ValueError, match="not JSON"):
        reg.from_json("{nope")
    with pytest.raises(ValueError, match="JSON object"):
        reg.from_json("[1, 2]")
