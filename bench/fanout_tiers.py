"""bench/fanout.py's parts: the viewer processes of either client (bench/viewers.c, the
default where gcc is, or bench/fanout_viewers.py's Python ones), and the per-tier summary."""

from __future__ import annotations

import multiprocessing as mp

from fanout_viewers import worker
from harness import pct
from viewer_client import CViewers, got, pairs, wpct


class PyViewers:
    """bench/fanout_viewers.py's viewers in one process, behind CViewers' interface."""

    def __init__(self, urls: list[str], count: int, rate: float, hub: bool, resume: dict | None):
        self.pipe, b = mp.Pipe()
        self.proc = mp.get_context("spawn").Process(target=worker, args=(urls, "http://127.0.0.1", count, resume,
                                                                         rate, b, hub), daemon=True)
        self.proc.start()
        self.pid = self.proc.pid

    def ready(self) -> tuple[int, int]:
        _, c, f = self.pipe.recv()
        return c, f

    def stop(self, at: float) -> None:
        self.pipe.send(("stop", at))

    def result(self) -> dict:
        _, recs, state = self.pipe.recv()
        self.proc.join(10)
        return {**state, "recs": [dict(r) for r in recs]}

    def count(self) -> None:  # no message counts from the Python viewers
        return None

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()


def start_viewers(client: str, urls: list[str], per: list[int], ramp: float, hub: bool, resume: dict | None) -> list:
    """One viewer process per entry of `per` (its viewer count), each on the URLs rotated, ramp/len(per) per s."""
    out = []
    for i, n in enumerate(per):
        mine = urls[i % len(urls):] + urls[:i % len(urls)]
        if client == "c":
            out.append(CViewers(mine, n, rate=ramp / len(per), hub=hub, resume=resume))
        else:
            out.append(PyViewers(mine, n, ramp / len(per), hub, resume))
    return out


def delays(result: dict, ref: dict[int, float], window: set[int]) -> list[tuple[float, int]]:
    """(arrival - ref[step] in ms, viewers) for the window's steps, from either client's result."""
    if "recs" not in result:
        return pairs(result, ref, window)
    return [((rec[s] - ref[s]) * 1000, 1) for rec in result["recs"] for s in window if s in rec and s in ref]


def received(result: dict, window: set[int]) -> int:
    if "recs" not in result:
        return got(result, window)
    return sum(1 for rec in result["recs"] for s in window if s in rec)


def summarize(args, tier: str, raw: dict, times: dict[int, float], tap) -> dict:
    window = {s for s, t in times.items() if raw["t_start"] <= t < raw["t_end"]}
    ds, fan, n_got = [], [], 0
    state = {"connected": 0, "failed": 0, "dropped": 0, "duplicates": 0, "errors": {}}
    for res in raw["results"]:
        for k in state:
            if k != "errors":
                state[k] += res.get(k, 0)
        for e, n in res["errors"].items():
            state["errors"][e] = state["errors"].get(e, 0) + n
        ds += delays(res, times, window)
        fan += delays(res, tap.pushed, window)
        n_got += received(res, window)
    expected = len(window) * args.viewers
    wall, c0, c1 = raw["wall"], raw["c0"], raw["c1"]
    cpu = {k: round((c1[k] - c0[k]) / wall, 3) for k in c0}

    def q(ws, p):
        return round(wpct(ws, p), 1) if ws else None
    out = {"tier": tier, "viewers": args.viewers, "client": args.client, "p50_ms": q(ds, 50), "p99_ms": q(ds, 99),
           "delivered_fraction": round(n_got / expected, 4) if expected else None,
           "server_cpu": cpu["server"], "server_rss_mb": raw["rss"][-1][1],
           # server CPU per (viewer, step) delivered, in microseconds
           "cpu_us_per_frame": round((c1["server"] - c0["server"]) * 1e6 / n_got, 2) if n_got else None,
           # the same in user space only (the kernel's share is the socket writes, the same work for every tier)
           **({"user_cpu_us_per_frame": round((c1["server_user"] - c0["server_user"]) * 1e6 / n_got, 2)}
              if n_got and "server_user" in c0 else {}),
           "connect_cpu_ms": round(raw["cpu_ramp"] * 1000 / max(1, args.viewers), 2),
           "connect_s": round(raw["connect_s"], 1),
           # WebSocket messages each tier wrote per (viewer, step) in the window, and its CPU per message (the hub
           # coalesces steps into fewer messages when behind; nchan sends one per publish): the C client only
           **({"messages_per_viewer_step": round(raw["messages"] / n_got, 3) if n_got else None,
               "cpu_us_per_message": round((c1["server"] - c0["server"]) * 1e6 / raw["messages"], 2)}
              if raw.get("messages") else {}),
           "steps_in_window": len(window), "seconds": round(wall, 1),
           "max_ms": round(max(d for d, _ in ds), 1) if ds else None,
           "viewer_procs": len(raw["results"]), "viewer_procs_cpu": cpu["viewers"], "ingest_cpu": cpu["ingest"],
           "redis_cpu": cpu["redis"], **({"relay_cpu": cpu["relay"]} if "relay" in cpu else {}), **state}
    if tier == "hub":
        # the two halves of the hub's delay: publish -> ingest's push (ingest), push -> viewer (fan-out)
        ingest = [(tap.pushed[s] - times[s]) * 1000 for s in window if s in tap.pushed]
        out.update({"ingest_p50_ms": round(pct(ingest, 50), 1) if ingest else None,
                    "ingest_p99_ms": round(pct(ingest, 99), 1) if ingest else None,
                    "fanout_p50_ms": q(fan, 50), "fanout_p99_ms": q(fan, 99)})
    if args.soak:
        out["rss_mb_over_time"] = raw["rss"]
    return out
