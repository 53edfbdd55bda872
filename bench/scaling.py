"""Scaling-law fits: wall time per law, the pruned multi-start against the full grid, and the forecast error of
the largest run from the smaller ones on real ladders. Prints one JSON object
(timings: run it with OPENBLAS_NUM_THREADS=1). --public-only: the public ladders alone (`scaling_ladders`);
--demo (its own --help): the demo ladder held to its forecast (`scaling_demo`)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# --core DIR: the observatory package found in DIR (bench/stack.py run_landed: the landed code's ladders, as JSON)
_CORE = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--core"), None)
sys.path[:0] = [_CORE, str(ROOT)] if _CORE else [str(ROOT)]

from observatory.scaling import LAWS, Points, fit_law  # noqa: E402
from observatory.scaling.fit import DEFAULT_STARTS, holdout_mask  # noqa: E402
from observatory.scaling.cli import read_rungs  # noqa: E402
from observatory.scaling.solver import best_grid_starts, solve  # noqa: E402
from bench.data.ladders.ladders import LADDERS, load  # noqa: E402 (the data: bench/data/ladders)
from bench.data.scaling.synthetic import synthetic_ladder, synthetic_losses  # noqa: E402
from bench.harness import parser, report  # noqa: E402
from bench.stack import run_landed  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "scaling"
CHINCHILLA_CSV = DATA / "chinchilla_svg_extracted_data.csv"
CHINCHILLA_URL = ("https://github.com/epoch-research/analyzing-chinchilla/blob/"
                  "92258837425e1b5f2851d624287f0120583a3d0e/data/svg_extracted_data.csv")


def forecast_errors(points: Points, loss: np.ndarray, starts: int = DEFAULT_STARTS) -> dict:
    """Per law that the columns allow: the largest run (and the largest quarter) forecast from the rest."""
    out = {}
    for name, law in LAWS.items():
        if not points.has(law.needs):
            continue
        row = {}
        for label, k in (("largest", 1), ("largest_quarter", max(1, len(loss) // 4))):
            held = holdout_mask(points, k)
            if (~held).sum() < law.n_params:
                row[label] = None
                continue
            t0 = time.perf_counter()
            # _held=None: skip fit_law's own held-out refit (this loop is the held-out evaluation)
            f = fit_law(law, points.take(~held), loss[~held], bootstrap=0, starts=starts, _held=None)
            pred = f.predict(points.take(held))
            row[label] = {"held_out": int(held.sum()), "fitted_on": int((~held).sum()),
                          "mean_abs_rel_error": float(np.mean(np.abs(pred / loss[held] - 1))),
                          "seconds": round(time.perf_counter() - t0, 3)}
            if k == 1:
                row[label].update(actual=loss[held].tolist(), predicted=pred.tolist(), params=f.params)
        out[name] = row
    return out


def public(args) -> dict:
    cols = read_rungs(str(CHINCHILLA_CSV), {"N": "Model Size", "C": "Training FLOP", "L": "loss"})
    pts = Points.of(N=cols["N"], D=cols["C"] / (6 * cols["N"]), C=cols["C"])
    return {"chinchilla_hoffmann2022": {"source": CHINCHILLA_URL, "rows": len(pts),
                                        "laws": forecast_errors(pts, cols["L"], args.starts)}}


def main() -> None:
    if "--demo" in sys.argv[1:]:  # the demo ladder run end to end: DEMO_DOC
        sys.exit(demo_main([a for a in sys.argv[1:] if a != "--demo"]))
    ap = parser(__doc__, "scaling", "scaling_ladders")
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--rungs", type=int, default=24, help="rungs: sizes × 4 tokens-per-parameter ratios")
    ap.add_argument("--full-grid", action="store_true")
    ap.add_argument("--public-only", action="store_true", help="only the real ladders (no synthetic timings)")
    ap.add_argument("--ladders-bootstrap", type=int, default=200, help="bootstrap fits per law on the public ladders")
    ap.add_argument("--compare", metavar="REF", help="also measure the core at this git ref on the public ladders")
    ap.add_argument("--no-cv", action="store_true", help="leave out the development and held_out blocks")
    ap.add_argument("--seed", type=int, default=0, help="the public ladders' bootstrap seed")
    ap.add_argument("--starts", type=int, default=DEFAULT_STARTS, help="grid starts refined per fit (a smoke: few)")
    ap.add_argument("--core", help="print the public ladders' evaluation of the observatory package in CORE only")
    args = ap.parse_args()
    if args.core:  # the landed side of --compare (landed() below)
        from observatory import scaling
        print(json.dumps(evaluate_all(scaling, args.ladders_bootstrap, args.seed)))
        return 0
    if args.public_only:
        return report("scaling_ladders", {"public": public(args), **ladders(args)}, args.json, not args.no_save)
    pts = synthetic_ladder(args.rungs)
    out = {"rungs": len(pts), "bootstrap": args.bootstrap, "laws": {}}
    for name, (law, truth, loss) in synthetic_losses(pts).items():
        t0 = time.perf_counter()
        f = fit_law(law, pts, loss, bootstrap=args.bootstrap, starts=args.starts)
        out["laws"][name] = {"seconds": round(time.perf_counter() - t0, 3), "holdout_error": f.holdout_error,
                             "params": f.params, "truth": truth}
        if args.full_grid and name == "chinchilla":
            X, y = law.design(pts), np.log(loss)
            t0 = time.perf_counter()
            _, full = solve(law, X, y, best_grid_starts(law, X, y, None))
            seconds = time.perf_counter() - t0
            _, pruned = solve(law, X, y, best_grid_starts(law, X, y, 64))
            out["full_grid"] = {"starts": len(law.grid_points()), "seconds": round(seconds, 3),
                                "pruned_minus_full_relative": float(pruned.min() / full.min() - 1)}
    out["public"] = public(args)
    out.update(ladders(args))
    return report("scaling", out, args.json, not args.no_save)


def ladders(args) -> dict:
    from observatory import scaling
    out = {}
    if not args.no_cv:
        from bench import scaling_cv
        out["development"] = scaling_cv.development()
        out["held_out"] = scaling_cv.held_out()
    out["ladders"] = evaluate_all(scaling, args.ladders_bootstrap, args.seed, args.starts)
    out["ladders_summary"] = summary(out["ladders"])
    if args.compare:
        out["ladders_landed"] = landed(args.compare, args.ladders_bootstrap, args.seed)
        out["ladders_landed_summary"] = {"ref": args.compare, **summary(out["ladders_landed"])}
    return out


# ---------------------------------------------------------------------------------------------- the public ladders
def evaluate(scaling, name: str, laws=("chinchilla", "compute", "overtrained", "auto"), bootstrap: int = 200,
             seed: int = 0, starts: int = 64) -> dict:
    """Per law: held-out mean/max relative error, band coverage, and each held-out run's forecast."""
    d = load(name)
    h = d["heldout"]
    fit_pts = scaling.Points.of(N=d["N"][~h], D=d["D"][~h], C=d["C"][~h])
    held = scaling.Points.of(N=d["N"][h], D=d["D"][h], C=d["C"][h])
    truth = d["L"][h]
    out = {"file": d["file"], "rungs": int((~h).sum()), "heldout": int(h.sum()),
           "compute_ratio": float(d["C"][h].max() / d["C"][~h].max()), "laws": {}}
    for law in laws:
        t0 = time.perf_counter()
        f = scaling.fit(fit_pts, d["L"][~h], law, bootstrap=bootstrap, seed=seed, starts=starts)
        pred = f.predict(held)
        lo, hi = f.interval(held)
        rel = np.abs(pred / truth - 1)
        row = {"mean_rel_error": float(rel.mean()), "max_rel_error": float(rel.max()),
               "coverage": float(np.mean((truth >= lo) & (truth <= hi))),
               "band_width": float(np.mean((hi - lo) / pred)),   # mean (high − low) / L̂: what the coverage cost
               "actual": truth.tolist(), "predicted": pred.tolist(), "low": lo.tolist(), "high": hi.tolist(),
               "seconds": round(time.perf_counter() - t0, 2)}
        if law == "auto":
            row["chosen"] = f.law.name
        out["laws"][law] = row
    return out


