"""The synthetic labelled set of bench/anomalies.py (data, not a bench): real-shaped runs (Curves) with one event
injected each (an injector changes a Curves in place and appends its label), and clean runs; build_set() is the
fixed-seed set the benchmark reports on."""

from __future__ import annotations

import numpy as np

from observatory import contract
from observatory.anomalies import M_LOSS_SCALE

DOMAINS = ("web", "code", "math", "books")
LAYERS, EXPERTS = 2, 8
TOKENS_PER_STEP = 2048
TICK_S = 5.0  # the live timer: during a gap between steps the bench ticks this often


def trainer_width() -> list[str]:
    """The rest of a trainer's ~230 metric names beside a Curves' own (bench/anomalies.py's cost: router stats for 4
    layers x 8 experts, ~100 per-parameter grad norms, hardware)."""
    fill = [f"grad/norm/{p}" for p in (f"layer_{i}/{w}" for i in range(12) for w in
                                       ("attn/q", "attn/k", "attn/v", "attn/o", "mlp/w1", "mlp/w2", "norm1", "norm2"))]
    fill += [contract.router_metric(l, s) for l in range(4) for s in ("routing_entropy", "load_balancing_loss",
                                                                     "router_z_loss", "capacity_overflow_rate",
                                                                     "max_mean_load")]
    fill += [contract.router_metric(l, f"{s}/{e}") for l in (2, 3) for s in ("routing_hist", "router_bias")
             for e in range(EXPERTS)]
    fill += [contract.mixture_weight(d) for d in DOMAINS] + [contract.tokens_seen(d) for d in DOMAINS]
    return fill + [contract.HW_CPU_PERCENT, contract.HW_LOAD1, contract.HW_RSS, contract.HW_HOST_MEM_USED,
                   contract.HW_HOST_MEM_PERCENT, contract.HW_PROCESS_CPU, contract.HW_PROCESS_THREADS,
                   contract.M_PARAM_NORM, contract.M_LR_MULT, contract.M_TOTAL_STEPS, contract.M_TOTAL_TOKENS,
                   contract.M_DATA_TIME, contract.M_COMPUTE_TIME, contract.M_HOST_TIME, contract.M_MIX_STAGE,
                   contract.M_PUBLISH_DROPPED, contract.M_PUBLISH_QUEUE]


