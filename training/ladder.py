"""The scaling ladder: rungs planned from a ladder config, their final losses, the fit and the pre-registration.

A ladder config (TOML, e.g. training/configs/ladder.toml) names a base run config, the rungs (each a set of
overrides of it, the `--set` keys of `python -m training run`), the tokens per active parameter (one for all, or
per rung), the law and the target run config whose final loss is forecast. Paths in [ladder] `base` and `target`
are relative to the ladder file; `dir` and `registration` to the working directory.

Per rung: N = active parameters (training.flops.counts: what a token passes through, embeddings included, MoE
experts counted top_k), D = tokens_per_param·N rounded up to a whole number of `eval_points` evaluations, so the
trainer evaluates at its very last step; C = D × the model's training FLOPs per token (attention included), by
training.flops.training_flops, the one function that also counts the target's C. A rung's final loss is
`eval/loss` at its last step (the mean held-out loss over the data domains, the same held-out batches for every
rung); with eval_points = 0 it is the mean `train/loss` of the last FINAL_TRAIN_STEPS steps. Both are read from
the rung's `--metrics-jsonl` mirror.
Running the rungs is training.ladder_run's.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from observatory import contract
from observatory.scaling import LAWS, Points, fit, make_forecast
from observatory.scaling import registration as reg_lib
from training.config import RunConfig, load, read_toml
from training.errors import ConfigError
from training.experiment import config_hash
from training.flops import counts, training_flops

FINAL_TRAIN_STEPS = 10
LADDER_KEYS = {"name", "base", "target", "law", "tokens_per_param", "eval_points", "bootstrap", "seed", "dir",
               "min_margin", "registration", "set", "rung", "target_run_id", "band"}
RUNG_KEYS = {"name", "set", "tokens", "tokens_per_param"}


@dataclass
class Rung:
    name: str
    run_id: str
    overrides: dict          # the whole --set list for its trainer, token budget and eval cadence included
    N: float                 # active parameters
    D: float                 # planned tokens (the trainer's token budget)
    C: float                 # D × training FLOPs per token
    steps: int


@dataclass
class Ladder:
    name: str
    path: Path
    base: Path
    target: Path
    law: str
    bootstrap: int
    seed: int
    dir: Path
    registration: Path
    target_run_id: str | None
    rungs: list[Rung] = field(default_factory=list)
    min_margin: float = 0.0  # the forecast band's least relative half-width (observatory.scaling Fit.margin)
    band: str = "bootstrap"  # "calibrated": the band from pooled + the rungs' own errors (scaling/calibrate.py)

    @property
    def state_path(self) -> Path:
        return self.dir / "state.json"

    def jsonl(self, rung: Rung) -> Path:
        return self.dir / f"{rung.run_id}.jsonl"

    def log(self, rung: Rung) -> Path:
        return self.dir / f"{rung.run_id}.log"


def _num(v, key: str, lo: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= lo:
        raise ConfigError(key, f"must be a number > {lo:g}, got {v!r}")
    return float(v)


def _sets(v, key: str) -> dict:
    if not isinstance(v, dict):
        raise ConfigError(key, 'must be a table of "section.key" = value')
    for k, x in v.items():
        if "." not in k:
            raise ConfigError(f"{key}.{k}", 'keys are dotted config keys, quoted: "model.d_model" = 64')
        if isinstance(x, dict):
            raise ConfigError(f"{key}.{k}", "must be a value, not a table")
    return dict(v)


def load_ladder(path: str | Path) -> Ladder:
    """Parse and plan a ladder config; ConfigError naming the bad key (the CLI exits 2)."""
    path = Path(path)
    raw = read_toml(path)
    lad = raw.get("ladder")
    if not isinstance(lad, dict) or set(raw) - {"ladder"}:
        raise ConfigError("ladder", "a ladder file holds one [ladder] table (and its [[ladder.rung]] entries)")
    for k in lad:
        if k not in LADDER_KEYS:
            raise ConfigError(f"ladder.{k}", f"unknown key (known: {', '.join(sorted(LADDER_KEYS))})")
    for k in ("name", "base", "target"):
        if not isinstance(lad.get(k), str) or not lad[k]:
            raise ConfigError(f"ladder.{k}", "required (a string)")
    if not contract.RUN_ID_RE.match(lad["name"]) or len(lad["name"]) > 40:
        raise ConfigError("ladder.name", "1-40 letters, digits or '_.-' (rung run ids are <name>-<rung name>)")
    law = lad.get("law", "auto")
    if law not in (*LAWS, "auto"):
        raise ConfigError("ladder.law", f"unknown law {law!r} ({', '.join([*LAWS, 'auto'])})")
    eval_points = lad.get("eval_points", 4)
    if isinstance(eval_points, bool) or not isinstance(eval_points, int) or eval_points < 0:
        raise ConfigError("ladder.eval_points", "must be an integer >= 0")
    bootstrap, seed = lad.get("bootstrap", 200), lad.get("seed", 0)
    for k, v in (("bootstrap", bootstrap), ("seed", seed)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"ladder.{k}", "must be an integer >= 0")
    min_margin = lad.get("min_margin", 0.0)
    if isinstance(min_margin, bool) or not isinstance(min_margin, (int, float)) or not 0 <= min_margin < 0.5:
        raise ConfigError("ladder.min_margin", "must be a number in [0, 0.5): the band's least relative half-width")
    band = lad.get("band", "bootstrap")
    if band not in ("bootstrap", "calibrated"):
        raise ConfigError("ladder.band", "must be bootstrap or calibrated")
    here = path.parent
    out_dir = Path(lad.get("dir") or f"var/ladder/{lad['name']}")
    ladder = Ladder(name=lad["name"], path=path, base=here / lad["base"], target=here / lad["target"], law=law,
                    bootstrap=bootstrap, seed=seed, dir=out_dir,
                    registration=Path(lad.get("registration") or out_dir / "registration.json"),
                    target_run_id=lad.get("target_run_id"), min_margin=float(min_margin), band=band)
    common = _sets(lad.get("set", {}), "ladder.set")
    tpp_default = lad.get("tokens_per_param")
    rungs = lad.get("rung")
    if not isinstance(rungs, list) or len(rungs) < 2:
        raise ConfigError("ladder.rung", "needs at least two [[ladder.rung]] entries")
    names = set()
    for i, r in enumerate(rungs):
        key = f"ladder.rung[{i}]"
        bad = set(r) - RUNG_KEYS
        if bad:
            raise ConfigError(f"{key}.{sorted(bad)[0]}", f"unknown key (known: {', '.join(sorted(RUNG_KEYS))})")
        name = r.get("name")
        if not isinstance(name, str) or not contract.RUN_ID_RE.match(f"{ladder.name}-{name}") or name in names:
            raise ConfigError(f"{key}.name", "required: a distinct name of letters, digits or '_.-'")
        names.add(name)
        sets = {**common, **_sets(r.get("set", {}), f"{key}.set")}
        run_id = f"{ladder.name}-{name}"
        cfg = load(ladder.base, {**sets, "run.name": run_id})
        n = float(counts(cfg.model)["params_active"])
        if "tokens" in r:
            D = _num(r["tokens"], f"{key}.tokens")
        else:
            tpp = r.get("tokens_per_param", tpp_default)
            if tpp is None:
                raise ConfigError(f"{key}.tokens_per_param", "give ladder.tokens_per_param, or tokens or "
                                                             "tokens_per_param per rung")
            D = _num(tpp, f"{key}.tokens_per_param") * n
        per_step = cfg.train.batch_size * cfg.model.seq_len
        quantum = max(1, eval_points)
        steps = max(quantum, math.ceil(D / per_step / quantum) * quantum)
        overrides = {**sets, "run.name": run_id, "run.steps": 0, "train.token_budget": steps * per_step}
        if eval_points:
            overrides["train.eval_every"] = steps // eval_points
        load(ladder.base, overrides)  # every rung's final config must validate now, not hours later
        ladder.rungs.append(Rung(name, run_id, overrides, n, float(steps * per_step),
                                 training_flops(cfg.model, steps * per_step), steps))
    for a, b in zip(ladder.rungs, ladder.rungs[1:]):
        if b.C <= a.C:
            raise ConfigError("ladder.rung", f"compute must grow from rung to rung: {b.name} ({b.C:.3g} FLOPs) "
                                             f"after {a.name} ({a.C:.3g})")
    if law != "auto" and len(ladder.rungs) < LAWS[law].n_params:
        raise ConfigError("ladder.law", f"law {law} has {LAWS[law].n_params} parameters: needs at least as many "
                                        f"rungs ({len(ladder.rungs)} given)")
    target_cfg(ladder)  # fail now on a bad target config
    return ladder


def target_cfg(ladder: Ladder) -> RunConfig:
    return load(ladder.target)


def target_rung(ladder: Ladder) -> Rung:
    """The target planned like a rung (no overrides: its own config), for `ladder --with-target`."""
    tcfg = target_cfg(ladder)
    D = float(tcfg.train.token_budget)
    steps = math.ceil(D / (tcfg.train.batch_size * tcfg.model.seq_len))
    return Rung("target", ladder.target_run_id or tcfg.run.name, {}, float(counts(tcfg.model)["params_active"]), D,
                training_flops(tcfg.model, D), steps)


def held_to_forecast(record: dict, done: dict) -> dict:
    """The target's final loss (`done`, as a rung's: final_loss) against its registered forecast."""
    h = record["forecast"]["hero"]
    actual = float(done["loss"])
    return {"forecast": {"loss": h["loss"], "low": h["low"], "high": h["high"]}, "actual": actual,
            "error": abs(h["loss"] / actual - 1), "source": done["source"], "registration_sha256": record["sha256"],
            "inside_band": h["low"] is not None and h["low"] <= actual <= h["high"]}


def write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def rung_digest(rung: Rung) -> str:
    """What identifies a rung's plan in the state file: a changed rung is not the one already trained."""
    return hashlib.sha256(json.dumps(rung.overrides, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------- state
def load_state(ladder: Ladder) -> dict:
    """The ladder's state file ({"rungs": {run_id: {...}}}), checked against the plan; fresh if absent."""
    try:
        state = json.loads(ladder.state_path.read_text())
    except FileNotFoundError:
        return {"ladder": ladder.name, "rungs": {}}
    except ValueError as e:
        raise ConfigError(str(ladder.state_path), f"unreadable ladder state ({e}); move it aside to start over")
    for rung in ladder.rungs:
        rec = state["rungs"].get(rung.run_id)
        if rec and rec.get("digest") != rung_digest(rung):
            raise ConfigError(f"ladder.rung {rung.name}", f"changed since it was run (see {ladder.state_path}); "
                                                          "give it another name, or move the ladder dir aside")
    return state


def save_state(ladder: Ladder, state: dict) -> None:
    ladder.dir.mkdir(parents=True, exist_ok=True)
    tmp = ladder.state_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    tmp.replace(ladder.state_path)


def read_metrics(path: Path) -> dict[int, dict]:
    """step -> values from a JSONL mirror; a later line for a step (after a resume) supersedes an earlier one."""
    steps: dict[int, dict] = {}
    if not path.exists():
        return steps
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn last line (killed mid-write)
        if rec.get("kind") == "metrics":
            steps[int(rec["step"])] = rec["values"]
        elif rec.get("kind") == "rewind":
            steps = {s: v for s, v in steps.items() if s <= int(rec["to_step"])}
    return steps


def final_loss(path: Path) -> dict:
    """{"loss", "source", "step", "tokens"} of a finished rung (see the module doc for the choice)."""
    steps = read_metrics(path)
    if not steps:
        raise ValueError(f"{path}: no metrics")
    last = max(steps)
    vals = steps[last]
    tokens = float(vals.get(contract.M_TOTAL_TOKENS, math.nan))
    if math.isfinite(vals.get(contract.M_EVAL_LOSS, math.nan)):
        return {"loss": float(vals[contract.M_EVAL_LOSS]), "source": f"eval/loss at step {last}", "step": last,
                "tokens": tokens}
    tail = sorted(steps)[-FINAL_TRAIN_STEPS:]
    losses = [steps[s].get(contract.M_LOSS, math.nan) for s in tail]
    losses = [x for x in losses if math.isfinite(x)]
    if not losses:
        raise ValueError(f"{path}: no finite train/loss in the last {FINAL_TRAIN_STEPS} steps")
    return {"loss": sum(losses) / len(losses), "source": f"mean train/loss of steps {tail[0]}-{tail[-1]}",
            "step": last, "tokens": tokens}


# ---------------------------------------------------------------------------------------------- fit
def register(ladder: Ladder, state: dict, now: float | None = None) -> dict:
    """Fit the finished rungs, forecast the target, and return the (hashed) registration record."""
    done = [state["rungs"][r.run_id] for r in ladder.rungs]
    pts = Points.of(N=[r["N"] for r in done], D=[r["tokens"] for r in done], C=[r["C"] for r in done])
    result = fit(pts, [r["loss"] for r in done], ladder.law, bootstrap=ladder.bootstrap, seed=ladder.seed,
                 min_margin=ladder.min_margin, band=ladder.band)
    tcfg = target_cfg(ladder)
    c = counts(tcfg.model)
    N, D = float(c["params_active"]), float(tcfg.train.token_budget)
    fc = make_forecast(result, N, D, C=training_flops(tcfg.model, D))
    exp = tcfg.experiment
    return reg_lib.make_registration(
        fc, experiment={"name": exp.name or tcfg.run.name, "goal": exp.goal, "hypothesis": exp.hypothesis},
        rung_runs=[r.run_id for r in ladder.rungs],
        target={"config_hash": config_hash(tcfg), "run_id": ladder.target_run_id or tcfg.run.name, "N": N, "D": D},
        created_at=time.time() if now is None else now)


def write_outputs(ladder: Ladder, state: dict, record: dict) -> None:
    """rungs.csv (the fit's input, for `python -m observatory.scaling fit`) and the registration JSON."""
    ladder.dir.mkdir(parents=True, exist_ok=True)
    with open(ladder.dir / "rungs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run_id", "N", "D", "C", "L", "loss_source"])
        for r in ladder.rungs:
            s = state["rungs"][r.run_id]
            w.writerow([r.run_id, s["N"], s["tokens"], s["C"], s["loss"], s["source"]])
    ladder.registration.parent.mkdir(parents=True, exist_ok=True)
    tmp = ladder.registration.with_suffix(".tmp")
    tmp.write_text(reg_lib.to_json(record) + "\n")
    tmp.replace(ladder.registration)