def evaluate_all(scaling, bootstrap: int = 200, seed: int = 0, starts: int = 64) -> dict:
    return {name: evaluate(scaling, name, bootstrap=bootstrap, seed=seed, starts=starts) for name in LADDERS}


def landed(ref: str, bootstrap: int = 200, seed: int = 0) -> dict:
    """The same evaluation of the core at git `ref`, in a subprocess on its own checkout (bench/stack.py)."""
    out = run_landed(ref, Path(__file__).resolve(), "--ladders-bootstrap", str(bootstrap), "--seed", str(seed))
    if "error" in out:
        raise SystemExit(f"the landed ladders ({ref}): {out['error']}")
    return {k: v for k, v in out.items() if k not in ("ref", "commit")}


def summary(ladders: dict, target_error: float = 0.03, target_coverage: float = 0.8) -> dict:
    """Per ladder, the `auto` law's numbers; and how many ladders meet issue 27's bar (mean ≤ 3%, coverage ≥ 80%)."""
    rows = {name: {k: r["laws"]["auto"].get(k) for k in ("chosen", "mean_rel_error", "max_rel_error", "coverage",
                                                          "band_width")}
            for name, r in ladders.items()}
    ok = [n for n, r in rows.items() if r["mean_rel_error"] <= target_error and r["coverage"] >= target_coverage]
    return {"auto": rows, "ladders_meeting_target": ok, "target": {"mean_rel_error": target_error,
                                                                    "coverage": target_coverage}}


