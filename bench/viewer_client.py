"""The benches' viewers: the compiled client (bench/viewers.c; `build()` compiles it on first use, `CViewers` runs one
process of N viewers; `pairs()`/`wpct()` read its per-step histograms; `summarize()` makes bench/fanout.py's figures)
and `LiveViewer`, one Python viewer of a run's live path as static/js/live.js is (bench/fanout.py, chaos.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from harness import pct

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "bench" / n for n in ("viewers.c", "viewers_ws.c")]  # compiled: viewers.c (it includes the other)


gcc = lambda: shutil.which(os.environ.get("CC", "gcc"))  # noqa: E731


def build(out_dir: Path | None = None) -> Path:
    """The client's binary, compiled once per source version (var/bench/viewers-<hash>)."""
    src = b"".join(p.read_bytes() for p in SOURCES)
    out_dir = out_dir or Path(os.environ.get("OBS_DATA_DIR", ROOT / "var")) / "bench"
    exe = out_dir / f"viewers-{hashlib.sha256(src).hexdigest()[:16]}"
    if exe.exists():
        return exe
    cc = gcc()
    if not cc:
        raise RuntimeError("the C viewer client needs gcc (apt-get install -y gcc)")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".viewers-{os.getpid()}-{threading.get_ident()}"
    try:
        subprocess.run([cc, "-O2", "-Wall", "-o", tmp, str(SOURCES[0])], check=True)
        os.replace(tmp, exe)  # atomic: a concurrent build never runs a half-written binary
    finally:
        tmp.unlink(missing_ok=True)
    return exe


class CViewers:
    """One process of `count` viewers (round-robin over urls), started at `rate` per second (0: all at once).
    hub: the web server's socket (hello, then `resume` with after_step); else nchan's (frames only)."""

    def __init__(self, urls: list[str], count: int, rate: float = 0.0, hub: bool = False,
                 resume: dict | None = None, exe: Path | None = None):
        argv = [str(exe or build()), "--count", str(count), "--rate", str(rate)]
        argv += [a for u in urls for a in ("--url", u)]
        if hub:  # the client appends ,"after_step":<hello's last_step>} to the resume
            argv += ["--hub"] + (["--resume", json.dumps(resume, separators=(",", ":"))[:-1]] if resume else [])
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self.proc.pid

    def ready(self) -> tuple[int, int]:
        """Blocks until every viewer connected or failed: (connected, failed)."""
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "ready":
            raise RuntimeError(f"viewer client exited before ready (rc {self.proc.poll()})")
        return int(line[1]), int(line[2])

    def count(self) -> tuple[int, int, int, int]:
        """(viewer, step) pairs received so far, viewers connected, viewers dropped, data messages received."""
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "count":
            raise RuntimeError(f"viewer client: unexpected answer {line!r} (rc {self.proc.poll()})")
        return int(line[1]), int(line[2]), int(line[3]), int(line[4])

    def stop(self, at: float) -> None:
        """Ask the viewers to listen until unix time `at`, then report."""
        self.proc.stdin.write(f"stop {at:.6f}\n")
        self.proc.stdin.flush()

    def result(self, timeout: float = 120.0) -> dict:
        out, _ = self.proc.communicate(timeout=timeout)
        return json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def bin_ms(b: int) -> float:
    """The middle of viewers.c's histogram bin b, in ms (exact 1 ms bins below 128 ms, 32 per octave above)."""
    if b < 128:
        return b + 0.5
    e, m = 7 + (b - 128) // 32, (b - 128) % 32
    lo = (32 + m) << (e - 5)
    return lo + (1 << (e - 5)) / 2


def pairs(result: dict, ref: dict[int, float], steps: set[int] | None = None) -> list[tuple[float, int]]:
    """[(arrival - ref[step] in ms, viewers)] over the steps in `steps` (default: all of ref's)."""
    out = []
    for step, _n, first, hist in result["steps"]:
        if step not in ref or (steps is not None and step not in steps):
            continue
        base = (first - ref[step]) * 1000
        out += [(base + bin_ms(hist[i]), hist[i + 1]) for i in range(0, len(hist), 2)]
    return out


