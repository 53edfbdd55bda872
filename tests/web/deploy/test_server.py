"""The web server as `make run` and the image start it (uvicorn, deploy/run_local.py's flags), and deploy/nginx.conf
in front of two replicas: absurd requests get answers, live sockets pass the proxy, static files come cached."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.request

import pytest
import websockets

from ..servers import ROOT, free_port, stop, wait_port

sys.path.insert(0, str(ROOT / "deploy"))
from run_local import NCHAN_MODULE, web_command  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        return s.recv(4096)


@pytest.fixture
def web(live_env, tmp_path):
    """start() -> the port of a new web replica, in production mode (no DEBUG)."""
    procs = []
    env = {**live_env, "OBS_DEBUG": "0", "DJANGO_SECRET_KEY": "deploy-test-" + "k" * 40, "OBS_SSL_REDIRECT": "0"}

    def start() -> int:
        port = free_port()
        log = open(tmp_path / f"web-{port}.log", "wb")
        procs.append(subprocess.Popen(web_command("127.0.0.1", port), cwd=ROOT, env=env, stdout=log, stderr=log))
        wait_port(port)
        return port
    yield start
    for p in procs:
        stop(p)


def test_a_20000_character_url_gets_an_answer_not_silence(web):
    port = web()
    head = _raw(port, b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert re.match(rb"HTTP/1\.1 (404|414) ", head), head[:100]


def test_a_websocket_path_outside_the_routes_is_a_404_handshake_not_a_500(web):
    port = web()
    head = _raw(port, b"GET /ws/nothing/ HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://127.0.0.1\r\n"
                      b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404 "), head[:100]


def _nginx_conf(tmp_path, ports: list[int], push_ports: list[int] | None = None) -> tuple[str, int]:
    """deploy/nginx.conf with its compose addresses (web and push replicas) replaced by this test's (the rest exactly
    as shipped); without push_ports, one that nothing listens on."""
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    for name, at in (("web:8000", ports), ("push:80", push_ports or [free_port()])):
        servers = "\n".join(f"    server 127.0.0.1:{p};" for p in at)
        conf, n = re.subn(rf"    server {name}\b[^\n]*\n", servers + "\n", conf)
        assert n == 1, name
    conf = conf.replace("/var/cache/nginx/static", str(tmp_path / "cache"))
    port = free_port()
    conf = conf.replace("listen 80;", f"listen 127.0.0.1:{port};")
    main = tmp_path / "nginx.conf"
    user = "user root root;\n" if os.geteuid() == 0 else ""  # workers must reach pytest's private tmp dir
    main.write_text(f"load_module {NCHAN_MODULE};\n"  # as Debian's modules-enabled/ loads it in the proxy image
                    f"{user}daemon off; pid {tmp_path}/nginx.pid; error_log {tmp_path}/error.log;\n"
                    f"events {{}}\nhttp {{ access_log off; client_body_temp_path {tmp_path}/body;\n"
                    f"proxy_temp_path {tmp_path}/proxy;\n{conf}\n}}\n")
    return str(main), port


def test_the_shipped_nginx_config_passes_nginx_t(tmp_path):
    assert shutil.which("nginx"), "Debian nginx-light is needed here (.ci/run installs it)"
    main, _ = _nginx_conf(tmp_path, [8000, 8001])
    out = subprocess.run(["nginx", "-t", "-c", main], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_through_the_proxy_two_replicas_serve_pages_sockets_and_cached_static_files(web, tmp_path, trainer,
                                                                                    ingestor, run_id):
    trainer.metrics(0, loss=1.0)
    ingestor.drain()
    main, port = _nginx_conf(tmp_path, [web(), web()])
    proxy = subprocess.Popen(["nginx", "-c", main], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as r:
            assert json.loads(r.read())["status"] == "ok"
        for want in ("MISS", "HIT"):
            with urllib.request.urlopen(f"{base}/static/js/dashboard.js", timeout=10) as r:
                assert r.headers["X-Cache"] == want and "max-age" in r.headers["Cache-Control"]

        async def hello():
            async with websockets.connect(f"ws://127.0.0.1:{port}/ws/runs/{run_id}/", origin=base) as ws:
                return [json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] for _ in range(1)]
        assert asyncio.run(hello()) == ["hello"]
    finally:
        stop(proxy)
