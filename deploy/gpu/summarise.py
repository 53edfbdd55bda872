"""Summarise the GPU hero check's two runs (deploy/gpu/run.sh) as one JSON object: MFU, step time,
tokens/s, drop fraction, loss, and the MoE/dense step-time ratio (medians over the steps after warm-up)."""

from __future__ import annotations

import argparse
import json
import statistics


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(path: str, skip: int) -> dict:
    """One run's jsonl (`--metrics-jsonl`): medians of its per-step figures past the first `skip` steps."""
    series: dict[str, list[float]] = {}
    compiled: dict = {}
    last_loss = None
    for line in open(path, encoding="utf-8"):
        rec = json.loads(line)
        if rec.get("kind") == "event" and rec.get("name") == "compiled":
            compiled = rec["payload"]
        if rec.get("kind") != "metrics":
            continue
        values = rec["values"]
        last_loss = values.get("train/loss", last_loss)
        if rec["step"] <= skip:
            continue
        for key in ("time/step_s", "throughput/mfu", "throughput/tokens_per_second", "moe/drop_fraction"):
            if key in values:
                series.setdefault(key, []).append(float(values[key]))
    return {
        "devices": compiled.get("devices"),
        "params_total": compiled.get("params_total"),
        "params_active": compiled.get("params_active"),
        "compile_s": compiled.get("seconds"),
        "peak_flops": compiled.get("peak_flops"),
        "peak_flops_source": compiled.get("peak_flops_source"),
        "steps_measured": len(series.get("time/step_s", [])),
        "step_s_median": _median(series.get("time/step_s", [])),
        "mfu_median": _median(series.get("throughput/mfu", [])),
        "tokens_per_s_median": _median(series.get("throughput/tokens_per_second", [])),
        "drop_fraction_median": _median(series.get("moe/drop_fraction", [])),
        "final_loss": last_loss,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("moe_jsonl")
    p.add_argument("dense_jsonl")
    p.add_argument("--skip", type=int, default=20, help="warm-up steps left out of the medians")
    a = p.parse_args()
    moe, dense = summarise(a.moe_jsonl, a.skip), summarise(a.dense_jsonl, a.skip)
    ratio = (moe["step_s_median"] / dense["step_s_median"]
             if moe["step_s_median"] and dense["step_s_median"] else None)
    print(json.dumps({"moe": moe, "dense": dense, "moe_over_dense_step_time": ratio}, indent=2))


if __name__ == "__main__":
    main()
