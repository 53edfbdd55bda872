"""The real trainer on a tiny MoE config: end to end through the CLI and Redis, absent Redis, divergence,
`--set` overrides, held-out evaluation, signals, one trainer per run."""

from __future__ import annotations

import json
import logging
import math
import signal
import subprocess

import pytest

from observatory import contract

REQUIRED_METRICS = (contract.M_LOSS, contract.M_CE, contract.M_LR, contract.M_GRAD_NORM, contract.M_TOKENS_PER_S,
                    contract.M_MFU, contract.M_TOTAL_TOKENS, contract.M_STEP_TIME, contract.M_DROP,
                    contract.router_metric(0, "routing_entropy"), contract.router_metric(1, "routing_hist") + "/3",
                    contract.M_MIX_STAGE, contract.M_PUBLISH_QUEUE)


@pytest.mark.slow
def test_the_cli_trains_and_publishes_the_contract_through_redis(tmp_path, tiny, trainer_cli, jsonl, stream,
                                                                  redis_client, run_id):
    out = tmp_path / "m.jsonl"
    p = trainer_cli.run(tiny(), "--steps", "12", "--run-id", run_id, "--metrics-jsonl", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    msgs = stream(redis_client, run_id)  # every entry validates against the contract
    kinds = [m.kind for m in msgs]
    assert kinds[0] == "run" and kinds.count("manifest") == 1 and "heartbeat" in kinds
    run = msgs[0].data
    assert run["name"] == "tiny" and run["config"]["model"]["moe"]["n_routed"] == 4
    states = [m.data["state"] for m in msgs if m.kind == "state"]
    assert states[:3] == ["starting", "compiling", "training"] and states[-1] == "stopped"
    assert "checkpointing" in states
    metrics = [m.data for m in msgs if m.kind == "metrics"]
    assert [d["step"] for d in metrics] == list(range(1, 13))
    for name in REQUIRED_METRICS:
        assert name in metrics[-1]["values"], name
    domains = {"python_source", "licenses"}
    assert any(contract.domain_loss(d) in m["values"] for m in metrics for d in domains)
    assert {contract.tokens_seen(d) for d in domains} <= set(metrics[-1]["values"])
    assert metrics[-1]["values"][contract.M_TOTAL_TOKENS] == 12 * 4 * 32
    assert all(math.isfinite(d["values"][contract.M_LOSS]) for d in metrics)
    manifest = next(m.data["manifest"] for m in msgs if m.kind == "manifest")
    assert [d["name"] for d in manifest["domains"]] == ["python_source", "licenses"]
    events = {m.data["name"] for m in msgs if m.kind == "event"}
    assert {"compiled", "checkpoint_saved"} <= events
    hb = json.loads(redis_client.get(contract.heartbeat_key(run_id)))
    assert hb["phase"] == "stopped" and hb["step"] == 12
    assert redis_client.sismember(contract.RUNS_KEY, run_id)
    # the JSONL mirror holds the same records
    mirrored = [r for r in jsonl(out) if r["kind"] == "metrics"]
    assert [r["values"][contract.M_LOSS] for r in mirrored] == [d["values"][contract.M_LOSS] for d in metrics]


@pytest.mark.slow
def test_it_trains_without_redis_and_the_lr_warms_up(tmp_path, tiny, trainer_cli, jsonl):
    out = tmp_path / "m.jsonl"
    url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    p = trainer_cli.run(tiny(), "--steps", "6", "--run-id", "absent", "--metrics-jsonl", str(out),
                        "--redis-url", url)
    assert p.returncode == 0, p.stderr[-3000:]
    metrics = [r for r in jsonl(out) if r["kind"] == "metrics"]
    assert [r["step"] for r in metrics] == list(range(1, 7))
    lrs = [r["values"][contract.M_LR] for r in metrics]
    assert lrs == sorted(lrs) and lrs[0] == 0.0 and lrs[-1] > 0  # warmup: LR passed in, rising each step
    assert "dropped" in p.stdout  # the publisher's summary line


def test_it_fails_cleanly_when_the_loss_stays_non_finite(tiny, start_trainer, stream, redis_url, redis_client,
                                                         run_id):
    cfg = tiny.load(train={"lr": 1e30, "grad_clip": 0.0, "warmup_ratio": 0.0, "max_nonfinite_steps": 2,
                           "weight_decay": 0.0})
    # the first update (lr 1e30, no clipping) leaves every later step non-finite: it fails when it completes the
    # second of those (step 3), with step 4 already dispatched; a trainer that went on past that is a failure too
    assert start_trainer(cfg, run_id, redis_url).join(max_step=4) == 1
    msgs = stream(redis_client, run_id)
    failed = [m.data for m in msgs if m.kind == "state" and m.data["state"] == "failed"]
    assert failed and "non-finite for 2 consecutive steps" in failed[0]["detail"]
    values = [m.data["values"] for m in msgs if m.kind == "metrics"]
    # published as NaN/Inf, not dropped
    assert any(not math.isfinite(v[contract.M_LOSS]) or not math.isfinite(v[contract.M_GRAD_NORM]) for v in values)
    assert values[-1][contract.M_FINITE] == 0.0


def test_a_bad_config_prints_one_line_and_exits_2(tmp_path, tiny, trainer_cli):
    p = trainer_cli.run(tiny(train={"batch_size": 0}))
    assert p.returncode == 2
    assert p.stderr.strip() == "config error: train.batch_size: must be a positive integer"
    p = trainer_cli.run(tiny(model={"n_heads": 3}))
    assert p.returncode == 2 and p.stderr.startswith("config error: model.n_heads: ")
    assert len(p.stderr.strip().splitlines()) == 1
    # found only when the data loads: still one line, still status 2
    p = trainer_cli.run(tiny(data={"corpora": {"mine": str(tmp_path / "nope")}}), "--no-redis")
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1].startswith("config error: data.corpora.mine: ")


