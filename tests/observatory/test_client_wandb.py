"""The wandb shim: wandb's step and commit rules, config and summary, skipped media, and the optional mirror."""

from __future__ import annotations

import sys
import types

import pytest

import observatory.client.wandb_compat as wandb
from observatory import contract


def _entries(client, run_id, kind):
    return [contract.decode(f, expect_run=run_id).data for _, f in client.xrange(contract.telemetry_stream(run_id))
            if contract.decode(f).kind == kind]


@pytest.fixture
def shim_env(redis_url, redis_client, monkeypatch):
    monkeypatch.delenv("OBS_URL", raising=False)
    monkeypatch.setenv("REDIS_URL", redis_url)
    yield redis_client
    wandb.finish()


def test_steps_follow_wandbs_commit_rules(shim_env, run_id):
    run = wandb.init(project="lm", name="baseline", config={"lr": 3e-4}, id=run_id)
    assert wandb.run is run and run.id == run_id and run.name == "baseline" and run.project == "lm"
    wandb.log({"a": 1.0})  # step 0
    wandb.log({"a": 2.0}, commit=False)  # step 1, still open
    wandb.log({"b": 3.0})  # joins step 1 and commits it
    wandb.log({"a": 4.0}, step=5)  # explicit step: open until a later step arrives
    wandb.log({"b": 5.0}, step=5)
    wandb.log({"a": 6.0}, step=3)  # below the current step: ignored, as wandb does
    wandb.log({"a": 7.0}, step=6, commit=True)
    wandb.log({"a": 8.0, "caption": "text", "img": wandb.Image(None), "hist": wandb.Histogram([1, 2])})
    assert run.step == 8
    wandb.finish()
    assert wandb.run is None
    rows = [(d["step"], d["values"]) for d in _entries(shim_env, run_id, "metrics")]
    assert rows == [(0, {"a": 1.0}), (1, {"a": 2.0, "b": 3.0}), (5, {"a": 4.0, "b": 5.0}), (6, {"a": 7.0}),
                    (7, {"a": 8.0})]
    assert run.summary == {"a": 8.0, "b": 5.0}
    assert run.stats()["skipped"] == 3
    assert [s["state"] for s in _entries(shim_env, run_id, "state")] == ["training", "stopped"]


def test_config_takes_attribute_and_dict_access_and_changes_reach_the_site(shim_env, run_id):
    run = wandb.init(project="lm", config={"lr": 3e-4, "layers": 2}, id=run_id)
    assert wandb.config is run.config
    assert wandb.config.lr == 3e-4 and wandb.config["layers"] == 2
    wandb.config.batch = 32
    wandb.config.update({"warmup": 100}, allow_val_change=True)
    assert run.config == {"lr": 3e-4, "layers": 2, "batch": 32, "warmup": 100}
    with pytest.raises(AttributeError):
        wandb.config.missing
    wandb.finish(exit_code=1)
    configs = [d["config"] for d in _entries(shim_env, run_id, "run")]
    assert configs[0] == {"lr": 3e-4, "layers": 2} and configs[-1] == run.config
    assert _entries(shim_env, run_id, "state")[-1]["state"] == "failed"


def test_the_run_works_as_a_context_manager_and_a_new_init_finishes_the_old_run(shim_env, run_id):
    first = wandb.init(project="lm", id=run_id + "-a")
    first.log({"a": 1.0}, step=2)
    second = wandb.init(project="lm", id=run_id + "-b")  # wandb finishes the previous run
    assert _entries(shim_env, run_id + "-a", "metrics")[0]["step"] == 2
    assert _entries(shim_env, run_id + "-a", "state")[-1]["state"] == "stopped"
    with pytest.raises(KeyError):
        with second:
            second.log({"a": 1.0})
            raise KeyError("boom")
    assert _entries(shim_env, run_id + "-b", "state")[-1]["state"] == "failed"
    assert wandb.run is None
    with pytest.raises(RuntimeError):
        wandb.log({"a": 1.0})


def test_mirror_forwards_the_same_calls_to_the_real_wandb(shim_env, run_id, monkeypatch):
    calls = []

    class RealRun:
        config = types.SimpleNamespace(update=lambda d, allow_val_change=None: calls.append(("config", d)))

        def log(self, data, step=None, commit=None):
            calls.append(("log", data, step, commit))

        def finish(self, exit_code=None):
            calls.append(("finish", exit_code))

    fake = types.ModuleType("wandb")
    fake.init = lambda **kw: calls.append(("init", kw)) or RealRun()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    wandb.init(project="lm", name="m", config={"lr": 1}, id=run_id, mirror=True, tags=["x"])
    wandb.log({"a": 1.0, "img": wandb.Image(None)}, commit=False)
    wandb.config.update({"b": 2})
    wandb.finish()
    assert calls[0] == ("init", {"project": "lm", "name": "m", "config": {"lr": 1}, "id": run_id, "tags": ["x"]})
    assert calls[1:] == [("log", {"a": 1.0}, None, False), ("config", {"b": 2}), ("finish", None)]
    assert [d["values"] for d in _entries(shim_env, run_id, "metrics")] == [{"a": 1.0}]
