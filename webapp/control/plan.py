"""What a set-token-budget would do, computed before it is sent: the re-planned LR schedule and the new ETA.

The web never imports the trainer, so this mirrors training/schedule.py's plan (knots of LR ratios, linear between
them; a re-plan keeps the LR at the current step and decays from there to the new end).
tests/web/control/test_plan.py checks it against the trainer's Schedule on every schedule kind.
"""

from __future__ import annotations

import math

MAX_KNOTS = 16  # training/schedule.py MAX_KNOTS


class PlanError(ValueError):
    pass


def _plan(train: dict, warmup: int, step: int, ratio: float, end: int) -> list[tuple[int, float]]:
    knots = [(step, ratio)]
    if step < warmup < end:
        knots.append((warmup, 1.0))
        step, ratio = warmup, 1.0
    if train.get("schedule") == "wsd":
        decay_start = end - int(round(train.get("decay_ratio", 0.2) * end))
        if step < decay_start < end and ratio == 1.0:
            knots.append((decay_start, 1.0))
    knots.append((end, train.get("min_lr_ratio", 0.05)))
    return knots


def ratio_at(knots: list[tuple[int, float]], step: float) -> float:
    """numpy.interp over the knots: flat before the first and after the last."""
    if step <= knots[0][0]:
        return knots[0][1]
    for (x0, y0), (x1, y1) in zip(knots, knots[1:]):
        if step <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (step - x0) / (x1 - x0)
    return knots[-1][1]


def initial(train: dict, tokens_per_step: int) -> dict:
    total = max(1, math.ceil(train["token_budget"] / tokens_per_step))
    warmup = int(round(train.get("warmup_ratio", 0.01) * total))
    return {"total_steps": total, "warmup_steps": warmup,
            "knots": _plan(train, warmup, 0, 0.0 if warmup else 1.0, total)}


def replan(train: dict, current: dict, step: int, tokens: int, tokens_per_step: int) -> dict:
    new_total = max(step + 1, math.ceil(tokens / tokens_per_step))
    knots = [tuple(k) for k in current["knots"]]
    past = [k for k in knots if k[0] < step]
    new = (past + _plan(train, current["warmup_steps"], step, ratio_at(knots, step), new_total))[-MAX_KNOTS:]
    return {"total_steps": new_total, "warmup_steps": current["warmup_steps"], "knots": new}


def curve(plan: dict, peak_lr: float, multiplier: float, start: int, end: int, points: int = 120) -> list[list]:
    """[[step, lr]] from start to end: the knots themselves plus evenly spaced steps."""
    steps = {int(k[0]) for k in plan["knots"] if start <= k[0] <= end}
    n = max(2, points)
    steps |= {int(round(start + (end - start) * i / (n - 1))) for i in range(n)}
    return [[s, peak_lr * ratio_at([tuple(k) for k in plan["knots"]], s) * multiplier] for s in sorted(steps)]


def preview(run_config: dict, current: dict | None, *, step: int, tokens_seen: int, new_tokens: int,
            multiplier: float, steps_per_s: float | None) -> dict:
    """The re-planned schedule of set-token-budget(new_tokens) at `step`; PlanError says why it would be refused."""
    train, model = run_config.get("train") or {}, run_config.get("model") or {}
    try:
        tps = int(train["batch_size"]) * int(model["seq_len"])
        peak = float(train["lr"])
    except (KeyError, TypeError, ValueError):
        raise PlanError("the run's config does not say its batch size, sequence length and LR") from None
    if new_tokens <= tokens_seen:
        raise PlanError(f"new budget {new_tokens} must exceed tokens seen ({tokens_seen})")
    current = current or initial(train, tps)
    new = replan(train, current, step, new_tokens, tps)
    end = max(current["total_steps"], new["total_steps"])

    def eta(total: int) -> float | None:
        return (total - step) / steps_per_s if steps_per_s and steps_per_s > 0 else None

    return {"step": step, "tokens_per_step": tps, "old": {**current, "eta_s": eta(current["total_steps"])},
            "new": {**new, "eta_s": eta(new["total_steps"])},
            "lr_now": peak * ratio_at([tuple(k) for k in current["knots"]], step) * multiplier,
            "curve_old": curve(current, peak, multiplier, 0, end), "curve_new": curve(new, peak, multiplier, 0, end)}
