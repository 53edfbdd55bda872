"""The operator-command schema: one validation for the trainer, the CLI and the web."""

from __future__ import annotations

import json

import pytest

from observatory import contract
from observatory.contract import CommandError, command_args_from_words, parse_command, validate_command


def test_every_command_has_a_spec_and_its_defaults_validate():
    for name, spec in contract.COMMAND_SPECS.items():
        required = {a.name: (int(a.lo or 0) if a.type == "int" else 1.0 if a.type == "float" else
                             {"web": 1.0} if a.type == "weights" else a.choices[0])
                    for a in spec.args if a.default is None}
        out = validate_command(name, required)
        assert set(out) <= {a.name for a in spec.args}
    assert {n for n, s in contract.COMMAND_SPECS.items() if s.destructive} == {"stop", "rollback"}


@pytest.mark.parametrize("name,args,message", [
    ("explode", {}, "unknown command"),
    ("pause", {"x": 1}, "unexpected argument"),
    ("rollback", {}, "missing argument 'step'"),
    ("rollback", {"step": -1}, "step must be an integer >= 0"),
    ("rollback", {"step": True}, "step must be an integer"),
    ("set-lr-multiplier", {"value": float("nan")}, "value must be a number in [0, 1000]"),
    ("set-lr-multiplier", {"value": 1e9}, "value must be a number"),
    ("set-mixture", {"weights": {}}, "non-empty"),
    ("set-mixture", {"weights": {"web": -1}}, "weight of 'web'"),
    ("set-mixture", {"weights": {"web": 0}}, "at least one weight"),
    ("inject-fault", {"fault": "meteor"}, "fault must be one of lr-spike, nan, stall"),
    ("inject-fault", {"fault": "nan", "steps": 10**6}, "steps must be an integer >= 1 and <= 1000"),
])
def test_it_rejects_bad_arguments_with_the_reason(name, args, message):
    with pytest.raises(CommandError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate_command(name, args)


def test_it_fills_defaults_and_keeps_fault_arguments_to_their_fault():
    assert validate_command("rollback", {"step": 600}) == {"step": 600, "skip_batches": 0}
    assert validate_command("inject-fault", {"fault": "lr-spike"}) == {"fault": "lr-spike", "steps": 5,
                                                                        "factor": 100.0}
    assert validate_command("inject-fault", {"fault": "stall", "factor": 3}) == {"fault": "stall", "steps": 5,
                                                                                 "seconds": 10.0}
    assert validate_command("set-token-budget", {"tokens": 3e7}) == {"tokens": 30_000_000}


def test_command_line_words_become_the_same_args():
    assert command_args_from_words("rollback", ["600", "5"]) == {"step": 600, "skip_batches": 5}
    assert command_args_from_words("set-token-budget", ["3e7"]) == {"tokens": 30_000_000}
    assert command_args_from_words("set-mixture", ["web=0.7", "code=0.3"]) == {"weights": {"web": 0.7, "code": 0.3}}
    assert command_args_from_words("inject-fault", ["lr-spike", "3", "factor=30"]) == {
        "fault": "lr-spike", "steps": 3, "factor": 30}
    with pytest.raises(CommandError, match="too many positional"):
        command_args_from_words("pause", ["now"])


def test_a_command_entry_round_trips_and_bad_entries_say_why():
    f = contract.command_fields("cmd-0001", "set-lr-multiplier", {"value": 0.5}, reason="spike", user="ada")
    cmd = parse_command({k.encode(): v.encode() for k, v in f.items()})
    assert (cmd.id, cmd.name, cmd.args, cmd.reason, cmd.user) == ("cmd-0001", "set-lr-multiplier", {"value": 0.5},
                                                                  "spike", "ada")
    with pytest.raises(CommandError, match="command id"):
        parse_command({**f, "id": ""})
    with pytest.raises(CommandError, match="schema version"):
        parse_command({**f, "v": "9"})
    with pytest.raises(CommandError, match="not JSON"):
        parse_command({**f, "args": "{"})
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(CommandError, match="not JSON"):
        parse_command({**f, "args": json.dumps({"x": 1})[:-1] + ',"y":' + deep + "}"})


def test_the_metric_registry_describes_what_the_trainer_publishes():
    names = [contract.M_LOSS, contract.M_MFU, contract.router_metric(3, "routing_entropy"),
             contract.router_metric(0, "routing_hist") + "/7", contract.domain_loss("code"),
             contract.mixture_weight("web"), contract.grad_norm("layers/0/attn"), contract.gpu_metric(0, "util")]
    for name in names:
        assert contract.METRIC_NAME_RE.match(name), name
        assert contract.describe(name) is not None, name
    assert contract.describe("made/up") is None
    assert contract.describe(contract.M_MFU).unit == "fraction"


def test_signed_commands_verify_and_forgeries_say_why(tmp_path):
    key = b"k" * 32
    f = contract.sign_command("run-a", contract.command_fields("cmd-0001", "pause", reason="look"), key)
    contract.verify_command("run-a", {k.encode(): v.encode() for k, v in f.items()}, key)
    for forged, why in [({**f, "sig": ""}, "unsigned"), ({**f, "reason": "other"}, "bad signature"),
                        ({**f, "command": "stop"}, "bad signature")]:
        with pytest.raises(CommandError, match=why):
            contract.verify_command("run-a", forged, key)
    with pytest.raises(CommandError, match="bad signature"):
        contract.verify_command("run-b", f, key)  # replayed on another run
    with pytest.raises(CommandError, match="bad signature"):
        contract.verify_command("run-a", f, b"x" * 32)
    with pytest.raises(CommandError, match="no control key"):
        contract.verify_command("run-a", f, None)
    (tmp_path / "key").write_text("s" * 40 + "\n")
    assert contract.load_control_key({"OBS_CONTROL_KEY_FILE": str(tmp_path / "key")}) == b"s" * 40
    assert contract.load_control_key({}) is None
    with pytest.raises(ValueError, match="shorter"):
        contract.load_control_key({"OBS_CONTROL_KEY": "short"})


def test_every_command_carries_an_issue_time_and_a_nonce_under_its_signature():
    key = b"k" * 32
    a, b = (contract.command_fields("cmd-0001", "pause", reason="look") for _ in range(2))
    assert {"t", "nonce"} <= set(contract.SIGNED_FIELDS)
    assert len(a["nonce"]) == 32 and a["nonce"] != b["nonce"]  # 128 random bits each time
    signed = contract.sign_command("run-a", a, key)
    for changed in ({"nonce": b["nonce"]}, {"t": repr(float(a["t"]) + 1)}):
        with pytest.raises(CommandError, match="bad signature"):
            contract.verify_command("run-a", {**signed, **changed}, key)
    for missing, why in (("t", "issue time"), ("nonce", "nonce")):
        with pytest.raises(CommandError, match=why):
            parse_command({k: v for k, v in a.items() if k != missing})
    assert parse_command(a).nonce == a["nonce"]


def test_freshness_is_measured_against_now_with_a_stated_clock_skew():
    now = 1_000_000.0
    contract.check_fresh(now - contract.STALE_AFTER_S, now)
    contract.check_fresh(now + contract.MAX_CLOCK_SKEW_S, now)
    with pytest.raises(CommandError, match=rf"^stale: issued {contract.STALE_AFTER_S + 1} s ago \(more than "
                                           rf"{contract.STALE_AFTER_S} s\)"):
        contract.check_fresh(now - contract.STALE_AFTER_S - 1, now)
    with pytest.raises(CommandError, match=r"issued 31 s in the future"):
        contract.check_fresh(now + contract.MAX_CLOCK_SKEW_S + 1, now)


def test_a_run_key_is_derived_per_run_and_generation_and_loaded_for_one_run(tmp_path):
    master = b"m" * 32
    a0, a1, b0 = (contract.run_control_key(master, r, g) for r, g in (("run-a", 0), ("run-a", 1), ("run-b", 0)))
    assert len({a0, a1, b0, master}) == 4 and a0 == contract.run_control_key(master, "run-a")
    assert len(a0) == 64 and a0 != contract.run_control_key(b"n" * 32, "run-a")
    # the run id and the generation are length-prefixed: no choice of id makes two runs' keys collide
    assert contract.run_control_key(master, "a1", 0) != contract.run_control_key(master, "a", 10)
    f = contract.sign_command("run-b", contract.command_fields("cmd-00000001", "pause"), a0)
    with pytest.raises(CommandError, match="not signed with run run-b's control key"):
        contract.verify_command("run-b", f, b0)
    # a trainer or the CLI: its own run's key as given, else derived from a master this host holds
    assert contract.load_run_control_key("run-a", {"OBS_RUN_CONTROL_KEY": a1.decode()}) == a1
    assert contract.load_run_control_key("run-a", {"OBS_CONTROL_KEY": master.decode()}) == a0
    (tmp_path / "k").write_bytes(a1 + b"\n")
    assert contract.load_run_control_key("run-a", {"OBS_RUN_CONTROL_KEY_FILE": str(tmp_path / "k"),
                                                   "OBS_CONTROL_KEY": master.decode()}) == a1
    assert contract.load_run_control_key("run-a", {}) is None
    with pytest.raises(ValueError, match="OBS_RUN_CONTROL_KEY is shorter"):
        contract.load_run_control_key("run-a", {"OBS_RUN_CONTROL_KEY": "short"})
