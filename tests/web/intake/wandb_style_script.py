"""A training script written for wandb, unchanged but for its import line (run by test_roundtrip.py).

Usage: python wandb_style_script.py <run id> <steps>; OBS_URL + OBS_TOKEN (or REDIS_URL) say where it streams.
"""

import math
import sys

import observatory.client.wandb_compat as wandb


def loss_at(step: int) -> float:
    if step == 4321:
        return float("nan")  # a diverged step is data too
    return 4.0 * math.exp(-step / 3000) + 0.01 * math.sin(step)


def main(run_id: str, steps: int) -> None:
    wandb.init(project="roundtrip", name="wandb-style", config={"lr": 3e-4, "steps": steps}, id=run_id)
    for step in range(steps):
        metrics = {"train/loss": loss_at(step), "optim/learning_rate": 3e-4}
        if step % 2500 == 0:
            metrics["samples"] = wandb.Image(None)  # media: skipped, the run goes on
        wandb.log(metrics)
    wandb.run.summary["best"] = min(loss_at(s) for s in range(steps) if s != 4321)
    wandb.finish()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
