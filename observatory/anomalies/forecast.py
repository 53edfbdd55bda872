"""`forecast_deviation`: the live loss leaves a pre-registered forecast's band (observatory.scaling registration).
The rule (which loss, from when, the widened band, episodes and score): docs/ANOMALIES.md "forecast_deviation in
detail".
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

from observatory import contract
from observatory.anomalies.model import CRITICAL, WARNING, anomaly, close_ep, fmt, open_ep, peak_ep, severity_for

KIND = "forecast_deviation"
TRAIN, EVAL = contract.M_LOSS, contract.M_EVAL_LOSS


@dataclass(frozen=True)
class ForecastDetector:
    kind: str = KIND
    alpha: float = 0.1  # EMA weight of a new train/loss point (debiased, as the dashboard's smoothing)
    sustain: int = 5  # consecutive evaluations outside the band before an episode opens
    from_fraction: float = 0.5  # judged only once tokens >= this fraction of the target's D
    slack: float = 0.05  # relative widening of the upper edge at from_fraction·D, shrinking to 0 at D
    no_band_rel: float = 0.01  # a forecast without bootstrap bands: ± this fraction of its loss
    warn: float = 1.0
    crit: float = 3.0  # half widths outside

    def init(self) -> dict:
        return {"band": None, "last": -1, "src": None, "ema": 0.0, "n": 0, "tps": None, "streak": 0, "since": None,
                "side": 0, "ep": None}

    # ------------------------------------------------------------------------------------------ the band
    def band_of(self, record: dict) -> dict:
        """The compact band the detector needs from a (verified) registration record; ValueError if unusable."""
        try:
            fc, D = record["forecast"], float(record["target"]["D"])
            curve = fc["curve"]
            tokens, loss = [float(x) for x in curve["tokens"]], [float(x) for x in curve["loss"]]
            low = curve.get("low") or [x * (1 - self.no_band_rel) for x in loss]
            high = curve.get("high") or [x * (1 + self.no_band_rel) for x in loss]
            low, high = [float(x) for x in low], [float(x) for x in high]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a forecast registration ({e})") from None
        if not (len(tokens) == len(loss) == len(low) == len(high) >= 2) or not D > 0:
            raise ValueError("forecast curve: tokens, loss, low, high must be equally long (>= 2)")
        i = max(0, bisect_left(tokens, self.from_fraction * D) - 1)
        return {"sha": str(record.get("sha256", "")), "D": D, "tokens": tokens[i:], "loss": loss[i:],
                "low": low[i:], "high": high[i:]}

    def set_band(self, state: dict, band: dict | None) -> dict:
        """A new forecast (a restart republishes the same one: no change). Resets what was counted."""
        if (band or {}).get("sha") == (state["band"] or {}).get("sha"):
            return state
        return {**self.init(), "band": band, "last": state["last"], "tps": state["tps"]}

    def edges(self, band: dict, t: float) -> tuple[float, float, float] | None:
        """(low, forecast, high) at t tokens, the upper edge widened for the schedule; None before f·D."""
        D, f = band["D"], self.from_fraction
        if t < f * D:
            return None
        xs = band["tokens"]
        lo, mid, hi = (_interp(xs, band[k], t) for k in ("low", "loss", "high"))
        widen = self.slack * max(0.0, D - t) / (D - f * D) if f < 1 else 0.0
        return lo, mid, hi * (1 + widen)

    # ------------------------------------------------------------------------------------------ feeding
    def update(self, state: dict, step: int, values: dict) -> tuple[dict, list]:
        """One step's values (any subset). Uses train/loss, eval/loss and throughput/total_tokens."""
        tokens = values.get(contract.M_TOTAL_TOKENS)
        if tokens is not None and not math.isfinite(tokens):
            tokens = None
        # non-finite losses are the nonfinite detector's: here they are as if not logged
        has_eval = EVAL in values and math.isfinite(values[EVAL])
        has_train = TRAIN in values and math.isfinite(values[TRAIN])
        if state["band"] is None or step <= state["last"] or not (has_eval or has_train):
            if tokens is not None and step > 0 and tokens > 0 and step > state["last"]:
                state = {**state, "tps": tokens / step}
            return state, []
        st = {**state, "last": step}
        if tokens is not None and step > 0 and tokens > 0:
            st["tps"] = tokens / step
        t = tokens if tokens is not None else (st["tps"] * step if st["tps"] else None)
        if has_eval and st["src"] != EVAL:  # eval/loss wins from its first point: what the rungs were scored on
            st.update(src=EVAL, streak=0, since=None, side=0)
        elif st["src"] is None:
            st["src"] = TRAIN
        if has_train:
            st["n"] += 1
            st["ema"] = st["ema"] * (1 - self.alpha) + self.alpha * values[TRAIN]
        if st["src"] == EVAL and not has_eval:
            return st, []
        live = values[EVAL] if st["src"] == EVAL else st["ema"] / (1 - (1 - self.alpha) ** st["n"])
        e = self.edges(st["band"], t) if t is not None else None
        if e is None:
            return st, []
        lo, mid, hi = e
        side = 1 if live > hi else -1 if live < lo else 0
        half = max((hi - lo) / 2, 1e-12 * abs(mid))
        score = (live - hi) / half if side > 0 else (lo - live) / half if side < 0 else 0.0
        metric = st["src"]
        if side == 0:
            st.update(streak=0, since=None, side=0)
            if st["ep"] is not None:
                ep, st["ep"] = st["ep"], None
                return st, close_ep(self.kind, metric, ep, step)
            return st, []
        closed = []
        if side != st["side"]:
            if st["ep"] is not None:  # straight from above the band to below it (or back): a new episode
                closed, st["ep"] = close_ep(self.kind, metric, st["ep"], step), None
            st.update(streak=0, since=step, side=side)
        st["streak"] += 1
        why = (f"{'eval loss' if metric == EVAL else 'smoothed train loss'} {fmt(live)} at {fmt(t)} tokens is "
               f"{'above' if side > 0 else 'below'} the pre-registered band [{fmt(lo)}, {fmt(hi)}] "
               f"(forecast {fmt(mid)}) for {st['streak']} evaluations")
        sev = severity_for(score, self.warn, self.crit)
        sev = CRITICAL if sev == CRITICAL else WARNING
        if st["ep"] is None and st["streak"] >= self.sustain:
            st["ep"], ev = open_ep(self.kind, metric, step, st["since"], score, sev, why, side=side)
            return st, closed + ev
        if st["ep"] is not None:
            st["ep"], ev = peak_ep(self.kind, metric, st["ep"], step, score, sev, why)
            return st, closed + ev
        return st, closed

    def rewind(self, state: dict, to_step: int) -> tuple[dict, list]:
        """Steps after `to_step` are superseded: an episode begun after it is returned; the streak and the EMA
        restart (the EMA from the points that come again)."""
        st, gone = dict(state), []
        st["last"] = min(st["last"], to_step)
        ep = st.get("ep")
        if ep is not None and ep["start"] > to_step:
            gone.append(anomaly(self.kind, st["src"] or TRAIN, ep))
            st["ep"] = None
        st.update(streak=0, since=None, side=0, ema=0.0, n=0)
        return st, gone

    def open_anomaly(self, state: dict):
        return anomaly(self.kind, state["src"] or TRAIN, state["ep"]) if state.get("ep") else None


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    """Linear in log tokens (the curve is geometric in tokens); flat beyond either end."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    j = bisect_left(xs, x)
    a, b = math.log(xs[j - 1]), math.log(xs[j])
    w = (math.log(x) - a) / (b - a) if b > a else 1.0
    return ys[j - 1] + w * (ys[j] - ys[j - 1])
