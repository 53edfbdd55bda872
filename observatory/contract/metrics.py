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
           "ROUTER_METRIC", "ROUTER_PREFIX", "ROUTER_STATS", "ROUTER_VECTORS",
           "ROUTING_HIST", "ROUTER_BIAS", "DEFAULT_DASHBOARD_METRICS", "router_metric", "domain_loss",
           "eval_domain_loss", "mixture_weight", "tokens_seen", "grad_norm", "param_norm", "gpu_metric",
           "event_metric", "describe", "M_LOSS_SCALE", "GROUPS", "GLOSSARY", "title", "group",
           "glossary_topic", "registry"]


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

ROUTER_PREFIX = "train/router/"  # every router series starts with it
ROUTER_METRIC = ROUTER_PREFIX + "layer_{layer}/{name}"
# Per-layer router statistics; the ROUTER_VECTORS are published per expert as `<name>/<e>`.
ROUTER_STATS = ("routing_hist", "routing_entropy", "load_balancing_loss", "router_z_loss",
                "capacity_overflow_rate", "max_mean_load", "router_bias")
ROUTING_HIST, ROUTER_BIAS = "routing_hist", "router_bias"  # tokens per expert; the router's per-expert bias
ROUTER_VECTORS = (ROUTING_HIST, ROUTER_BIAS)
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


# ---------------------------------------------------------------------------------------------- for readers
# Human titles, picker groups and a glossary, so every page names a series one way. Pattern titles fill {1}, {2}
# from the pattern's groups. `registry()` hands all of it to browsers as JSON (the patterns are plain regexes
# that JavaScript reads the same way).
_TITLES: dict[str, str] = {
    M_LOSS: "Training loss", M_CE: "Cross-entropy", M_AUX: "Auxiliary router loss", M_FINITE: "Finite update",
    M_LR: "Learning rate", M_LR_MULT: "LR multiplier", M_TOTAL_STEPS: "Planned steps", M_UPDATE_NORM: "Update norm",
    M_LOSS_SCALE: "Loss scale", M_GRAD_NORM: "Gradient norm", M_PARAM_NORM: "Parameter norm",
    M_TOKENS_PER_S: "Throughput", M_MFU: "MFU", M_TOTAL_TOKENS: "Tokens trained", M_STEP_TIME: "Step time",
    M_DATA_TIME: "Data time", M_COMPUTE_TIME: "Compute time", M_HOST_TIME: "Host time", M_DROP: "Token drop",
    M_MIX_STAGE: "Data stage", M_FAULT_ACTIVE: "Injected fault", M_PUBLISH_DROPPED: "Dropped telemetry",
    M_PUBLISH_QUEUE: "Telemetry queue", M_EVAL_LOSS: "Held-out loss", HW_CPU_PERCENT: "Host CPU",
    HW_LOAD1: "Host load", HW_HOST_MEM_USED: "Host memory", HW_HOST_MEM_PERCENT: "Host memory use",
    HW_RSS: "Trainer memory", HW_PROCESS_CPU: "Trainer CPU", HW_PROCESS_THREADS: "Trainer threads",
}
_TITLE_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"^train/router/layer_(\d+)/routing_hist/(\d+)$", "Tokens to expert {2} · layer {1}"),
    (r"^train/router/layer_(\d+)/router_bias/(\d+)$", "Router bias of expert {2} · layer {1}"),
    (r"^train/router/layer_(\d+)/routing_entropy$", "Routing entropy · layer {1}"),
    (r"^train/router/layer_(\d+)/load_balancing_loss$", "Load-balancing loss · layer {1}"),
    (r"^train/router/layer_(\d+)/router_z_loss$", "Router z-loss · layer {1}"),
    (r"^train/router/layer_(\d+)/capacity_overflow_rate$", "Capacity overflow · layer {1}"),
    (r"^train/router/layer_(\d+)/max_mean_load$", "Max/mean expert load · layer {1}"),
    (r"^train/router/layer_(\d+)/(.+)$", "Router {2} · layer {1}"),
    (r"^train/loss/(.+)$", "Training loss · {1}"),
    (r"^eval/loss/(.+)$", "Held-out loss · {1}"),
    (r"^mixture/weight/(.+)$", "Mixture weight · {1}"),
    (r"^data/tokens_seen/(.+)$", "Tokens seen · {1}"),
    (r"^grad/norm/(.+)$", "Gradient norm · {1}"),
    (r"^params/norm/(.+)$", "Parameter norm · {1}"),
    (r"^hw/gpu(\d+)/(.+)$", "GPU {1} · {2}"),
    (r"^events/(.+)$", "Events · {1}"),
)
# (name prefix, group) in order: the first match wins.
GROUPS: tuple[tuple[str, str], ...] = (
    ("train/router/", "Mixture of experts"), ("moe/", "Mixture of experts"), ("train/", "Loss"),
    ("eval/", "Evaluation"), ("optim/", "Optimizer"), ("grad/", "Gradients"), ("params/", "Parameters"),
    ("throughput/", "Throughput"), ("time/", "Step time"), ("mixture/", "Data mixture"), ("data/", "Data mixture"),
    ("hw/", "Hardware"), ("sys/", "Telemetry pipeline"), ("fault/", "Faults"), ("events/", "Events"),
)
GLOSSARY: dict[str, str] = {
    "loss": "The loss measures how surprised the model is by the next token of its training text, in nats "
            "(natural-log units): lower is better, and a loss of 2.0 means the right token got about e^-2 ≈ 14% "
            "probability on average. Per-domain lines show the same for each data source. A one-step spike is a "
            "batch the model found very surprising; a steady climb is a sign of divergence.",
    "learning_rate": "The learning rate scales every parameter update. It warms up from zero, holds, then decays "
                     "towards the end of the token budget; an operator can multiply it or re-plan the schedule "
                     "when the token budget changes.",
    "grad_norm": "The gradient norm is the overall size of the gradient before clipping. A spike means one batch "
                 "pulled the parameters hard; a norm that keeps growing often comes before a loss blow-up. Updates "
                 "are clipped to a maximum norm, so one bad batch cannot move the model arbitrarily far.",
    "throughput": "Throughput is how many training tokens the hardware gets through per second, from the start of "
                  "a step until the device has finished it. Steps cut short or stretched by a checkpoint, a pause or "
                  "compilation are not representative samples.",
    "mfu": "MFU (model FLOPs utilisation) is the share of the hardware's peak arithmetic spent on the model's useful "
           "work: tokens/s × FLOPs per token ÷ peak FLOP/s. It cannot exceed 100%, and it means nothing unless the "
           "hardware's peak is known.",
    "token_drop": "In a mixture-of-experts layer every token is sent to a few experts, and each expert takes at most "
                  "a fixed number of tokens per batch (its capacity). Assignments beyond capacity are dropped: the "
                  "token skips that expert. The drop fraction is the share lost this way; high values waste the "
                  "batch and hurt quality.",
    "router_load": "For one mixture-of-experts layer: how many tokens each expert (rows) received at each step "
                   "(columns); bright cells are busy experts. A healthy router spreads tokens evenly; a row that "
                   "stays bright is an expert hogging tokens. Max/mean load is the busiest expert over the average "
                   "(1.0 is perfectly even); overflow is the share of assignments dropped at capacity.",
    "router_bias": "Auxiliary-loss-free balancing keeps a bias per expert: it is raised for under-used experts and "
                   "lowered for over-used ones, so routing evens out without an extra loss term.",
    "mixture": "The data mixture is the share of each text source in the batches. Training moves through stages "
               "(pretrain, then midtrain), each with its own weights.",
    "step_time": "Wall time of one training step, split into drawing the batch (data), the device's work (compute) "
                 "and the host's bookkeeping (logging, publishing).",
    "hardware": "Readings of the machine the trainer runs on, sampled about once a second.",
}
_TOPICS: tuple[tuple[str, str], ...] = (
    (r"^(train/loss|train/cross_entropy_loss|eval/loss)(/.+)?$", "loss"),
    (r"^optim/(learning_rate|lr_multiplier)$", "learning_rate"),
    (r"^grad/norm/.+$", "grad_norm"),
    (r"^throughput/tokens_per_second$", "throughput"),
    (r"^throughput/mfu$", "mfu"),
    (r"^(moe/drop_fraction|train/router/layer_\d+/capacity_overflow_rate)$", "token_drop"),
    (r"^train/router/layer_\d+/(routing_hist/\d+|max_mean_load)$", "router_load"),
    (r"^train/router/layer_\d+/router_bias/\d+$", "router_bias"),
    (r"^(mixture|data)/.+$", "mixture"),
    (r"^time/.+$", "step_time"),
    (r"^hw/.+$", "hardware"),
)


