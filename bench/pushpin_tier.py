"""Pushpin as the push tier, for bench/fanout.py's engine comparison (issue 23: "choose by measuring both").

    .venv/bin/python bench/pushpin_tier.py --check     # start it, one viewer, one frame through, print the delay

Not the product's push tier (that is nginx + nchan, deploy/run_local.py): this starts Debian's `pushpin` (condure,
zurl, pushpin-proxy, pushpin-handler) with a private config under a temp dir, and beside it one small stdlib
process that plays two parts:
  - the GRIP origin: Pushpin asks it, once per WebSocket it accepts (WebSocket-over-HTTP), what to do; it answers
    "subscribe to channel run/<id>[/lite]" for /live/runs/<id>/[lite/], the paths browsers and the viewers use on
    nchan, so the same viewers measure both engines. In a deployment this is Django with django-grip; the stdlib
    origin is a lower bound on that per-connection cost (no session, no ORM), and its CPU is reported apart;
  - an nchan-compatible publisher: the relay and the frame producers POST a frame to /pub/runs/<id>[/lite] as they
    do to nchan (OBS_LIVE_PUSH_URL); it forwards the frame to Pushpin's publish API as a ws-message on that
    channel (5 steps/s x 2 channels: a few POSTs a second).
Pushpin's handler rate-limits deliveries (`message_rate`, 2,500 a second by default); the config lifts that
(10,000 viewers at 5 steps/s are 50,000 a second), as a deployment of this size would.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import free_port, wait_port  # noqa: E402

CONFIG = """# bench/pushpin_tier.py: a private Pushpin (overwritten)
[global]
include=/usr/lib/pushpin/internal.conf
rundir={run}
ipc_prefix=bench-
port_offset=0
stats_connection_ttl=120
[runner]
services=condure,zurl,pushpin-proxy,pushpin-handler
http_port={port}
logdir={logs}
log_level=1
client_buffer_size=8192
client_maxconn=50000
condure_bin=condure
zurl_bin=zurl
[proxy]
zurl_out_specs=ipc://{run}/bench-zurl-in
zurl_out_stream_specs=ipc://{run}/bench-zurl-in-stream
zurl_in_specs=ipc://{run}/bench-zurl-out
routesfile={routes}
debug=false
auto_cross_origin=false
sig_iss=pushpin
sig_key=bench-only-not-a-secret
updates_check=off
[handler]
push_in_spec=tcp://127.0.0.1:{push_in}
push_in_sub_specs=tcp://127.0.0.1:{push_sub}
push_in_sub_connect=false
push_in_http_addr=127.0.0.1
push_in_http_port={publish}
push_in_http_max_headers_size=10000
push_in_http_max_body_size=4000000
stats_spec=ipc://{run}/bench-stats
command_spec=tcp://127.0.0.1:{command}
message_rate=1000000
message_hwm=1000000
message_wait=5000
id_cache_ttl=60
connection_subscription_max=20
subscription_linger=60
stats_subscription_ttl=60
stats_report_interval=10
stats_format=tnetstring
"""

# The origin + publisher shim, run as its own process (python -c): stdlib only.
SHIM = r'''
import http.server, json, re, sys, urllib.request
ORIGIN_PORT, SHIM_PORT, PUBLISH_PORT = (int(a) for a in sys.argv[1:4])
TEE = sys.argv[4] if len(sys.argv) > 4 else ""  # another push tier's publisher base URL: every frame goes there too
SUB = re.compile(r"^/live/runs/([A-Za-z0-9][A-Za-z0-9._-]{0,127})/(?:(lite)/)?$")
PUB = re.compile(r"^/pub/runs/([A-Za-z0-9][A-Za-z0-9._-]{0,127})(/lite)?$")
PUBLISH = f"http://127.0.0.1:{PUBLISH_PORT}/publish/"

class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        m = SUB.match(self.path)
        out = b""
        if m and body.startswith(b"OPEN"):
            c = b"c:" + json.dumps({"type": "subscribe", "channel": f"run/{m.group(1)}" + ("/lite" if m.group(2) else "")}).encode()
            out = b"OPEN\r\nTEXT %x\r\n%s\r\n" % (len(c), c)
        self.send_response(200 if m else 404)
        self.send_header("Content-Type", "application/websocket-events")
        self.send_header("Sec-WebSocket-Extensions", "grip")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass

class Shim(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        m = PUB.match(self.path)
        if not m:
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        item = {"channel": f"run/{m.group(1)}{m.group(2) or ''}", "formats": {"ws-message": {"content": body.decode()}}}
        req = urllib.request.Request(PUBLISH, json.dumps({"items": [item]}).encode(), {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=5).read()
        out = b"{}"
        if TEE:  # nchan's answer (its channel's subscribers) is what the relay reports
            tee = urllib.request.Request(TEE + self.path[len("/pub/runs/"):], body, {"Accept": "text/json"})
            out = urllib.request.urlopen(tee, timeout=5).read()
        self.send_response(202); self.send_header("Content-Type", "text/json")
        self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
    def log_message(self, *a):
        pass

import threading
o = http.server.ThreadingHTTPServer(("127.0.0.1", ORIGIN_PORT), Origin)
s = http.server.ThreadingHTTPServer(("127.0.0.1", SHIM_PORT), Shim)
threading.Thread(target=s.serve_forever, daemon=True).start()
o.serve_forever()
'''


def missing() -> str | None:
    """Why Pushpin cannot run here (None when it can)."""
    for exe in ("pushpin", "condure", "zurl"):
        if shutil.which(exe) is None:
            return f"{exe} not found (Debian: apt-get install -y pushpin)"
    if not Path("/usr/lib/pushpin/internal.conf").exists():
        return "/usr/lib/pushpin/internal.conf not found (Debian's pushpin package lays it out there)"
    return None


def start(tmp: str, env: dict, tee: str | None = None) -> tuple[int, list[subprocess.Popen], list[subprocess.Popen]]:
    """Pushpin and its origin/shim under tmp; returns (Pushpin's public port, [pushpin runner], [origin/shim]).
    env gains OBS_LIVE_PUSH_URL (the relay and the producers publish through the shim); `tee`: another tier's
    publisher base URL (nchan's) that the shim forwards every frame to as well, so one relay feeds both tiers."""
    d = Path(tmp) / "pushpin"
    (d / "run").mkdir(parents=True, exist_ok=True)
    (d / "logs").mkdir(parents=True, exist_ok=True)
    port, origin, shim, publish = free_port(), free_port(), free_port(), free_port()
    (d / "routes").write_text(f"* 127.0.0.1:{origin},over_http\n")
    conf = d / "pushpin.conf"
    conf.write_text(CONFIG.format(run=d / "run", logs=d / "logs", routes=d / "routes", port=port, publish=publish,
                                  push_in=free_port(), push_sub=free_port(), command=free_port()))
    helper = subprocess.Popen([sys.executable, "-c", SHIM, str(origin), str(shim), str(publish), *([tee] if tee else [])])
    runner = subprocess.Popen(["pushpin", "--config", str(conf)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    env["OBS_LIVE_PUSH_URL"] = f"http://127.0.0.1:{shim}/pub/runs/"
    for p in (port, publish, origin, shim):
        wait_port(p)
    return port, [runner], [helper]


def stop(procs: list[subprocess.Popen]) -> None:
    """The runner's children (condure, zurl, proxy, handler) are in its session: signal the whole group."""
    import os
    import signal

    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def check() -> int:
    import asyncio
    import tempfile
    import urllib.request

    import websockets

    why = missing()
    if why:
        print(json.dumps({"error": why}))
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        env: dict = {}
        port, runner, helper = start(tmp, env)
        try:
            async def one() -> float:
                async with websockets.connect(f"ws://127.0.0.1:{port}/live/runs/bench-check/lite/",
                                              open_timeout=10) as ws:
                    frame = json.dumps({"type": "update", "check": True})
                    while True:  # until the subscription is in place: the first publish may precede it
                        t0 = time.monotonic()
                        req = urllib.request.Request(env["OBS_LIVE_PUSH_URL"] + "bench-check/lite", frame.encode())
                        urllib.request.urlopen(req, timeout=5).read()
                        try:
                            if await asyncio.wait_for(ws.recv(), 1.0) == frame:
                                return (time.monotonic() - t0) * 1000
                        except asyncio.TimeoutError:
                            continue
            print(json.dumps({"tier": "pushpin", "port": port, "frame_ms": round(asyncio.run(one()), 2)}))
        finally:
            stop(runner)
            for p in helper:
                p.terminate()
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="start it, send one frame to one viewer, stop")
    args = ap.parse_args()
    sys.exit(check() if args.check else ap.print_help() or 0)
