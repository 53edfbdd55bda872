"""The metric-name registry: every series name the trainer publishes, and what it means.

Names follow the reference lab's logging (BRIEF §2). Fixed names are constants; names with a part (a layer, a
domain, a parameter path, a device) come from the template functions below, so the trainer, the web and the
detectors spell them one way. `describe(name)` gives the unit and a one-line meaning for any registered name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MetricInfo", "M_LOSS", "M_CE", "M_AUX", "M_FINITE", "M_LR", "M_LR_MULT", "M_TOTAL_STEPS",
           "M_UPDATE_NORM", "M_GRAD_NORM", "M_PARAM_NORM", "M_TOKENS_PER_S", "M_MFU", "M_TOTAL_TOKENS",
           "M_STEP_TIME", "M_DATA_TIME", "M_COMPUTE_TIME", "M_HOST_TIME", "M_DROP", "M_MIX_STAGE",
           "M_FAULT_ACTIVE", "M_PUBLISH_DROPPED", "M_PUBLISH_QUEUE", "M_EVAL_LOSS", "HW_CPU_PERCENT", "HW_LOAD1",
           "HW_HOST_MEM_USED", "HW_HOST_MEM_PERCENT", "HW_RSS", "HW_PROCESS_CPU", "HW_PROCESS_THREADS",
           "ROUTER_METRIC", "ROUTER_STATS", "DEFAULT_DASHBOARD_METRICS", "router_metric", "domain_loss",
           "eval_domain_loss", "mixture_weight", "tokens_seen", "grad_norm", "param_norm", "gpu_metric",
           "event_metric", "describe", "M_LOSS_SCALE"]


@dataclass(frozen=True)
class MetricInfo:
    unit: str
    meaning: str


M_LOSS = "train/loss"
M_CE = "train/cross_entropy_loss"
M_AUX = "train/aux_loss"
M_FINITE = "train/finite"
M_LR = "optim/learning_rate"
M_LR_MULT = "optim/lr_multiplier"
M_TOTAL_STEPS = "optim/total_steps"
M_UPDATE_NORM = "optim/update_norm"
M_LOSS_SCALE = "optim/loss_scale"  # mixed-precision loss scale (fp16 runs): halvings mean overflows
M_GRAD_NORM = "grad/norm/total"
M_PARAM_NORM = "params/norm/total"
M_TOKENS_PER_S = "throughput/tokens_per_second"
M_MFU = "throughput/mfu"
M_TOTAL_TOKENS = "throughput/total_tokens"
M_STEP_TIME = "time/step_s"
M_DATA_TIME = "time/data_s"
M_COMPUTE_TIME = "time/compute_s"
M_HOST_TIME = "time/host_s"
M_DROP = "moe/drop_fraction"
M_MIX_STAGE = "mixture/stage"
M_FAULT_ACTIVE = "fault/active"
M_PUBLISH_DROPPED = "sys/publish_dropped"
M_PUBLISH_QUEUE = "sys/publish_queue"
M_EVAL_LOSS = "eval/loss"
HW_CPU_PERCENT = "hw/cpu_percent"
HW_LOAD1 = "hw/load1"
HW_HOST_MEM_USED = "hw/host_mem_used_bytes"
HW_HOST_MEM_PERCENT = "hw/host_mem_percent"
HW_RSS = "hw/rss_bytes"
HW_PROCESS_CPU = "hw/process_cpu_percent"
HW_PROCESS_THREADS = "hw/process_threads"

ROUTER_METRIC = "train/router/layer_{layer}/{name}"
# Per-layer router statistics; routing_hist and router_bias are vectors, published per expert as `<name>/<e>`.
ROUTER_STATS = ("routing_hist", "routing_entropy", "load_balancing_loss", "router_z_loss",
                "capacity_overflow_rate", "max_mean_load", "router_bias")
DEFAULT_DASHBOARD_METRICS = (M_LOSS, M_LR, M_GRAD_NORM, M_TOKENS_PER_S)


def router_metric(layer: int, name: str) -> str:
    """train/router/layer_{layer}/{name}: routing_entropy, load_balancing_loss, router_z_loss, ..."""
    return ROUTER_METRIC.format(layer=layer, name=name)


def domain_loss(domain: str) -> str:
    return f"{M_LOSS}/{domain}"


def eval_domain_loss(domain: str) -> str:
    return f"{M_EVAL_LOSS}/{domain}"


def mixture_weight(domain: str) -> str:
    return f"mixture/weight/{domain}"


def tokens_seen(domain: str) -> str:
    return f"data/tokens_seen/{domain}"


def grad_norm(path: str) -> str:
    return f"grad/norm/{path}"


def param_norm(path: str) -> str:
    return f"params/norm/{path}"


def gpu_metric(index: int, name: str) -> str:
    return f"hw/gpu{index}/{name}"


def event_metric(name: str) -> str:
    return f"events/{name}"


_FIXED: dict[str, MetricInfo] = {
    M_LOSS: MetricInfo("nats", "training loss (cross-entropy plus auxiliary terms)"),
    M_CE: MetricInfo("nats", "cross-entropy of the next token"),
    M_AUX: MetricInfo("nats", "auxiliary router losses added to the loss (z-loss)"),
    M_FINITE: MetricInfo("flag", "1 when loss and gradients were finite (the update was applied)"),
    M_LR: MetricInfo("", "learning rate used by this step"),
    M_LR_MULT: MetricInfo("×", "operator multiplier on the scheduled learning rate"),
    M_TOTAL_STEPS: MetricInfo("steps", "steps planned for the token budget"),
    M_UPDATE_NORM: MetricInfo("", "global norm of the parameter update"),
    M_LOSS_SCALE: MetricInfo("", "dynamic loss scale of mixed-precision training"),
    M_GRAD_NORM: MetricInfo("", "global gradient norm before clipping"),
    M_PARAM_NORM: MetricInfo("", "global parameter norm"),
    M_TOKENS_PER_S: MetricInfo("tokens/s", "training throughput"),
    M_MFU: MetricInfo("fraction", "model FLOPs utilisation (useful FLOPs / peak FLOPs)"),
    M_TOTAL_TOKENS: MetricInfo("tokens", "tokens trained on so far"),
    M_STEP_TIME: MetricInfo("s", "wall time of one step"),
    M_DATA_TIME: MetricInfo("s", "time spent drawing the batch"),
    M_COMPUTE_TIME: MetricInfo("s", "time the device spent on the step"),
    M_HOST_TIME: MetricInfo("s", "host-side time (logging, publishing)"),
    M_DROP: MetricInfo("fraction", "routed assignments dropped by capacity limits, over all layers"),
    M_MIX_STAGE: MetricInfo("stage", "data stage: 0 pretrain, 1 midtrain"),
    M_FAULT_ACTIVE: MetricInfo("flag", "1 while an injected fault is in effect"),
    M_PUBLISH_DROPPED: MetricInfo("messages", "telemetry messages the publisher had to drop"),
    M_PUBLISH_QUEUE: MetricInfo("messages", "telemetry messages waiting to be written to Redis"),
    M_EVAL_LOSS: MetricInfo("nats", "loss on the held-out evaluation split"),
    HW_CPU_PERCENT: MetricInfo("%", "host CPU use"),
    HW_LOAD1: MetricInfo("", "host load average over 1 minute"),
    HW_HOST_MEM_USED: MetricInfo("bytes", "host memory in use"),
    HW_HOST_MEM_PERCENT: MetricInfo("%", "host memory in use"),
    HW_RSS: MetricInfo("bytes", "trainer resident memory"),
    HW_PROCESS_CPU: MetricInfo("%", "trainer CPU use"),
    HW_PROCESS_THREADS: MetricInfo("threads", "trainer threads"),
}

_PATTERNS: tuple[tuple[re.Pattern, MetricInfo], ...] = (
    (re.compile(r"^train/router/layer_\d+/routing_entropy$"), MetricInfo("nats", "entropy of the routing")),
    (re.compile(r"^train/router/layer_\d+/load_balancing_loss$"), MetricInfo("", "load-balancing loss (logged)")),
    (re.compile(r"^train/router/layer_\d+/router_z_loss$"), MetricInfo("", "router logit z-loss")),
    (re.compile(r"^train/router/layer_\d+/capacity_overflow_rate$"),
     MetricInfo("fraction", "routed assignments dropped at this layer")),
    (re.compile(r"^train/router/layer_\d+/routing_hist/\d+$"), MetricInfo("tokens", "assignments to one expert")),
    (re.compile(r"^train/router/layer_\d+/router_bias/\d+$"), MetricInfo("", "routing bias of one expert")),
    (re.compile(r"^train/router/layer_\d+/max_mean_load$"), MetricInfo("×", "busiest expert's load over the mean")),
    (re.compile(r"^train/router/layer_\d+/.+$"), MetricInfo("", "router statistic of one MoE layer")),
    (re.compile(r"^train/loss/.+$"), MetricInfo("nats", "training loss on one data domain")),
    (re.compile(r"^eval/loss/.+$"), MetricInfo("nats", "held-out loss on one data domain")),
    (re.compile(r"^mixture/weight/.+$"), MetricInfo("fraction", "sampling weight of one data domain")),
    (re.compile(r"^data/tokens_seen/.+$"), MetricInfo("tokens", "tokens drawn from one data domain")),
    (re.compile(r"^grad/norm/.+$"), MetricInfo("", "gradient norm of one parameter group")),
    (re.compile(r"^params/norm/.+$"), MetricInfo("", "norm of one parameter group")),
    (re.compile(r"^hw/gpu\d+/.+$"), MetricInfo("", "accelerator reading")),
    (re.compile(r"^events/.+$"), MetricInfo("count", "events of one kind")),
)


def describe(name: str) -> MetricInfo | None:
    """Unit and meaning of a registered name, or None for a name the registry does not know."""
    info = _FIXED.get(name)
    if info is not None:
        return info
    for pattern, info in _PATTERNS:
        if pattern.match(name):
            return info
    return None