def title(name: str) -> str:
    """A human title for a series name ("Training loss · docs_text"); the name itself when unregistered."""
    if name in _TITLES:
        return _TITLES[name]
    for pattern, fmt in _TITLE_PATTERNS:
        m = re.match(pattern, name)
        if m:
            return fmt.replace("{1}", m.group(1)).replace("{2}", m.group(2) if m.re.groups > 1 else "")
    return name


def group(name: str) -> str:
    return next((g for prefix, g in GROUPS if name.startswith(prefix)), "Other")


def glossary_topic(name: str) -> str | None:
    """The GLOSSARY entry that explains a series, if any."""
    return next((topic for pattern, topic in _TOPICS if re.match(pattern, name)), None)


def registry() -> dict:
    """Everything above as JSON for browsers: fixed names, then patterns tried in order (first match wins)."""
    def info(i: MetricInfo | None) -> dict:
        return {"unit": i.unit, "meaning": i.meaning} if i else {}

    return {"fixed": {n: {"title": _TITLES.get(n, n), **info(i)} for n, i in _FIXED.items()},
            "titles": [list(p) for p in _TITLE_PATTERNS],
            "infos": [[p.pattern, info(i)] for p, i in _PATTERNS],
            "groups": [list(g) for g in GROUPS], "topics": [list(t) for t in _TOPICS], "glossary": GLOSSARY}
