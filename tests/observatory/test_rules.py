"""The shared rules as the contract states them: run ids, command ids, mixtures. Each entry point (trainer config,
CLI, web API, operator panel) has its own test that it gives these verdicts (the cases live in tests/conftest.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from observatory import contract
from tests.rules import mixture_ok

VALID_RUN_IDS = {"demo", "a.b_c-d", "A" * 64}
VALID_COMMAND_IDS = {"cmd-0001", "web-" + "f" * 32, "a:b.c_d-e", "x" * 200}


def test_the_run_id_rule(run_id_cases):
    assert {x for x in run_id_cases if contract.RUN_ID_RE.match(x)} == VALID_RUN_IDS


def test_the_command_id_rule(command_id_cases):
    assert {x for x in command_id_cases if contract.COMMAND_ID_RE.match(x)} == VALID_COMMAND_IDS


def test_the_mixture_rule_takes_relative_weights(mixture_cases):
    ok = [w for w in mixture_cases if mixture_ok(w)]
    assert ok == [{"a": 0.7, "b": 0.3}, {"a": 1, "b": 2}, {"a": 0.5, "b": 0.4}, {"a": 1, "b": 0}, {"a": 1e-9}]
    with pytest.raises(contract.MixtureError, match="sum must be finite"):
        contract.check_mixture({"a": 1e308, "b": 1e308})  # each finite, the sum not: the trainer could not scale it
    with pytest.raises(contract.MixtureError) as e:
        contract.check_mixture({"a": 1, "b": -1})
    assert e.value.domain == "b"


def test_a_command_carries_the_same_rules(command_id_cases, mixture_cases):
    for w in mixture_cases:
        try:
            contract.validate_command("set-mixture", {"weights": w})
            verdict = True
        except contract.CommandError:
            verdict = False
        assert verdict == mixture_ok(w), w
    for cid in command_id_cases:
        fields = contract.command_fields(cid, "pause", reason="look")
        try:
            contract.parse_command(fields)
            verdict = True
        except contract.CommandError as e:
            assert "command id" in str(e)
            verdict = False
        assert verdict == bool(contract.COMMAND_ID_RE.match(cid)), cid


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to evaluate the JavaScript form")
def test_the_patterns_served_to_json_schema_and_js_give_the_same_verdicts(run_id_cases, command_id_cases):
    # JSON Schema and the browser read RUN_ID_PATTERN / COMMAND_ID_PATTERN with ECMAScript semantics
    script = ("const [p, xs] = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "console.log(JSON.stringify(xs.map((x) => new RegExp(p, 'u').test(x))));")
    for pattern, rx, cases in ((contract.RUN_ID_PATTERN, contract.RUN_ID_RE, run_id_cases),
                               (contract.COMMAND_ID_PATTERN, contract.COMMAND_ID_RE, command_id_cases)):
        out = subprocess.run(["node", "-e", script], input=json.dumps([pattern, list(cases)]), capture_output=True,
                             text=True, check=True)
        assert json.loads(out.stdout) == [bool(rx.match(x)) for x in cases]



def test_routing_and_the_forecast_script_spell_no_metric_name_of_their_own():
    """Metric names come from the contract's registry (the script gets them in its page data)."""
    from observatory.contract import metrics

    names = {v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str) and "/" in v}
    names |= {metrics.ROUTER_PREFIX, *metrics.ROUTER_VECTORS}
    root = Path(__file__).resolve().parents[2]
    for rel in ("observatory/anomalies/routing.py", "static/js/forecast.js"):
        text = root.joinpath(rel).read_text()
        copies = sorted(n for n in names if f'"{n}"' in text or f"'{n}'" in text)
        assert not copies, f"{rel} spells {copies}: use observatory.contract's names"


def test_a_trailing_newline_is_no_part_of_a_run_id_or_a_metric_name():
    with pytest.raises(contract.ContractError, match="bad_run"):
        contract.decode(contract.metrics_fields("run\n", 1, {"loss": 1.0}))
    with pytest.raises(contract.ContractError, match="bad_name"):
        contract.decode(contract.metrics_fields("run", 1, {"train/loss\n": 1.0}))
    assert contract.decode(contract.metrics_fields("run", 1, {"train/loss": 1.0})).data["values"] == {"train/loss": 1.0}