# ---------------------------------------------------------------------------------------------- --demo
DEMO_DOC = """The demo ladder held to its forecast: run the ladder, then its target, and compare (one JSON object).
Two ladders: the dense one (--config: demo_forecast, demo_error, ...) and the hero's MoE family (--moe-config: the
same under "moe", and moe_demo_error / moe_inside_band); --only one of them."""


def _run(cmd: list[str], cwd: Path, env: dict, log: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its children): the CPU time barely depends on the load."""
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "w") as out:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {rc}; see {log}")
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic() - t0, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def run_demo(config: Path, work: Path, *, cold: bool = False, redis: bool = False) -> dict:
    from training import ladder as lad  # (no JAX: planning and reading metrics only)

    config, cache = config.resolve(), (work if cold else ROOT) / "var" / "jax-cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_COMPILATION_CACHE_DIR": str(cache)}
    load0, t0 = os.getloadavg(), time.time()
    total_s, cpu_s = _run([sys.executable, "-m", "training", "ladder", "--config", str(config), "--with-target",
                          *([] if redis else ["--no-redis"])], work, env, work / "ladder.log")
    cwd = Path.cwd()
    os.chdir(work)  # the ladder's dir and registration paths are relative to the working directory
    try:
        ladder = lad.load_ladder(config)
        target = lad.target_rung(ladder)
        held = json.loads((ladder.dir / "target.json").read_text())
        target_t0 = json.loads(ladder.jsonl(target).read_text().splitlines()[0])["t"]  # its run record
    finally:
        os.chdir(cwd)
    rungs, own = ladder.rungs, {}
    for r in rungs:  # each rung's own records, first to last: a rung trained earlier in a resumed workdir too
        ts = [t for x in (work / ladder.jsonl(r)).read_text().splitlines() if (t := json.loads(x).get("t")) is not None]
        own[r.name] = round(max(ts) - min(ts), 1) if ts else 0.0
    return {
        "demo_forecast": held["forecast"], "demo_actual": held["actual"], "demo_error": held["error"],
        "inside_band": held["inside_band"], "actual_source": held["source"],
        "rungs": [{"name": r.name, "N": r.N, "D": r.D, "C": r.C, "steps": r.steps} for r in rungs],
        "target": {"N": target.N, "D": target.D, "C": target.C, "steps": target.steps},
        "rung_span": rungs[-1].C / rungs[0].C, "target_over_largest_rung": target.C / rungs[-1].C,
        "seconds": {"ladder": round(target_t0 - t0, 1), "target": round(t0 + total_s - target_t0, 1),
                    "total": round(total_s, 1), "cpu_total": round(cpu_s, 1),
                    "rungs_own": own, "rungs_own_total": round(sum(own.values()), 1)},
        "compile_cache": "cold" if cold else "repository var/jax-cache (warm after a first run)",
        "loadavg_1m": {"start": round(load0[0], 2), "end": round(os.getloadavg()[0], 2)},
        "cpus": os.cpu_count(), "workdir": str(work),
    }


def demo_main(argv: list[str]) -> int:
    ap = parser(DEMO_DOC, "scaling_demo", prog="bench/scaling.py --demo")
    ap.add_argument("--config", type=Path, default=ROOT / "training/configs/ladder.toml")
    ap.add_argument("--moe-config", type=Path, default=ROOT / "training/configs/ladder_moe.toml")
    ap.add_argument("--only", choices=("dense", "moe"), help="run only this ladder")
    ap.add_argument("--workdir", type=Path, help="run here (kept); default: a temporary directory, removed after")
    ap.add_argument("--cold", action="store_true", help="an empty compilation cache instead of var/jax-cache")
    ap.add_argument("--redis", action="store_true", help="publish the rungs and the target to Redis (the dashboard)")
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="demo-ladder-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        out = {}
        if args.only != "moe":
            (work / "dense").mkdir(exist_ok=True)
            out = run_demo(args.config, (work / "dense").resolve(), cold=args.cold, redis=args.redis)
        if args.only != "dense":
            (work / "moe").mkdir(exist_ok=True)
            moe = run_demo(args.moe_config, (work / "moe").resolve(), cold=args.cold, redis=args.redis)
            out.update(moe=moe, moe_demo_error=moe["demo_error"], moe_inside_band=moe["inside_band"])
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return report("scaling_demo", out, args.json, not args.no_save)


if __name__ == "__main__":
    sys.exit(main())