# ---------------------------------------------------------------------------------------------- curves
class Curves:
    """One run's metric arrays (NaN = non-finite, `present` masks = not logged) and its wall clock."""

    def __init__(self, seed: int, n: int, every: int = 1, loss_scale: bool = False, noise: float = 1.0):
        self.rng = rng = np.random.default_rng(seed)
        self.n, self.every, self.labels = n, every, []
        s = np.arange(n, dtype=float)
        bumps = np.ones(n)
        for c in rng.uniform(0, n, size=max(1, n // 800)):  # benign: a data shard that is a bit harder
            bumps *= 1 + rng.uniform(0.015, 0.03) * np.exp(-0.5 * ((s - c) / rng.uniform(20, 60)) ** 2)
        self.loss = (1.8 + 9.0 * (1 + s / 50) ** -0.5) * bumps * (1 + 0.01 * noise * rng.standard_normal(n))
        self.aux = 0.01 + 0.001 * rng.standard_normal(n)
        self.dom = {d: self.loss * f * (1 + 0.03 * noise * rng.standard_normal(n))
                    for d, f in zip(DOMAINS, (0.95, 0.9, 1.1, 1.2))}
        self.dom_present = {d: rng.random(n) < 0.8 for d in DOMAINS}
        warm = max(1, n // 100)
        self.lr = 3e-3 * np.minimum(1, (s + 1) / warm) * np.where(s < warm, 1, 1 - 0.95 * (s - warm) / max(1, n - warm))
        self.update = self.lr / 3e-3 * 0.8 * (1 + 0.05 * noise * rng.standard_normal(n))
        self.grad = (0.25 + 1.5 * np.exp(-s / 80) + 5e-5 * s) * np.exp(0.15 * noise * rng.standard_normal(n))
        self.finite = np.ones(n)
        self.tokens = 12_600 * (1 + 0.015 * noise * rng.standard_normal(n))
        blip = np.ones(n)
        blip[:2] = 0.05  # compilation
        blip[499::500] = 0.4  # a checkpoint every 500 steps
        self.tokens *= blip
        self.drop = np.clip((0.05 + 0.2 * np.exp(-s / 300)) * (1 + 0.1 * noise * rng.standard_normal(n)), 0, 1)
        imbalance = rng.normal(0, 0.4, size=(LAYERS, EXPERTS))
        self.share = np.exp(imbalance[:, None, :] * np.exp(-s / 150)[None, :, None]
                            + 0.1 * noise * rng.standard_normal((LAYERS, n, EXPERTS)))
        target = rng.normal(0, 0.3, size=(LAYERS, EXPERTS))
        target -= target.mean(axis=1, keepdims=True)
        self.bias = target[:, None, :] * (1 - np.exp(-s / 150))[None, :, None] + 0.003 * noise * rng.standard_normal(
            (LAYERS, n, EXPERTS))
        self.loss_scale = self._loss_scale(n) if loss_scale else None
        self.gaps = np.zeros(n)  # extra seconds before step i (stalls)
        self.hb_dead = np.zeros(n, bool)  # no heartbeat during the gap before step i

    def _loss_scale(self, n: int) -> np.ndarray:
        out, scale, good = np.empty(n), 2.0 ** 16, 0
        for i in range(n):
            if self.rng.random() < 1 / 700:  # an isolated overflow: halve, as fp16 training does
                scale, good = scale / 2, 0
            elif good >= 1000:
                scale, good = scale * 2, 0
            good += 1
            out[i] = scale
        return out

    def label(self, kind: str, start: int, end: int, *also: str) -> None:
        self.labels.append({"kind": kind, "start_step": int(start), "end_step": int(end), "also": list(also)})

    def timed_labels(self) -> list[dict]:
        """Its labels, stall and heartbeat_lost ones with gap_t: when the last step before the gap completed (their
        delay is measured in seconds from it)."""
        t = 1.7e9 + np.cumsum(TOKENS_PER_STEP / self.tokens + self.gaps)
        return [{**lab, "gap_t": float(t[lab["start_step"]])} if lab["kind"] in ("stall", "heartbeat_lost") else lab
                for lab in self.labels]

    def steps(self):
        """(step, values, t, heartbeat dead during the gap before it) for every logged step."""
        step_time = TOKENS_PER_STEP / self.tokens
        t = 1.7e9 + np.cumsum(step_time + self.gaps)
        for i in range(0, self.n, self.every):
            v = {contract.M_LOSS: self.loss[i], contract.M_CE: self.loss[i] - self.aux[i],
                 contract.M_AUX: self.aux[i], contract.M_GRAD_NORM: self.grad[i],
                 contract.M_UPDATE_NORM: self.update[i], contract.M_LR: self.lr[i], contract.M_FINITE: self.finite[i],
                 contract.M_TOKENS_PER_S: self.tokens[i], contract.M_MFU: self.tokens[i] * 3.1e-6,
                 contract.M_STEP_TIME: step_time[i], contract.M_DROP: self.drop[i]}
            for d in DOMAINS:
                if self.dom_present[d][i]:
                    v[contract.domain_loss(d)] = self.dom[d][i]
            if i and i % 100 == 0:
                v[contract.M_EVAL_LOSS] = self.loss[i] * 1.04
            for layer in range(LAYERS):
                loads = self.share[layer, i] / self.share[layer, i].sum() * TOKENS_PER_STEP * 2
                hist, bias = contract.router_metric(layer, "routing_hist"), contract.router_metric(layer, "router_bias")
                for e in range(EXPERTS):
                    v[f"{hist}/{e}"] = float(round(loads[e]))
                    v[f"{bias}/{e}"] = self.bias[layer, i, e]
            if self.loss_scale is not None:
                v[M_LOSS_SCALE] = self.loss_scale[i]
            yield i, {k: float(x) for k, x in v.items()}, float(t[i]), bool(self.hb_dead[i])


def trainer_stream(steps: int) -> list[tuple[int, dict[str, float], float]]:
    """(step, values, t) of a clean Curves (seed 99) as wide as a trainer's telemetry: trainer_width()'s names filled
    with uniform noise (bench/anomalies.py's cost)."""
    rng, fill = np.random.default_rng(5), trainer_width()
    stream = []
    for step, values, t, _ in Curves(99, steps).steps():
        values.update({name: float(x) for name, x in zip(fill, rng.random(len(fill)))})
        stream.append((step, values, t))
    return stream


# ---------------------------------------------------------------------------------------------- events
def _at(c: Curves, lo: int, hi: int) -> int:
    s = int(c.rng.integers(lo, hi))
    return s - s % c.every


def loss_spike(c: Curves, size: float, width: int) -> None:
    s0 = _at(c, 600, c.n - 300)
    sl = slice(s0, s0 + width * c.every)
    for arr in (c.loss, *c.dom.values()):
        arr[sl] *= 1 + size
    c.grad[sl] *= 1 + 2 * size
    c.label("loss_spike", s0, s0 + width * c.every - 1, "grad_norm_spike", "update_norm_spike")


def domain_spike(c: Curves, size: float) -> None:
    """One data domain's loss jumps (a bad shard of that domain); the total barely moves."""
    s0, d = _at(c, 600, c.n - 300), DOMAINS[int(c.rng.integers(len(DOMAINS)))]
    c.dom[d][s0:s0 + 3] *= 1 + size
    c.dom_present[d][s0:s0 + 3] = True
    c.label("loss_spike", s0, s0 + 2)


def divergence(c: Curves) -> None:
    """An LR spike: the update norm jumps at once, the loss climbs for a while, then recovers."""
    s0, d = _at(c, 600, c.n - 300), 30
    k = np.arange(d)
    c.update[s0:s0 + d] *= 8
    for arr in (c.loss, *c.dom.values()):
        arr[s0:s0 + d] *= 1 + 0.02 * k + 0.002 * k ** 2
        arr[s0 + d:s0 + d + 60] *= 1 + 3.3 * np.exp(-np.arange(60) / 10) * 0.3
    c.grad[s0:s0 + d] *= 1 + 0.2 * k
    c.label("update_norm_spike", s0, s0 + d - 1, "loss_spike", "grad_norm_spike")
    c.label("loss_spike", s0, s0 + d + 30, "update_norm_spike", "grad_norm_spike")


def coarse_climb(c: Curves) -> None:
    """A divergence over 4 logged points of a log written every k steps, each point < 1.25x the one before (the
    shape of BLOOM tr8-104B's 6.37 -> 6.60 -> 7.31 -> 9.12 -> 10.24), then a plateau and the way back."""
    s0, span = _at(c, 600, c.n - 12 * c.every), 4 * c.every
    u = np.arange(3 * span) / c.every
    f = np.where(u <= 4, 1 + 0.608 * (u / 4) ** 2, np.where(u <= 8, 1.608, 1 + 0.608 * np.clip(12 - u, 0, 4) / 4))
    for arr in (c.loss, *c.dom.values()):
        arr[s0:s0 + 3 * span] *= f[:len(arr[s0:s0 + 3 * span])]
    c.label("loss_spike", s0 + c.every, s0 + 3 * span, "grad_norm_spike", "update_norm_spike")


def grad_spike(c: Curves, size: float) -> None:
    s0 = _at(c, 600, c.n - 300)
    c.grad[s0:s0 + 2] *= size
    c.label("grad_norm_spike", s0, s0 + 1)


def update_then_loss(c: Curves, size: float) -> None:
    """An update-norm spike that a loss spike follows a few steps later."""
    s0 = _at(c, 600, c.n - 300)
    c.update[s0:s0 + 2] *= size
    c.loss[s0 + 3:s0 + 6] *= 1.2
    c.label("update_norm_spike", s0, s0 + 1, "loss_spike")
    c.label("loss_spike", s0 + 3, s0 + 5, "update_norm_spike")


def grad_high(c: Curves, level: float) -> None:
    s0 = _at(c, 800, c.n - 300)
    c.grad[s0:s0 + 150] = level * np.exp(0.1 * c.rng.standard_normal(len(c.grad[s0:s0 + 150])))
    c.label("grad_norm_high", s0, s0 + 149, "grad_norm_spike")


def nonfinite(c: Curves, width: int) -> None:
    s0 = _at(c, 600, c.n - 300)
    for arr in (c.loss, c.grad, c.update, *c.dom.values()):
        arr[s0:s0 + width] = np.nan
    c.finite[s0:s0 + width] = 0
    c.label("nonfinite", s0, s0 + width - 1, "overflow")


def skipped(c: Curves, width: int) -> None:
    s0 = _at(c, 600, c.n - 300)
    c.finite[s0:s0 + width] = 0
    c.label("overflow", s0, s0 + width - 1)


def scale_collapse(c: Curves, halvings: int) -> None:
    s0 = _at(c, 600, c.n - 300)
    for k in range(halvings):
        c.loss_scale[s0 + 3 * k:] /= 2
    c.label("overflow", s0, s0 + 3 * halvings)


def slowdown(c: Curves, size: float) -> None:
    s0 = _at(c, 600, c.n - 400)
    c.tokens[s0:s0 + 200] *= 1 - size
    c.label("throughput_drop", s0, s0 + 199, "step_time_rise")
    c.label("step_time_rise", s0, s0 + 199, "throughput_drop")


def stall(c: Curves, gap: float, heartbeat: bool = True) -> None:
    s0 = _at(c, 600, c.n - 300)
    c.gaps[s0] = gap
    if heartbeat:
        c.label("stall", s0 - 1, s0)
    else:
        c.hb_dead[s0] = True
        c.label("heartbeat_lost", s0 - 1, s0, "stall")


def expert(c: Curves, factor: float) -> None:
    s0, layer, e = _at(c, 600, c.n - 400), int(c.rng.integers(LAYERS)), int(c.rng.integers(EXPERTS))
    c.share[layer, s0:s0 + 200, e] *= factor
    c.label("hot_expert" if factor > 1 else "dead_expert", s0, s0 + 199)


def bias_runaway(c: Curves, rate: float) -> None:
    s0, layer, e = _at(c, 500, c.n - 1200), int(c.rng.integers(LAYERS)), int(c.rng.integers(EXPERTS))
    c.bias[layer, s0:, e] += rate * np.arange(c.n - s0)
    c.label("router_bias_runaway", s0, c.n - 1)


def drop_surge(c: Curves, factor: float) -> None:
    s0 = _at(c, 600, c.n - 300)
    c.drop[s0:s0 + 60] = np.clip(c.drop[s0:s0 + 60] * factor, 0, 1)
    c.label("drop_surge", s0, s0 + 59)


def build_set() -> tuple[list[tuple[str, Curves]], list[tuple[str, Curves]]]:
    """(injected runs, clean runs), each (name, curves); seeds are fixed so the table is reproducible."""
    def each(name, inject, values, **opts):  # a plan per value: (f"{name}-{value}", inject(c, value), opts)
        return [(f"{name}-{v}", lambda c, v=v: inject(c, v), opts) for v in values]

    one = lambda c, a: loss_spike(c, a, 1)  # noqa: E731
    plans = [(f"loss_spike-{a}x{w}", lambda c, a=a, w=w: loss_spike(c, a, w), {})
             for a, w in [(0.08, 1), (0.15, 1), (0.3, 1), (1.0, 1), (0.2, 3), (0.5, 5)]]
    plans += each("loss_spike_sparse", one, (0.15, 0.3), every=10) + each("loss_spike_noisy", one, (0.15, 0.3), noise=2)
    plans += each("domain_spike", domain_spike, (0.3, 0.6)) + [(f"divergence-{i}", divergence, {}) for i in range(3)]
    plans += each("grad_spike", grad_spike, (3, 5, 10)) + each("update_then_loss", update_then_loss, (3, 5))
    plans += each("grad_high", grad_high, (4.5, 6.0)) + each("nonfinite", nonfinite, (1, 3))
    plans += each("nonfinite_sparse", nonfinite, (1,), every=10) + each("skipped", skipped, (1, 4))
    plans += each("scale_collapse", scale_collapse, (3, 6), loss_scale=True)
    plans += each("slowdown", slowdown, (0.05, 0.08, 0.12, 0.2))
    plans += each("slowdown_noisy", slowdown, (0.05, 0.1), noise=2)
    plans += each("stall", stall, (60, 300, 1800))
    plans += each("heartbeat_lost", lambda c, g: stall(c, g, heartbeat=False), (120, 600))
    plans += each("hot_expert", expert, (4, 6, 10)) + each("dead_expert", expert, (0.02, 0.05))
    plans += each("bias_runaway", bias_runaway, (0.001, 0.003), n=2500) + each("drop_surge", drop_surge, (2.5, 4.0))
    plans += [(f"noisy-{k}", f, {"noise": 2}) for k, f in (("hot_expert", lambda c: expert(c, 6)),
                                                          ("grad_spike", lambda c: grad_spike(c, 5)),
                                                          ("drop_surge", lambda c: drop_surge(c, 3)))]
    # appended last, so the runs above keep their seeds
    plans += [(f"coarse_climb-every{k}", coarse_climb, {"every": k, "noise": z, "n": 2500})
              for k, z in ((10, 1), (50, 1), (10, 2))]
    injected = []
    for seed, (name, inject, opts) in enumerate(plans):
        c = Curves(1000 + seed, opts.get("n", 1500), opts.get("every", 1), opts.get("loss_scale", False),
                   opts.get("noise", 1.0))
        inject(c)
        injected.append((name, c))
    clean = [(f"clean-{i}", Curves(7 + i, 4000, every, loss_scale, noise))
             for i, (every, loss_scale, noise) in enumerate([(1, False, 1), (1, True, 1), (1, False, 1),
                                                              (10, False, 1), (1, True, 1), (1, False, 2),
                                                              (10, False, 2)])]
    return injected, clean
