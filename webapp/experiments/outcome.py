"""Was the forecast right? A target run's actual final loss held to its frozen forecast, and the ladder's fit drawn.

The actual final loss is read as the ladder reads a rung's (training/ladder.py `final_loss`): the held-out
`eval/loss` at the run's last step when it has one, else the mean `train/loss` of its last FINAL_TRAIN_STEPS
points. A verdict is given only once the target finished: its state is ended and it trained (nearly) the forecast's
D tokens; before that the page says how far it is, and a run stopped short of D gets no verdict (the forecast is
for D tokens).

`ladder_svg` draws, on log-log axes of training compute C and loss, the rungs the law was fitted on, the fitted
law along the ladder's path to the target (N, D and C interpolated geometrically from the smallest rung to the
target), the forecast at the target's C with its band, and the actual final loss once there is one. A plain SVG,
rendered here: it is not a live line, and the page needs no script to show it.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np

from observatory import contract
from observatory.scaling import Points, get_law
from webapp.metrics.models import Point, Series
from webapp.runs.models import ENDED_STATES, Run

FINAL_TRAIN_STEPS = 10  # as training/ladder.py: the mean of the last 10 train/loss points when there is no eval
DONE_FRACTION = 0.99  # the target trained at least this share of D tokens: finished, not stopped short
PATH_POINTS = 48


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _last(run: Run, name: str, n: int = 1) -> list[tuple[int, float]]:
    s = Series.objects.filter(run=run, name=name).first()
    if s is None:
        return []
    rows = (Point.objects.filter(series=s, value__isnull=False).order_by("-step").values_list("step", "value")[:n])
    return list(reversed(rows))


def actual(run: Run) -> dict | None:
    """{"loss", "source", "step"} of the run's latest final-loss reading, or None when it has no loss yet."""
    ev = _last(run, contract.M_EVAL_LOSS)
    tr = _last(run, contract.M_LOSS, FINAL_TRAIN_STEPS)
    last_train = tr[-1][0] if tr else None
    if ev and (last_train is None or ev[0][0] >= last_train):
        return {"loss": ev[0][1], "source": f"eval/loss at step {ev[0][0]}", "step": ev[0][0]}
    if tr:
        return {"loss": sum(v for _, v in tr) / len(tr),
                "source": f"mean train/loss of steps {tr[0][0]}–{tr[-1][0]}", "step": tr[-1][0]}
    return None


def tokens_trained(run: Run) -> float | None:
    got = _last(run, contract.M_TOTAL_TOKENS)
    if got:
        return got[0][1]
    return _num((run.heartbeat or {}).get("tokens"))


def outcome(reg, run: Run | None) -> dict:
    """{"status": "no-run" | "waiting" | "training" | "short" | "finished", "actual", "source", "tokens",
    "fraction", "inside", "error_pct", "verdict"} for one registration and its target run."""
    hero = reg.forecast.get("hero") if isinstance(reg.forecast.get("hero"), dict) else {}
    loss, low, high, D = (_num(hero.get(k)) for k in ("loss", "low", "high", "D"))
    out = {"status": "no-run", "actual": None, "source": "", "tokens": None, "fraction": None, "inside": None,
           "error_pct": None, "verdict": ""}
    if run is None:
        return out
    got, tokens = actual(run), tokens_trained(run)
    fraction = tokens / D if tokens is not None and D else None
    out.update(actual=got and got["loss"], source=got["source"] if got else "", tokens=tokens, fraction=fraction)
    ended = run.state in ENDED_STATES
    if got is None:
        out["status"] = "waiting"
    elif not ended:
        out["status"] = "training"
    elif fraction is None or fraction < DONE_FRACTION:
        out["status"] = "short"
    else:
        out["status"] = "finished"
    if got is not None and loss:
        out["error_pct"] = 100.0 * (got["loss"] - loss) / loss
    if out["status"] == "finished" and loss:
        if low is not None and high is not None:
            out["inside"] = low <= got["loss"] <= high
            where = "inside" if out["inside"] else ("below" if got["loss"] < low else "above")
            out["verdict"] = f"{where} the band"
        else:
            out["verdict"] = "no band to hold it to"
    return out


# ---------------------------------------------------------------------------------------------- the chart
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 560, 300, 56, 16, 14, 40


