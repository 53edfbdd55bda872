"""deploy/k8s/push.yaml's nginx configuration run for real: two push replicas (nginx + nchan, its ConfigMap's
default.conf as is, but for the Redis address and the ports) on one private Redis share their channels, so a frame
POSTed to either replica (the push-publish Service picks one) reaches the viewers of both, and a viewer reconnecting
to the other replica resumes from the shared buffer with no hole and no duplicate."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.web.servers import ROOT, free_port, stop, wait_for, wait_port

sys.path.insert(0, str(ROOT / "deploy"))
from run_local import NCHAN_MODULE, push_tier_missing  # noqa: E402

K8S_REDIS = "redis://redis:6379/1"


def push_conf() -> str:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "push.yaml").read_text()))
    return next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "push-nginx")["data"][
        "default.conf"]


class Replica:
    def __init__(self, d: Path, redis_port: int):
        self.port, self.pub_port = free_port(), free_port()
        d.mkdir()
        conf = push_conf()
        assert K8S_REDIS in conf and "listen 8081;" in conf and "listen 80;" in conf
        conf = (conf.replace(K8S_REDIS, f"redis://127.0.0.1:{redis_port}/1")
                .replace("listen 8081;", f"listen 127.0.0.1:{self.pub_port};")
                .replace("listen 80;", f"listen 127.0.0.1:{self.port};"))
        temps = " ".join(f"{k}_temp_path {d / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        # what the proxy image's nginx.conf wraps conf.d/default.conf in (Debian's, less its user and log paths)
        (d / "nginx.conf").write_text(f"load_module {NCHAN_MODULE};\nworker_processes 1;\ndaemon off;\n"
                                      f"pid {d / 'nginx.pid'};\nerror_log {d / 'error.log'} warn;\n"
                                      f"events {{ worker_connections 256; }}\n"
                                      f"http {{ access_log off; {temps}\n{conf}\n}}\n")
        self.proc = subprocess.Popen(["nginx", "-c", str(d / "nginx.conf"), "-p", str(d), "-e", str(d / "error.log")],
                                     stderr=subprocess.PIPE)
        wait_port(self.port)
        wait_port(self.pub_port)
        wait_for(self.answers, 30, "the replica to reach Redis")  # nchan answers 503 until it has

    def answers(self) -> bool:
        try:
            self.publish("probe", {})
            self.viewer("probe", "0:0").close()
            return True
        except (urllib.error.HTTPError, InvalidStatus):
            return False

    def publish(self, run_id: str, body: dict) -> int:
        req = urllib.request.Request(f"http://127.0.0.1:{self.pub_port}/pub/runs/{run_id}",
                                     data=json.dumps(body).encode(), method="POST")
        return urllib.request.urlopen(req, timeout=10).status

    def viewer(self, run_id: str, last_id: str):
        return connect(f"ws://127.0.0.1:{self.port}/live/runs/{run_id}/?last_event_id={last_id}",
                       subprotocols=["ws+meta.nchan"])


def read(ws) -> tuple[str, dict]:
    head, _, data = ws.recv(timeout=20).partition("\n\n")
    return head.split("\n")[0].removeprefix("id: "), json.loads(data)


@pytest.fixture
def replicas(tmp_path, private_redis):
    missing = push_tier_missing()
    if missing:
        pytest.skip(f"push tier not installed ({missing}): apt-get install -y nginx-light libnginx-mod-nchan")
    private_redis.start()
    out = []
    try:
        for name in ("a", "b"):
            out.append(Replica(tmp_path / name, private_redis.port))
        yield out
    finally:
        for r in out:
            stop(r.proc)


def test_replicas_share_their_channels_through_redis(replicas, run_id):
    a, b = replicas
    on_b = b.viewer(run_id, "0:0")
    assert a.publish(run_id, {"type": "update", "step": 0}) in (201, 202)
    assert b.publish(run_id, {"type": "update", "step": 1}) in (201, 202)
    assert a.publish(run_id, {"type": "update", "step": 2}) in (201, 202)
    got = [read(on_b) for _ in range(3)]
    assert [m["step"] for _, m in got] == [0, 1, 2]  # published on either replica, in order, on b
    on_b.close()
    # a reconnect lands on the other replica: it resumes after its last id from the shared buffer
    assert b.publish(run_id, {"type": "update", "step": 3}) in (201, 202)
    on_a = a.viewer(run_id, got[1][0])
    assert [read(on_a)[1]["step"] for _ in range(2)] == [2, 3]
    on_a.close()


def test_the_publisher_is_its_own_port_and_the_public_one_serves_live_frames_only(replicas, run_id):
    a, _ = replicas
    for path in (f"/pub/runs/{run_id}", "/ws/runs/x/", "/api/runs/"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{a.port}{path}", data=b"{}"), timeout=5)
        assert e.value.code in (403, 404, 405), path
    assert urllib.request.urlopen(f"http://127.0.0.1:{a.port}/healthz", timeout=5).status == 200