def test_set_overrides_a_config_value_and_a_bad_one_exits_2_naming_the_key(tiny, trainer_cli):
    from training.config import load, parse_override

    overrides = dict(map(parse_override, ["mesh.expert=4", "train.lr=3e-4", "run.name=x",
                                          "data.stages=['a']", "data.stage_fractions=[1.0]"]))
    cfg = load(tiny(), overrides)
    assert (cfg.mesh.expert, cfg.train.lr, cfg.run.name) == (4, 3e-4, "x")
    assert cfg.data.stages == ("a",) and cfg.model.moe.n_routed == 4  # the rest of [model.moe] is kept
    for override, line in [("model.moe.expert_parallel=4", "config error: model.moe.expert_parallel: unknown key"),
                           ("train.lr=fast", "config error: train.lr: must be a number, got 'fast'"),
                           ("train.batch_size=0", "config error: train.batch_size: must be a positive integer"),
                           ("lr=1", "config error: lr: an override is section.key=value")]:
        p = trainer_cli.run(tiny(), "--set", "train.lr=3e-4", "--set", override)
        assert p.returncode == 2 and p.stderr.strip().startswith(line), (override, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_set_overrides_reach_the_run(tmp_path, tiny, trainer_cli, jsonl):
    out = tmp_path / "m.jsonl"
    p = trainer_cli.run(tiny(), "--steps", "2", "--run-id", "overridden", "--no-redis", "--metrics-jsonl", str(out),
                        "--set", "train.warmup_ratio=0", "--set", "train.lr=0.125", "--set", "run.name=renamed")
    assert p.returncode == 0, p.stderr[-2000:]
    records = jsonl(out)
    run = next(r for r in records if r["kind"] == "run")
    assert run["name"] == "renamed" and run["config"]["train"]["lr"] == 0.125
    first = next(r for r in records if r["kind"] == "metrics")
    assert first["values"][contract.M_LR] == 0.125


def test_the_held_out_split_is_evaluated_every_eval_every_steps(tmp_path, tiny, start_trainer, jsonl):
    out = tmp_path / "m.jsonl"
    cfg = tiny.load(train={"eval_every": 3, "warmup_ratio": 0.0}, run={"steps": 6})
    assert start_trainer(cfg, "evaluated", None, out).join() == 0
    metrics = {r["step"]: r["values"] for r in jsonl(out) if r["kind"] == "metrics"}
    evaluated = sorted(s for s, v in metrics.items() if contract.M_EVAL_LOSS in v)
    assert evaluated == [3, 6]
    for s in evaluated:
        per_domain = [metrics[s][contract.eval_domain_loss(d)] for d in ("python_source", "licenses")]
        assert all(math.isfinite(x) and 0 < x < 10 for x in per_domain)
        assert metrics[s][contract.M_EVAL_LOSS] == pytest.approx(sum(per_domain) / 2)
    # the same params, the same held-out windows: the training steps in between lower the eval loss
    assert metrics[6][contract.M_EVAL_LOSS] < metrics[3][contract.M_EVAL_LOSS]


@pytest.mark.slow
def test_sigterm_checkpoints_then_exits_0(tmp_path, tiny, trainer_cli, jsonl, until, redis_url, redis_client,
                                          run_id):
    out = tmp_path / "m.jsonl"
    proc = trainer_cli.popen(tiny(), "--run-id", run_id, "--metrics-jsonl", str(out), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
    until(lambda: proc.poll() is not None or any(r["kind"] == "metrics" and r["step"] >= 3 for r in jsonl(out)),
          180, "step 3 in the JSONL")
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGINT)  # a supervisor and the terminal may both deliver one: still a clean stop
    assert proc.wait(120) == 0, proc.stdout.read()[-2000:]
    states = [r for r in jsonl(out) if r["kind"] == "state"]
    assert states[-1]["state"] == "stopped" and states[-1]["detail"] in ("signal SIGTERM", "signal SIGINT")
    last = max(r["step"] for r in jsonl(out) if r["kind"] == "metrics")
    assert (tmp_path / "ckpt" / run_id / str(last)).is_dir()


def test_a_second_trainer_on_the_same_run_is_refused(tiny, start_trainer, caplog, run_id):
    from training.sinks import CompositeSink
    from training.train import Trainer

    cfg = tiny.load()
    bg = start_trainer(cfg, run_id, None)
    bg.wait_step(1)
    with caplog.at_level(logging.INFO, logger="training"):
        assert Trainer(cfg, run_id, CompositeSink([])).run() == 1
    assert any("is already being trained (pid" in r.getMessage() and r.getMessage().startswith(f"[{run_id}] failed")
               for r in caplog.records)
    assert bg.thread.is_alive()
