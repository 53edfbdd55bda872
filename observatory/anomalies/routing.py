"""Which detectors watch which metric: the default thresholds, and the name → detectors routing table.

Routing is compiled once per metric name (`plan`) and cached by the Monitor, so a step's ~230 names cost one
dict lookup each; names no detector watches route to an empty tuple. Every name is still checked for
non-finite values by the Monitor itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from observatory import contract
from observatory.anomalies.detectors import (LossScaleDetector, ShiftDetector, SkipDetector, SpikeDetector,
                                             ThresholdDetector)
from observatory.anomalies.forecast import ForecastDetector
from observatory.anomalies.moe import ExpertLoadDetector, RouterBiasDetector
from observatory.anomalies.nonfinite import NonFiniteDetector
from observatory.anomalies.shift import HOST_CPU, PROC_CPU, VALUE
from observatory.anomalies.stall import StallDetector

# Not in the trainer's registry yet (it trains in fp32/bf16); an fp16 trainer logging its dynamic loss scale
# under this name gets the overflow detector.
M_LOSS_SCALE = contract.M_LOSS_SCALE

LOSS_NAMES = frozenset({contract.M_LOSS, contract.M_CE, contract.M_EVAL_LOSS})
LOSS_PREFIXES = (contract.domain_loss(""), contract.eval_domain_loss(""))  # train/loss/<domain>, eval/loss/<d>
_HOST = {contract.HW_CPU_PERCENT: HOST_CPU, contract.HW_PROCESS_CPU: PROC_CPU}
_VECTOR_RE = re.compile("^" + re.escape(contract.ROUTER_METRIC).replace(r"\{layer\}", r"(\d+)")
                        .replace(r"\{name\}", "(" + "|".join(contract.ROUTER_VECTORS) + ")") + r"/(\d+)$")


@dataclass(frozen=True)
class Config:
    """Detector templates; `plan` copies one per series with its metric name filled in."""

    # the total loss: prev_ratio, sustain and sustain_gap chosen by leave-one-log-out cross-validation on the public
    # development logs (bench/anomaly_cv.py, docs/ANOMALIES.md): in a log of every step a single point is one
    # batch's loss, and one that is back at the next points is info; coarse logs keep every single point
    loss: SpikeDetector = SpikeDetector(kind="loss_spike", prev_ratio=1.5, sustain=3, sustain_gap=1)
    # a per-domain loss (train/loss/<domain>) averages the few sequences of its domain in a batch: single points
    # jump by half now and then, so they are info; a climb over several points keeps its severity
    # no rise rule there: three rises in a row are common in so few sequences (the total loss carries a divergence)
    domain_loss: SpikeDetector = SpikeDetector(kind="loss_spike", point_info=True, rise_n=None)
    # norms are noisier than losses, and only big multiples matter: 2× the level at least, no prev/drift rule
    # early training (LR warmup, the rough start) has grad-norm spikes of a few x that pass: info until step 500;
    # a log too short for a level (a coarse log, a chronicle's few lines) still sees 10x its lowest value (burst)
    grad: SpikeDetector = SpikeDetector(kind="grad_norm_spike", alpha=0.05, k=6.0, min_ratio=2.0, prev_ratio=None,
                                        drift_ratio=None, climb_ratio=None, warmup=10, warn=2.0, crit=5.0,
                                        info_before=500, rise_n=None, burst_ratio=10.0, sustain=2)
    grad_high: ThresholdDetector = ThresholdDetector(kind="grad_norm_high")
    update: SpikeDetector = SpikeDetector(kind="update_norm_spike", alpha=0.05, k=6.0, min_ratio=2.0,
                                          prev_ratio=None, drift_ratio=None, climb_ratio=None, warmup=10, warn=2.0,
                                          crit=5.0, rise_n=None)  # no burst: update norms grow with the LR warmup
    skipped: SkipDetector = SkipDetector(kind="overflow")
    loss_scale: LossScaleDetector = LossScaleDetector(kind="overflow")
    # host=True: a shift while other processes take the trainer's CPU is the host's: step time tells it as one
    # host_contention notice, throughput keeps quiet (silent) (see observatory/anomalies/shift.py)
    throughput: ShiftDetector = ShiftDetector(kind="throughput_drop", direction=-1, k=3.0, host=True, silent=True)
    step_time: ShiftDetector = ShiftDetector(kind="step_time_rise", direction=+1, k=3.0, host=True)
    # the first few hundred steps drop more while the router's logits grow and the bias catches up (warmup)
    drops: ShiftDetector = ShiftDetector(kind="drop_surge", direction=+1, rel=0.5, abs_min=0.02, sustain=3,
                                         win=3, crit=2.0, warmup=300)
    experts: ExpertLoadDetector = ExpertLoadDetector()
    bias: RouterBiasDetector = RouterBiasDetector()
    nonfinite: NonFiniteDetector = NonFiniteDetector()
    stall: StallDetector = StallDetector()
    forecast: ForecastDetector = ForecastDetector()  # active only once a run's forecast is set (Monitor.set_forecast)
    extra: tuple = field(default=())  # ((metric name, template), ...): more series to watch


def plan(name: str, cfg: Config) -> tuple[tuple, ...]:
    """The detectors that watch `name`: ((detector, expert index or None), ...). Vector members share one
    detector per layer (equal keys), so the Monitor can group a step's values per layer."""
    out = []
    if name in LOSS_NAMES or name.startswith(contract.eval_domain_loss("")):
        out.append((replace(cfg.loss, metric=name), None))
    elif name.startswith(contract.domain_loss("")):
        out.append((replace(cfg.domain_loss, metric=name), None))
    elif name == contract.M_GRAD_NORM:
        out += [(replace(cfg.grad, metric=name), None), (replace(cfg.grad_high, metric=name), None)]
    elif name == contract.M_UPDATE_NORM:
        out.append((replace(cfg.update, metric=name), None))
    elif name == contract.M_FINITE:
        out.append((replace(cfg.skipped, metric=name), None))
    elif name == M_LOSS_SCALE:
        out.append((replace(cfg.loss_scale, metric=name), None))
    elif name in (contract.M_TOKENS_PER_S, contract.M_MFU):
        out.append((replace(cfg.throughput, metric=name), VALUE if cfg.throughput.host else None))
    elif name == contract.M_STEP_TIME:
        out.append((replace(cfg.step_time, metric=name), VALUE if cfg.step_time.host else None))
    elif name in _HOST:  # context for the host-aware shift detectors, grouped with their value per step
        for template, metric in ((cfg.throughput, contract.M_TOKENS_PER_S), (cfg.throughput, contract.M_MFU),
                                 (cfg.step_time, contract.M_STEP_TIME)):
            if template.host:
                out.append((replace(template, metric=metric), _HOST[name]))
    elif name == contract.M_DROP:
        out.append((replace(cfg.drops, metric=name), None))
    elif name.startswith(contract.ROUTER_PREFIX):
        m = _VECTOR_RE.match(name)
        if m:
            layer, stat, expert = int(m.group(1)), m.group(2), int(m.group(3))
            template = cfg.experts if stat == contract.ROUTING_HIST else cfg.bias
            out.append((replace(template, metric=contract.router_metric(layer, stat), layer=layer), expert))
    for extra_name, template in cfg.extra:
        if extra_name == name:
            out.append((replace(template, metric=name), None))
    return tuple(out)


def watched(name: str, cfg: Config | None = None) -> bool:
    """Whether any detector (beyond the non-finite check) watches `name`."""
    return bool(plan(name, cfg or Config()))
