"""The trainer's entry points give the contract's verdict on run ids, command ids and mixtures: its config (run
name, stage mixtures), its sampler (set-mixture as applied), and its command line (`run --run-id`, `control --id`,
`control ... set-mixture`). Cases: tests/conftest.py; the rules: tests/observatory/test_rules.py."""

from __future__ import annotations

import json
import logging

import pytest

from observatory import contract
from tests.rules import mixture_ok
from training import cli
from training.config import DataSection, RunSection
from training.errors import ConfigError
from training.sampler import MixtureSampler
from training.sources import load_domains

DOMAINS = ("licenses", "docs_text")  # built-in domains the cases' "a" and "b" stand for


def as_domains(w: dict) -> dict:
    return {DOMAINS[0] if k == "a" else DOMAINS[1] if k == "b" else k: v for k, v in w.items()}


def raises(fn, exc) -> bool:
    try:
        fn()
    except exc:
        return True
    return False


@pytest.fixture
def cli_output(capsys):
    """Run the CLI in this process and return its exit status and output; its logging set-up is undone after."""
    saved = {n: (lg.handlers[:], lg.propagate, lg.level) for n in ("training", "observatory")
             for lg in [logging.getLogger(n)]}

    def run(*argv) -> tuple[int, str]:
        code = cli.main(list(argv))
        out = capsys.readouterr()
        return code, out.out + out.err

    yield run
    for name, (handlers, propagate, level) in saved.items():
        lg = logging.getLogger(name)
        lg.handlers[:], lg.propagate, lg.level = handlers, propagate, level


def test_the_config_takes_the_run_ids_the_contract_takes(run_id_cases):
    for x in run_id_cases:
        assert raises(lambda: RunSection(name=x), ConfigError) == (not contract.RUN_ID_RE.match(x)), repr(x)


def test_run_run_id_gives_the_contracts_verdict(tiny, cli_output, run_id_cases):
    # a forecast file that does not exist is the next check after the run id: reaching it means the id passed
    config = tiny(experiment={"forecast": str(tiny.directory / "no-such-forecast.json")})
    for x in run_id_cases:
        code, out = cli_output("run", "--config", str(config), f"--run-id={x}", "--no-redis")
        assert code == 2, out
        refused = "run-id:" in out
        assert refused == (not contract.RUN_ID_RE.match(x)) != ("experiment.forecast" in out), (repr(x), out)


def test_stage_mixtures_in_the_config_follow_the_mixture_rule(mixture_cases):
    for w in mixture_cases:
        refused = raises(lambda: DataSection(stages=("only",), stage_fractions=(1.0,), mixture={"only": as_domains(w)}),
                         ConfigError)
        assert refused == (not mixture_ok(w)), w


def test_the_sampler_applies_what_the_rule_accepts(mixture_cases):
    domains = load_domains(DataSection(builtin_domains=DOMAINS, max_bytes_per_domain=20_000))
    s = MixtureSampler(domains, DataSection(builtin_domains=DOMAINS), 16, 4, 0, token_budget=10**6)
    for w in mixture_cases:
        assert raises(lambda: s.set_weights(as_domains(w)), ConfigError) == (not mixture_ok(w)), w
    s.set_weights(as_domains({"a": 1, "b": 3}))  # relative: scaled to sum to 1
    assert s.weights() == {DOMAINS[0]: 0.25, DOMAINS[1]: 0.75}


def test_control_gives_the_contracts_verdict_before_sending(cli_output, redis_url, command_id_cases, mixture_cases):
    # an unknown run is what a valid command meets next (it is never sent): refused there means it passed the rules
    base = ("control", "no-such-run-0", "--reason", "rules", "--redis-url", redis_url)
    for cid in command_id_cases:
        code, out = cli_output(*base[:2], "pause", *base[2:], f"--id={cid}")
        assert code == 1 and ("unknown run" in out) == bool(contract.COMMAND_ID_RE.match(cid)), (repr(cid), out)
    for w in mixture_cases:
        code, out = cli_output(*base[:2], "set-mixture", json.dumps(w), *base[2:])
        assert code == 1 and ("unknown run" in out) == mixture_ok(w), (w, out)
