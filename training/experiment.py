"""A run as a stated experiment: the config hash a forecast is registered against, the run's first start, and the
check that refuses a late or foreign forecast. What is hashed and how the first start is found: docs/TRAINING.md
"The config hash and the first start".
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from observatory.scaling import canonical_json
from observatory.scaling import registration as reg_lib
from training.config import RunConfig
from training.errors import ConfigError

HASH_EXCLUDED = ("experiment", "run.name", "run.steps", "run.compile_cache", "run.data_cache", "checkpoint", "sinks",
                 "mesh", "distributed", "model.attention", "model.remat", "train.allow_faults", "train.peak_flops",
                 "train.eval_every", "train.max_nonfinite_steps", "data.allow_changed_data", "data.prepared")
STARTED_FILE = "started.json"


def config_hash(cfg: RunConfig) -> str:
    d = cfg.to_dict()
    for dotted in HASH_EXCLUDED:
        *tables, leaf = dotted.split(".")
        node = d
        for t in tables:
            node = node.get(t, {})
        node.pop(leaf, None)
    return hashlib.sha256(canonical_json(d).encode()).hexdigest()


def run_dir(cfg: RunConfig, run_id: str) -> Path:
    return Path(cfg.checkpoint.dir) / run_id


def first_start(ck_dir: Path) -> float | None:
    """When the run in `ck_dir` first started, or None for a run that never started (see the module doc)."""
    times = []
    try:
        times.append(float(json.loads((ck_dir / STARTED_FILE).read_text())["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if ck_dir.is_dir():
        for step in ck_dir.iterdir():
            if not step.name.isdigit():
                continue
            try:
                meta = json.loads((step / "meta" / "metadata").read_text())
                times.append(float(meta.get("started_at") or meta["saved_at"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return min(times) if times else None


def mark_started(ck_dir: Path, run_id: str, now: float | None = None) -> float:
    """Record the first start (once; a resume keeps the original). Returns the run's first start."""
    earlier = first_start(ck_dir)
    if earlier is not None:
        if not (ck_dir / STARTED_FILE).exists():
            _write(ck_dir, run_id, earlier)
        return earlier
    started = time.time() if now is None else now
    _write(ck_dir, run_id, started)
    return started


def _write(ck_dir: Path, run_id: str, started: float) -> None:
    ck_dir.mkdir(parents=True, exist_ok=True)
    tmp = ck_dir / (STARTED_FILE + ".tmp")
    tmp.write_text(json.dumps({"run_id": run_id, "started_at": started}) + "\n")
    tmp.replace(ck_dir / STARTED_FILE)


def load_registration(cfg: RunConfig, run_id: str, *, fresh: bool = False, now: float | None = None) -> dict | None:
    """The verified registration named by experiment.forecast (None when there is none), or ConfigError when it
    does not verify, was made for another config or another run id, or was made at or after the run's first
    start."""
    path = cfg.experiment.forecast
    if not path:
        return None
    key = "experiment.forecast"
    try:
        record = reg_lib.from_json(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(key, f"{path}: no such file (run the ladder first: python -m training ladder ...)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(key, f"{path}: cannot read: {e}") from None
    except ValueError as e:
        raise ConfigError(key, f"{path}: {e}") from None
    mine = config_hash(cfg)
    theirs = record["target"]["config_hash"]
    if theirs != mine:
        raise ConfigError(key, f"{path} was registered for another config (config hash {theirs[:12]}…, this "
                               f"run's is {mine[:12]}…): a forecast holds only for the config it was made for")
    if record["target"]["run_id"] != run_id:  # the web, too, trusts a forecast only from the run it names
        raise ConfigError(key, f"{path} was registered for run {record['target']['run_id']!r}, not {run_id!r} (run it "
                               f"with --run-id {record['target']['run_id']}, or register again for this run id)")
    started = None if fresh else first_start(run_dir(cfg, run_id))
    when = "now" if started is None else "its first start"
    started = time.time() if started is None else started
    if record["created_at"] >= started:
        raise ConfigError(key, f"{path} was registered at {_utc(record['created_at'])}, after run {run_id!r} "
                               f"started ({when}: {_utc(started)}): a forecast must be made before the run starts")
    return record


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
