"""The ladder runner and pre-registration on the trainer side: config hash, late/foreign forecasts refused, the
`forecast` event on every (re)start, and a real tiny ladder that survives a SIGKILL mid-rung."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from observatory import contract
from observatory.scaling import Points, fit_law, make_forecast
from observatory.scaling import registration as reg_lib
from training.config import load
from training.experiment import config_hash
from training.flops import counts
from training.ladder import final_loss

ROOT = Path(__file__).resolve().parents[2]


def registration_for(cfg, created_at: float, run_id: str = "tiny", **target) -> dict:
    c = np.geomspace(1e9, 3e10, 4)
    fc = make_forecast(fit_law("compute", Points.of(C=c), 1.5 + 30 * c ** -0.1, bootstrap=0), 3e4, 1e6, points=8)
    return reg_lib.make_registration(
        fc, experiment={"name": "exp", "goal": "g", "hypothesis": "h"}, rung_runs=["r1", "r2"],
        target={"config_hash": config_hash(cfg), "run_id": run_id, "N": 3e4, "D": 1e6, **target},
        created_at=created_at)


def write(path: Path, record: dict) -> Path:
    path.write_text(reg_lib.to_json(record))
    return path


def test_the_config_hash_ignores_identity_and_experiment_but_not_what_is_trained(tiny):
    base = tiny.load()
    same = [tiny.load(run={"name": "other", "steps": 7}, experiment={"name": "x", "forecast": "f.json"},
                      checkpoint={"every_steps": 3}, sinks={"heartbeat_s": 1.0}, train={"eval_every": 5})]
    for cfg in same:
        assert config_hash(cfg) == config_hash(base)
    for changed in ({"model": {"d_model": 64}}, {"train": {"token_budget": 2_000_000}}, {"train": {"lr": 1e-3}},
                    {"run": {"seed": 4}}, {"data": {"tokenizer": "bpe", "max_bytes_per_domain": 100_000},
                                           "model": {"vocab_size": 512}}):
        assert config_hash(tiny.load(**changed)) != config_hash(base), changed


def _refused(trainer_cli, config: Path, *args: str) -> str:
    out = trainer_cli.run(config, "--no-redis", *args)
    assert out.returncode == 2, out.stdout + out.stderr
    return out.stderr


def test_the_trainer_refuses_a_foreign_an_edited_and_a_missing_registration(tmp_path, tiny, trainer_cli):
    other = registration_for(tiny.load(model={"d_model": 64}), time.time() - 60)
    path = write(tmp_path / "other.json", other)
    err = _refused(trainer_cli, tiny(experiment={"forecast": str(path)}))
    assert "config error: experiment.forecast" in err and "registered for another config" in err
    edited = json.loads(json.dumps(registration_for(tiny.load(), time.time() - 60)))
    edited["forecast"]["hero"]["loss"] -= 0.1
    path = write(tmp_path / "edited.json", edited)
    err = _refused(trainer_cli, tiny(experiment={"forecast": str(path)}))
    assert "experiment.forecast" in err and "hash mismatch" in err
    err = _refused(trainer_cli, tiny(experiment={"forecast": str(tmp_path / "absent.json")}))
    assert "no such file" in err
    path = write(tmp_path / "named.json", registration_for(tiny.load(), time.time() - 60, run_id="someone-else"))
    err = _refused(trainer_cli, tiny(experiment={"forecast": str(path)}))
    assert "registered for run 'someone-else', not 'tiny'" in err


@pytest.mark.slow
def test_a_registration_made_after_the_run_started_is_refused_even_on_resume(tmp_path, tiny, start_trainer,
                                                                            trainer_cli, run_id):
    cfg_path = tiny()
    bg = start_trainer(load(cfg_path), run_id, None)
    bg.wait_step(2)
    bg.stop()
    late = write(tmp_path / "late.json", registration_for(load(cfg_path), time.time(), run_id))
    with_forecast = tiny(experiment={"forecast": str(late)})
    err = _refused(trainer_cli, with_forecast, "--run-id", run_id)
    assert "after run" in err and "first start" in err and "must be made before the run starts" in err
    # The same registration is fine for a run that starts after it (here: --fresh starts the run over).
    out = trainer_cli.run(with_forecast, "--no-redis", "--run-id", run_id, "--fresh", "--steps", "1", timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_the_forecast_event_is_published_on_every_start_to_redis_and_jsonl(tmp_path, tiny, start_trainer, jsonl,
                                                                           stream, redis_url, redis_client, run_id):
    record = registration_for(tiny.load(), time.time() - 1, run_id)
    cfg = tiny.load(experiment={"name": "exp", "forecast": str(write(tmp_path / "reg.json", record))})
    out = tmp_path / "m.jsonl"
    for steps in (3, 6):  # a first start, then a resume from the checkpoint the stop saved
        bg = start_trainer(cfg, run_id, redis_url, out)
        bg.wait_step(steps)
        bg.stop()
    recs = jsonl(out)
    events = [r for r in recs if r["kind"] == "event" and r["name"] == "forecast"]
    assert [e["payload"] for e in events] == [record, record]
    first_metrics = next(i for i, r in enumerate(recs) if r["kind"] == "metrics")
    assert recs.index(events[0]) < first_metrics and events[0]["step"] == 0
    resumed = next(r for r in recs if r["kind"] == "event" and r["name"] == "resumed")
    assert events[1]["step"] == resumed["payload"]["from_checkpoint"] > 0
    assert [r["experiment"] for r in recs if r["kind"] == "run"] == \
        [{"name": "exp", "goal": "", "hypothesis": "", "forecast_sha256": record["sha256"]}] * 2
    msgs = [m for m in stream(redis_client, run_id) if m.kind == "event" and m.data["name"] == "forecast"]
    assert [m.data["payload"] for m in msgs] == [record, record]
    assert reg_lib.verify(msgs[0].data["payload"])["sha256"] == record["sha256"]


# ---------------------------------------------------------------------------------------------- the ladder
RUNGS = [("d8", {"model.mlp": "dense", "model.d_model": 8, "model.n_layers": 1, "model.d_ff": 16}, 3_000),
         ("d16", {"model.mlp": "dense", "model.d_model": 16, "model.n_layers": 1, "model.d_ff": 32}, 5_000),
         ("m16", {"model.mlp": "moe", "model.d_model": 16, "model.n_layers": 2, "model.d_ff": 32}, 12_000),
         ("d24", {"model.mlp": "dense", "model.d_model": 24, "model.n_layers": 2, "model.d_ff": 48}, 12_000)]

TARGET_TOKENS = 12_000  # C ≈ 1.9× the largest rung's


def ladder_toml(tmp_path: Path, base: Path, target: Path, name: str) -> Path:
    lines = ["[ladder]", f'name = "{name}"', f'base = "{base}"', f'target = "{target}"', 'law = "compute"',
             "eval_points = 2", "bootstrap = 20", f'dir = "{tmp_path / "ladder"}"',
             "[ladder.set]", '"checkpoint.every_steps" = 50', '"model.n_heads" = 2', '"model.n_kv_heads" = 1']
    for rung, sets, tokens in RUNGS:
        inline = ", ".join(f'"{k}" = {json.dumps(v)}' for k, v in sets.items())
        lines += ["[[ladder.rung]]", f'name = "{rung}"', f"tokens = {tokens}", f"set = {{ {inline} }}"]
    path = tmp_path / "ladder.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def ladder_cmd(config: Path) -> list[str]:
    return [sys.executable, "-m", "training", "ladder", "--config", str(config), "--no-redis"]


def metrics_steps(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.startswith('{"kind":"metrics"'))


@pytest.mark.slow
def test_a_killed_ladder_continues_with_its_rung_and_registers_the_forecast(tmp_path, tiny, until, jsonl, run_id):
    name = f"lad{run_id[-8:]}"
    # the target: past the largest rung's compute (a forecast, not an interpolation), checkpointed as the rungs are
    target = tiny("target.toml", run={"name": "hero"}, train={"token_budget": TARGET_TOKENS},
                  checkpoint={"every_steps": 50})
    config = ladder_toml(tmp_path, tiny("base.toml"), target, name)
    out_dir = tmp_path / "ladder"
    victim = out_dir / f"{name}-m16.jsonl"  # the third rung: killed once it has published steps
    proc = subprocess.Popen(ladder_cmd(config), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        until(lambda: metrics_steps(victim) >= 2 or proc.poll() is not None, 900, "the third rung to train")
        assert proc.poll() is None, proc.stdout.read()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    before = json.loads((out_dir / "state.json").read_text())["rungs"]
    assert sorted(before) == [f"{name}-d16", f"{name}-d8"]  # two rungs finished, the third not
    assert not (out_dir / "registration.json").exists()

    again = subprocess.run(ladder_cmd(config), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    state = json.loads((out_dir / "state.json").read_text())["rungs"]
    ids = [f"{name}-{r}" for r, _, _ in RUNGS]
    assert sorted(state) == sorted(ids) and {k: before[k] for k in before} == {k: state[k] for k in before}
    m16 = jsonl(victim)
    runs = [r["run_id"] for r in m16 if r["kind"] == "run"]
    assert runs == [f"{name}-m16"] * 2  # the same run, started twice
    resumed = [r for r in m16 if r["kind"] == "event" and r["name"] == "resumed"]
    assert len(resumed) == 1 and resumed[0]["payload"]["from_checkpoint"] > 0
    for (rung, _, tokens), rid in zip(RUNGS, ids):
        assert state[rid]["tokens"] >= tokens and state[rid]["source"].startswith("eval/loss at step")
        assert state[rid]["loss"] > 0

    record = reg_lib.from_json((out_dir / "registration.json").read_text())
    assert record["rung_runs"] == ids
    assert record["target"]["config_hash"] == config_hash(load(target)) and record["target"]["run_id"] == "hero"
    assert record["forecast"]["law"] == "compute"
    assert record["forecast"]["rungs"]["loss"] == pytest.approx([state[rid]["loss"] for rid in ids], rel=1e-10)
    assert record["sha256"] in again.stdout
    rungs_csv = (out_dir / "rungs.csv").read_text().splitlines()
    assert rungs_csv[0].startswith("run_id,N,D,C,L") and len(rungs_csv) == 5
    # Finished: running it again keeps the registration (a registration is made once).
    kept = subprocess.run(ladder_cmd(config), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert kept.returncode == 0 and "kept" in kept.stdout
    assert reg_lib.from_json((out_dir / "registration.json").read_text()) == record
    # --with-target: the kept registration, then the target trained and held to it (rungs not retrained).
    held = subprocess.run(ladder_cmd(config) + ["--with-target"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert held.returncode == 0, held.stdout + held.stderr
    assert json.loads((out_dir / "state.json").read_text())["rungs"] == state
    out = json.loads((out_dir / "target.json").read_text())
    actual = final_loss(out_dir / "hero.jsonl")
    h = record["forecast"]["hero"]
    assert out["forecast"] == {"loss": h["loss"], "low": h["low"], "high": h["high"]}
    assert out["actual"] == actual["loss"] and out["error"] == pytest.approx(abs(h["loss"] / actual["loss"] - 1))
    assert out["registration_sha256"] == record["sha256"] and actual["tokens"] >= TARGET_TOKENS
    assert "target hero: final loss" in held.stdout + held.stderr


@pytest.mark.slow
def test_sigterm_stops_a_ladder_like_sigint_without_compiling_on(tmp_path, tiny, until, jsonl, run_id):
    # `timeout` sends SIGTERM: the ladder stops as on Ctrl-C, and its trainer, still compiling, does not go on to
    # train (and checkpoint) first. A cold compilation cache keeps the trainer compiling long enough to be caught;
    # nothing can hold the compile open, though, and on a loaded box the signal (forwarded by the ladder) can land
    # just after it ended: the trainer then stops at its next step boundary (another test's case). Such an attempt
    # is recognised by its first step and the test starts over with a fresh ladder (at most 3 attempts).
    for attempt in range(3):
        d = tmp_path / f"attempt{attempt}"
        d.mkdir()
        name = f"term{attempt}{run_id[-7:]}"
        config = ladder_toml(d, tiny("base.toml"), tiny("target.toml"), name)
        first = d / "ladder" / f"{name}-{RUNGS[0][0]}.jsonl"
        out = d / "ladder.out"
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(d / "jax-cache")}
        states = lambda: [r["state"] for r in jsonl(first) if r["kind"] == "state"]  # noqa: E731
        with open(out, "w") as f:
            proc = subprocess.Popen(ladder_cmd(config), cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            until(lambda: proc.poll() is not None or (f"rung 1/{len(RUNGS)}" in out.read_text()
                                                       and "compiling" in states()), 600, "progress, then a compile")
            assert proc.poll() is None and "training" not in states(), out.read_text()
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(300)  # (a guard against a hang only)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        text = out.read_text()
        assert rc == 130 and "interrupted (SIGTERM)" in text, text
        if "training" not in states():
            break  # the signal landed while compiling
    final = [r for r in jsonl(first) if r["kind"] == "state"][-1]
    assert "training" not in states() and final["state"] == "stopped", states()
    assert final["detail"] == "signal SIGTERM before the first step"
    assert not [r for r in jsonl(first) if r["kind"] == "metrics"]


@pytest.mark.parametrize("name", ["ladder.toml", "ladder_moe.toml"])
def test_the_demo_ladder_spans_30x_in_compute_past_warm_up_and_its_target_is_within_10x_counted_alike(name):
    from training.flops import training_flops
    from training.ladder import load_ladder, target_cfg
    from training.schedule import Schedule

    ladder = load_ladder(ROOT / "training/configs" / name)
    C = [r.C for r in ladder.rungs]
    tcfg = target_cfg(ladder)
    target_C = training_flops(tcfg.model, tcfg.train.token_budget)
    assert C[-1] / C[0] >= 30 and C[-1] < target_C <= 10 * C[-1], (C, target_C)
    for r in ladder.rungs:
        cfg = load(ladder.base, r.overrides)
        assert r.C == training_flops(cfg.model, r.D)  # the one count, for rungs and target alike
        assert r.steps >= 150 and r.steps >= 20 * Schedule(cfg.train, r.steps).warmup_steps, r.name
        assert cfg.model.mlp == tcfg.model.mlp and cfg.train.lr == tcfg.train.lr  # one family, one optimiser
    # The target at the rungs' tokens per parameter, and its last evaluation at its last step (its final loss).
    N = float(counts(tcfg.model)["params_active"])
    assert tcfg.train.token_budget / N == pytest.approx(ladder.rungs[0].D / ladder.rungs[0].N, rel=0.02)
    steps = tcfg.train.token_budget // (tcfg.train.batch_size * tcfg.model.seq_len)
    assert steps % tcfg.train.eval_every == 0


def test_a_bad_ladder_config_exits_2_naming_the_key(tmp_path, tiny):
    config = ladder_toml(tmp_path, tiny("base.toml"), tiny("target.toml"), "badlad")
    text = config.read_text().replace('law = "compute"', 'law = "chinchilla"')  # 5 parameters, 4 rungs
    config.write_text(text)
    out = subprocess.run(ladder_cmd(config), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "config error: ladder.law" in out.stderr
    config.write_text(text.replace('law = "chinchilla"', 'law = "compute"').replace("tokens = 12000", "tokens = 100"))
    out = subprocess.run(ladder_cmd(config), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "config error: ladder.rung" in out.stderr and "compute must grow" in out.stderr
    config.write_text(text.replace('law = "chinchilla"', 'law = "compute"\nmin_margin = 0.7'))
    out = subprocess.run(ladder_cmd(config), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "config error: ladder.min_margin" in out.stderr


@pytest.mark.parametrize("name", ["ladder.toml", "ladder_moe.toml"])
def test_the_demo_ladders_take_their_band_from_the_rule_in_code_not_a_declared_floor(name):
    from training.ladder import load_ladder
    ladder = load_ladder(ROOT / "training/configs" / name)
    assert ladder.band == "calibrated" and ladder.min_margin == 0.0


def test_the_moe_ladder_is_the_heros_family_counted_by_active_parameters_with_the_calibrated_band(tmp_path):
    """Rungs and target are MoE models of one routing (experts, top-k, shared experts fixed across the family), N
    counts the active parameters, and the band comes from the rule in code (no declared floor)."""
    from training.errors import ConfigError
    from training.ladder import load_ladder, target_cfg

    path = ROOT / "training/configs/ladder_moe.toml"
    ladder = load_ladder(path)
    assert ladder.band == "calibrated" and ladder.min_margin == 0.0
    tcfg = target_cfg(ladder)
    for cfg in [load(ladder.base, r.overrides) for r in ladder.rungs] + [tcfg]:
        assert cfg.model.mlp == "moe" and (cfg.model.moe.n_routed, cfg.model.moe.top_k) == (8, 2)
        c = counts(cfg.model)
        assert c["params_active"] < c["params_total"]
    assert [r.N for r in ladder.rungs] == [float(counts(load(ladder.base, r.overrides).model)["params_active"])
                                           for r in ladder.rungs]
    # the target is watched against its band from half its budget on: forecast_deviation needs 5 evaluations there
    from observatory.anomalies.forecast import ForecastDetector
    steps = tcfg.train.token_budget // (tcfg.train.batch_size * tcfg.model.seq_len)
    rule = ForecastDetector()
    assert steps * (1 - rule.from_fraction) // tcfg.train.eval_every >= 2 * rule.sustain
    bad = tmp_path / "bad.toml"
    bad.write_text(path.read_text().replace('band = "calibrated"', 'band = "wide"').replace(
        'base = "demo.toml"', f'base = "{ROOT / "training/configs/demo.toml"}"').replace(
        'target = "ladder_moe_target.toml"', f'target = "{ROOT / "training/configs/ladder_moe_target.toml"}"'))
    with pytest.raises(ConfigError, match="bootstrap or calibrated") as e:
        load_ladder(bad)
    assert "ladder.band" in e.value.line()


def test_a_missing_or_broken_ladder_file_is_a_config_error_naming_it(tmp_path):
    """The ladder's file is read as a run config is (training.config.read_toml): the same errors, naming the file."""
    from training.errors import ConfigError
    from training.ladder import load_ladder

    missing, broken = tmp_path / "absent.toml", tmp_path / "broken.toml"
    broken.write_text("[ladder\nname = 1")
    with pytest.raises(ConfigError, match="no such file") as e:
        load_ladder(missing)
    assert str(missing) in e.value.line()
    with pytest.raises(ConfigError, match="invalid TOML") as e:
        load_ladder(broken)
    assert str(broken) in e.value.line()
