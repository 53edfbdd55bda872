"""The wire contract: what decodes, what is rejected and with which reason."""

from __future__ import annotations

import json
import math

import pytest

from observatory import contract
from observatory.contract import ContractError


def fields(kind="metrics", run="r1", v="1", **data):
    data.setdefault("t", 1.0)
    if kind == "metrics":
        data.setdefault("step", 3)
        data.setdefault("values", {"train/loss": 2.5})
    return {"v": v, "kind": kind, "run": run, "data": json.dumps(data)}


def test_it_round_trips_metrics_with_non_finite_values():
    f = contract.metrics_fields("r1", 7, {"train/loss": float("nan"), "grad/norm/total": float("inf"), "x": 1})
    msg = contract.decode({k.encode(): v.encode() for k, v in f.items()}, expect_run="r1")
    assert msg.kind == "metrics" and msg.data["step"] == 7
    assert math.isnan(msg.data["values"]["train/loss"])
    assert msg.data["values"]["grad/norm/total"] == math.inf and msg.data["values"]["x"] == 1.0


@pytest.mark.parametrize("kind,data", [
    ("run", {"name": "demo", "config": {"a": 1}}),
    ("event", {"step": 4, "name": "lr_replan", "payload": {"old": 1}}),
    ("state", {"state": "paused", "step": 4, "detail": ""}),
    ("heartbeat", {"phase": "training", "step": 4, "tokens": 10, "eta_s": 3.0, "steps_per_s": 2.0}),
    ("rewind", {"from_step": 130, "to_step": 100}),
    ("manifest", {"manifest": {"domains": []}}),
])
def test_it_accepts_every_kind(kind, data):
    msg = contract.decode(contract.encode("r1", kind, {"t": 1.0, **data}))
    assert msg.kind == kind and msg.data["t"] == 1.0


@pytest.mark.parametrize("mutate,reason", [
    (lambda f: f.pop("data"), "missing_field"),
    (lambda f: f.update(v="9"), "bad_version"),
    (lambda f: f.update(kind="gossip"), "unknown_kind"),
    (lambda f: f.update(run="bad run id!"), "bad_run"),
    (lambda f: f.update(data="{not json"), "bad_json"),
    (lambda f: f.update(data="[1, 2]"), "wrong_type"),
    (lambda f: f.update(data="x" * (contract.MAX_PAYLOAD_BYTES + 1)), "oversized"),
    (lambda f: f.update(data=json.dumps({"t": 1, "values": {}})), "missing_field"),
    (lambda f: f.update(data=json.dumps({"t": 1, "step": -1, "values": {}})), "wrong_type"),
    (lambda f: f.update(data=json.dumps({"t": 1, "step": 2**63, "values": {}})), "wrong_type"),
    (lambda f: f.update(data=json.dumps({"t": 1, "step": True, "values": {}})), "wrong_type"),
    (lambda f: f.update(data=json.dumps({"t": 1, "step": 1, "values": {"loss": "low"}})), "wrong_type"),
    (lambda f: f.update(data=json.dumps({"t": 1, "step": 1, "values": {"bad name": 1}})), "bad_name"),
    (lambda f: f.update(data=json.dumps({"t": "noon", "step": 1, "values": {}})), "wrong_type"),
])
def test_it_rejects_malformed_entries_with_a_countable_reason(mutate, reason):
    f = fields()
    mutate(f)
    with pytest.raises(ContractError) as exc:
        contract.decode(f)
    assert exc.value.reason == reason


def test_it_rejects_an_entry_on_another_runs_stream():
    with pytest.raises(ContractError) as exc:
        contract.decode(fields(run="r2"), expect_run="r1")
    assert exc.value.reason == "bad_run"


def test_it_rejects_a_rewind_that_goes_forward_and_unknown_states():
    with pytest.raises(ContractError):
        contract.encode("r1", "rewind", {"t": 1.0, "from_step": 5, "to_step": 9})
    with pytest.raises(ContractError):
        contract.encode("r1", "state", {"t": 1.0, "state": "dancing", "step": 0})


def test_deadletter_fields_keep_the_raw_entry_even_when_undecodable():
    dl = contract.deadletter_fields("obs:run:r1:telemetry", "1-0", "bad_json", {b"data": b"\xff\xfe"})
    assert dl["reason"] == "bad_json" and dl["id"] == "1-0" and "\\xff" in dl["raw"]


def test_key_names_are_stable():
    # The web and the worker are deployed separately: renaming a key is a breaking protocol change.
    assert contract.telemetry_stream("r1") == "obs:run:r1:telemetry"
    assert contract.control_stream("r1") == "obs:run:r1:control"
    assert contract.ack_stream("r1") == "obs:run:r1:acks"
    assert contract.live_group("r1") == "run.r1"


def test_ack_fields_refuse_unknown_status():
    assert contract.ack_fields("c1", "applied", step=5)["step"] == "5"
    with pytest.raises(ValueError):
        contract.ack_fields("c1", "maybe")


def test_it_rejects_payloads_nested_too_deep_without_recursing():
    raw = '{"t":1.0,"step":1,"name":"x","payload":' + '{"a":' * 5000 + "{}" + "}" * 5000 + "}"
    with pytest.raises(ContractError) as e:
        contract.decode({"v": "1", "kind": "event", "run": "r1", "data": raw})
    assert e.value.reason in ("too_deep", "bad_json")
    raw = '{"t":1.0,"step":1,"name":"x","payload":' + '{"a":' * 40 + "{}" + "}" * 40 + "}"
    with pytest.raises(ContractError, match="too_deep"):
        contract.decode({"v": "1", "kind": "event", "run": "r1", "data": raw})