def wpct(ws: list[tuple[float, int]], q: float) -> float:
    """The q-th percentile of weighted values, as harness.pct() reads an unweighted list."""
    ws = sorted(ws)
    total = sum(w for _, w in ws)
    k = min(total - 1, max(0, round(q / 100 * (total - 1))))
    for v, w in ws:
        if k < w:
            return v
        k -= w
    return ws[-1][0]


def run_stored(base: str, run_id: str, upto: int | None = 0) -> bool:
    """Ingest stored the run (its page and API answer), and its steps up to `upto` unless that is None."""
    try:
        with urllib.request.urlopen(f"{base}/api/runs/{run_id}/", timeout=2) as r:
            last = json.loads(r.read()).get("last_step")
            return upto is None or (last if last is not None else -1) >= upto
    except Exception:
        return False


def got(result: dict, steps: set[int]) -> int:
    """(viewer, step) pairs received for these steps."""
    return sum(n for step, n, _first, _hist in result["steps"] if step in steps)


def start_viewers(urls: list[str], per: list[int], ramp: float, hub: bool, resume: dict | None) -> list:
    """One viewer process per entry of `per` (its viewer count), each on the URLs rotated, ramp/len(per) per s."""
    return [CViewers(urls[i % len(urls):] + urls[:i % len(urls)], n, rate=ramp / len(per), hub=hub, resume=resume)
            for i, n in enumerate(per)]


def summarize(args, tier: str, raw: dict, times: dict[int, float], tap) -> dict:
    window = {s for s, t in times.items() if raw["t_start"] <= t < raw["t_end"]}
    ds, fan, n_got = [], [], 0
    state = {"connected": 0, "failed": 0, "dropped": 0, "duplicates": 0, "errors": {}}
    for res in raw["results"]:
        for k in ("connected", "failed", "dropped", "duplicates"):
            state[k] += res.get(k, 0)
        for e, n in res["errors"].items():
            state["errors"][e] = state["errors"].get(e, 0) + n
        ds, fan, n_got = ds + pairs(res, times, window), fan + pairs(res, tap.pushed, window), n_got + got(res, window)
    expected, wall, c0, c1 = len(window) * args.viewers, raw["wall"], raw["c0"], raw["c1"]
    cpu = {k: round((c1[k] - c0[k]) / wall, 3) for k in c0}
    server_us = (c1["server"] - c0["server"]) * 1e6

    def q(ws, p):
        return round(wpct(ws, p), 1) if ws else None
    out = {"tier": tier, "viewers": args.viewers, "p50_ms": q(ds, 50), "p99_ms": q(ds, 99),
           "delivered_fraction": round(n_got / expected, 4) if expected else None,
           "server_cpu": cpu["server"], "server_rss_mb": raw["rss"][-1][1],
           # server CPU per (viewer, step) delivered, in microseconds; then in user space only (the kernel's share
           # is the socket writes, the same work for every tier)
           "cpu_us_per_frame": round(server_us / n_got, 2) if n_got else None,
           "user_cpu_us_per_frame": round((c1["server_user"] - c0["server_user"]) * 1e6 / n_got, 2) if n_got else None,
           "connect_cpu_ms": round(raw["cpu_ramp"] * 1000 / max(1, args.viewers), 2),
           "connect_s": round(raw["connect_s"], 1),
           # WebSocket messages each tier wrote per (viewer, step) in the window, and its CPU per message (the hub
           # coalesces steps into fewer messages when behind; nchan sends one per publish)
           **({"messages_per_viewer_step": round(raw["messages"] / n_got, 3) if n_got else None,
               "cpu_us_per_message": round(server_us / raw["messages"], 2)} if raw.get("messages") else {}),
           "steps_in_window": len(window), "seconds": round(wall, 1),
           "max_ms": round(max(d for d, _ in ds), 1) if ds else None,
           "viewer_procs": len(raw["results"]), "viewer_procs_cpu": cpu["viewers"], "ingest_cpu": cpu["ingest"],
           "redis_cpu": cpu["redis"], **({"relay_cpu": cpu["relay"]} if "relay" in cpu else {}), **state}
    if tier == "hub":  # the hub's delay in two: publish -> ingest's push (ingest), push -> viewer (fan-out)
        ingest = [(tap.pushed[s] - times[s]) * 1000 for s in window if s in tap.pushed]
        out.update({"ingest_p50_ms": round(pct(ingest, 50), 1) if ingest else None,
                    "ingest_p99_ms": round(pct(ingest, 99), 1) if ingest else None,
                    "fanout_p50_ms": q(fan, 50), "fanout_p99_ms": q(fan, 99)})
    if args.soak:
        out["rss_mb_over_time"] = raw["rss"]
    return out