def _path(fc: dict) -> dict | None:
    """The fitted law along the ladder's path to the target: [(C, loss)], or None when the record cannot say."""
    rungs, hero = fc.get("rungs") or {}, fc.get("hero") or {}
    try:
        law = get_law(str(fc.get("law")))
        theta = law.theta_of(fc["params"])
        C = [float(c) for c in rungs["C"]]
        i0 = int(np.argmin(C))
        t = np.linspace(0.0, 1.0, PATH_POINTS)
        geo = lambda a, b: np.exp(np.log(a) * (1 - t) + np.log(b) * t)  # noqa: E731
        c = geo(C[i0], float(hero["C"]))
        if rungs.get("N") and rungs.get("D"):
            pts = Points.of(N=geo(float(rungs["N"][i0]), float(hero["N"])),
                            D=geo(float(rungs["D"][i0]), float(hero["D"])), C=c)
        else:
            pts = Points.of(C=c)
        y = law.predict(theta, pts)
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    keep = np.isfinite(y) & (y > 0)
    return {"C": c[keep].tolist(), "loss": y[keep].tolist()}


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def ladder_svg(reg, result: dict) -> str:
    """The ladder's fit with the target's point, as an <svg> (empty string when the record holds no rungs)."""
    fc = reg.forecast
    rungs, hero = fc.get("rungs") or {}, fc.get("hero") or {}
    try:
        rc = [float(c) for c in rungs["C"]]
        rl = [float(v) for v in rungs["loss"]]
        hc, hl = float(hero["C"]), float(hero["loss"])
    except (KeyError, TypeError, ValueError):
        return ""
    if not rc or len(rc) != len(rl) or min(rc + [hc]) <= 0 or min(rl + [hl]) <= 0:
        return ""
    low, high = _num(hero.get("low")), _num(hero.get("high"))
    line = _path(fc) or {"C": [], "loss": []}
    act = result.get("actual") if result.get("status") == "finished" else None  # a final loss, at the target's C
    ys = rl + [hl] + [v for v in (low, high, act) if v and v > 0] + line["loss"]
    xs = rc + [hc] + line["C"]
    x0, x1 = math.log10(min(xs)) - 0.1, math.log10(max(xs)) + 0.1
    y0, y1 = math.log10(min(ys)), math.log10(max(ys))
    pad = max(0.02, (y1 - y0) * 0.08)
    y0, y1 = y0 - pad, y1 + pad

    def px(c):
        return PAD_L + (math.log10(c) - x0) / (x1 - x0) * (W - PAD_L - PAD_R)

    def py(v):
        return PAD_T + (y1 - math.log10(v)) / (y1 - y0) * (H - PAD_T - PAD_B)

    parts = [f'<svg class="ladder-chart" viewBox="0 0 {W} {H}" role="img" data-testid="ladder-chart" '
             f'aria-label="Final loss against training compute: {len(rc)} rungs, the fitted law and the target">',
             f'<title>The ladder\'s fit: final loss against training compute (log-log)</title>',
             f'<line class="axis" x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}"/>',
             f'<line class="axis" x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}"/>']
    for e in range(math.ceil(x0), math.floor(x1) + 1):
        x = px(10.0 ** e)
        parts.append(f'<text class="tick" x="{x:.1f}" y="{H - PAD_B + 14}" text-anchor="middle">1e{e}</text>')
    for v in np.geomspace(10 ** y0, 10 ** y1, 5)[1:-1]:
        parts.append(f'<text class="tick" x="{PAD_L - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    parts.append(f'<text class="label" x="{(PAD_L + W - PAD_R) / 2:.0f}" y="{H - 6}" text-anchor="middle">'
                 f'training compute C (FLOPs)</text>')
    parts.append(f'<text class="label" x="4" y="{PAD_T + 4}" text-anchor="start">final loss</text>')
    if line["C"]:
        d = " ".join(f"{'M' if i == 0 else 'L'}{px(c):.1f},{py(v):.1f}" for i, (c, v) in
                     enumerate(zip(line["C"], line["loss"])))
        law = escape(str(fc.get("law", "")))
        parts.append(f'<path class="fit" data-testid="fit-line" d="{d}"><title>{law} law fitted on the rungs</title>'
                     '</path>')
    for c, v in zip(rc, rl):
        parts.append(f'<circle class="rung" data-testid="rung" cx="{px(c):.1f}" cy="{py(v):.1f}" r="4">'
                     f'<title>rung: C {c:.3g}, final loss {v:.4g}</title></circle>')
    x = px(hc)
    if low and high:
        parts.append(f'<rect class="band" data-testid="band" x="{x - 7:.1f}" y="{py(high):.1f}" width="14" '
                     f'height="{max(1.0, py(low) - py(high)):.1f}"><title>band [{low:.4g}, {high:.4g}]</title></rect>')
    parts.append(f'<path class="forecast" data-testid="forecast-point" d="M{x - 6:.1f},{py(hl):.1f}h12">'
                 f'<title>forecast {hl:.4g} at C {hc:.3g}</title></path>')
    parts.append(f'<text class="label" x="{x - 10:.1f}" y="{py(high or hl) - 8:.1f}" text-anchor="end">target'
                 f'</text>')
    if act:
        parts.append(f'<circle class="actual" data-testid="actual-point" cx="{x:.1f}" cy="{py(act):.1f}" r="5">'
                     f'<title>actual {act:.4g}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)