class LiveViewer(threading.Thread):
    """A page's socket on a run's live path, reconnecting as the page does. nchan (`url` on /live/runs/<id>/,
    ws+meta.nchan): retries while nchan refuses it (403: a run the web does not know yet), resumes from its last
    message id, notes every entry's number (`seqs`, repeats included), "gap" frames and each train/loss step's first
    arrival (`pushed`), and after a hole refetches the series over HTTP (`refetch_url`), as the page does. The hub
    (`metric` given, /ws/runs/<id>/): resumes `metric` after its newest step, keeps its values (`steps`) through
    rewinds, and notes live frames that skipped steps (`live_gaps`: a resume would fill nothing)."""

    def __init__(self, url: str, refetch_url: str = "", metric: str | None = None):
        super().__init__(daemon=True)
        self.url, self.refetch_url, self.metric, self.last_id = url, refetch_url, metric, ""
        self.pushed, self.seqs, self.gaps, self.refetches, self.connects = {}, [], [], [], 0  # pushed: step -> time
        self.steps, self.live_gaps = {}, []
        self.ready, self.stop = threading.Event(), threading.Event()

    def run(self) -> None:
        from websockets.sync.client import connect

        while not self.stop.is_set():
            hub = self.metric is not None
            kw = ({"origin": "http://" + self.url.split("/")[2]} if hub else {"subprotocols": ["ws+meta.nchan"]})
            try:
                with connect(self.url + (f"?last_event_id={self.last_id}" if self.last_id else ""), open_timeout=5,
                             **kw) as ws:
                    self.connects += 1
                    self.ready.set()
                    if hub:
                        last = max(self.steps, default=-1)
                        ws.send(json.dumps({"type": "resume", "metrics": [self.metric], "after_step": last,
                                            "after": {self.metric: last}}))
                    while not self.stop.is_set():
                        try:
                            raw = ws.recv(timeout=0.2)
                        except TimeoutError:
                            continue
                        self._frame(json.loads(raw)) if hub else self._message(raw)
            except Exception:  # refused (no channel yet, a server restarting) or cut: again, from where it was
                self.stop.wait(0.1 if not self.connects else 0.3)

    def _message(self, raw: str) -> None:
        now = time.time()
        head, _, data = raw.partition("\n\n")  # nchan's headers, a blank line, the frame(s)
        self.last_id = head.split("\n")[0].removeprefix("id: ")
        msg = json.loads(data)
        frames = msg if isinstance(msg, list) else [msg]
        seq, gap = frames[0].get("seq"), frames[0].get("type") == "gap"
        if gap:
            self.gaps.append(seq)
        if self.refetch_url and seq is not None and (gap or (self.seqs and seq > max(self.seqs) + 1)):
            try:  # a hole: the page refetches (a failure is noted: it may not cost the socket)
                with urllib.request.urlopen(self.refetch_url, timeout=30) as r:
                    self.refetches.append([seq, r.status])
            except OSError as e:
                self.refetches.append([seq, str(e)[:80]])
        if seq is not None and not gap:
            self.seqs.append(seq)
        for frame in frames:
            for s in (frame.get("series") or {}).get("train/loss", {}).get("steps", []):
                self.pushed.setdefault(s, now)

    def _frame(self, frame) -> None:
        """The hub's frames (a list: a coalesced batch): `metric`'s values, rewinds applied."""
        if isinstance(frame, list):
            for f in frame:
                self._frame(f)
            return
        if frame.get("type") not in ("update", "backfill"):
            return
        for rw in frame.get("rewinds", []):
            self.steps = {s: v for s, v in self.steps.items() if s <= rw["to_step"]}
        s = frame.get("series", {}).get(self.metric) or {"steps": [], "values": []}
        last = max(self.steps, default=-1)
        new = [(st, v) for st, v in zip(s["steps"], s["values"]) if st > last]
        if new and frame["type"] == "update" and new[0][0] > last + 1 and last >= 0:
            self.live_gaps.append([last, new[0][0]])
        self.steps.update(new)
