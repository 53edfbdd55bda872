"""deploy/push.conf run for real, as deploy/compose.yaml's `push` service and deploy/k8s/push.yaml's Deployment run it:
two push replicas (nginx + nchan, the file as is but for the Redis address and the ports) on one private Redis share
their channels, so a frame POSTed to either replica (compose's DNS or the push-publish Service picks one) reaches the
viewers of both with the same id, and a viewer reconnecting to either replica resumes from the shared buffer with no
hole and no duplicate; deploy/nginx.conf, compose's proxy, carries viewers to the replicas and never to a publisher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.web.servers import ROOT, free_port, stop, wait_for, wait_port

from .test_server import _nginx_conf

sys.path.insert(0, str(ROOT / "deploy"))
from run_local import NCHAN_MODULE, push_tier_missing  # noqa: E402

PUSH_REDIS = "redis://redis:6379/1"  # compose's `redis` service and the cluster's `redis` StatefulSet, database 1
WEB = "server web:8000;"  # compose's `web` service and the cluster's `web` Service (its port 8000)
AUTH, AUTH_CACHE = "127.0.0.1:8082", "/var/lib/nginx/live-auth"  # the subscriber check's loopback server, its cache
pytestmark = pytest.mark.django_db(transaction=True)  # push_web's web server reads the test database


def push_conf() -> str:
    return (ROOT / "deploy" / "push.conf").read_text()


class Replica:
    def __init__(self, d: Path, redis_port: int, web_port: int):
        self.port, self.pub_port, auth_port = free_port(), free_port(), free_port()
        d.mkdir()
        conf = push_conf()
        assert PUSH_REDIS in conf and "listen 8081;" in conf and "listen 80;" in conf
        assert all(s in conf for s in (WEB, AUTH, AUTH_CACHE))
        conf = (conf.replace(PUSH_REDIS, f"redis://127.0.0.1:{redis_port}/1")
                .replace("listen 8081;", f"listen 127.0.0.1:{self.pub_port};")
                .replace("listen 80;", f"listen 127.0.0.1:{self.port};")
                .replace(WEB, f"server 127.0.0.1:{web_port};")  # the web server, for the subscriber check
                .replace(AUTH, f"127.0.0.1:{auth_port}")
                .replace(AUTH_CACHE, str(d / "live-auth")))
        temps = " ".join(f"{k}_temp_path {d / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        # what the proxy image's nginx.conf wraps conf.d/default.conf in (Debian's, less its user and log paths)
        user = "user root;\n" if os.geteuid() == 0 else ""  # (workers as `nobody` could not open the test's folders)
        (d / "nginx.conf").write_text(f"load_module {NCHAN_MODULE};\n{user}worker_processes 1;\ndaemon off;\n"
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
            self.publish("probe", {}, timeout=3)
            self.viewer("probe", "0:0").close()
            return True
        except (OSError, InvalidStatus):  # a 503, or a publish held while nchan connects to Redis (a busy box)
            return False

    def publish(self, run_id: str, body: dict, timeout: float = 10) -> str:
        """POSTs a frame; returns the message id nchan gave it (what viewers see as `id:`)."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.pub_port}/pub/runs/{run_id}",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            assert r.status in (201, 202)
            return r.headers["X-Nchan-Message-Id"] or json.loads(r.read())["last_message_id"]

    def viewer(self, run_id: str, last_id: str, port: int | None = None):
        return connect(f"ws://127.0.0.1:{port or self.port}/live/runs/{run_id}/?last_event_id={last_id}",
                       subprotocols=["ws+meta.nchan"])


def read(ws) -> tuple[str, dict]:
    head, _, data = ws.recv(timeout=20).partition("\n\n")
    return head.split("\n")[0].removeprefix("id: "), json.loads(data)


@pytest.fixture
def replicas(tmp_path, private_redis, push_web, run_id):
    from webapp.runs.models import Run

    missing = push_tier_missing()
    if missing:
        pytest.skip(f"push tier not installed ({missing}): apt-get install -y nginx-light libnginx-mod-nchan")
    for run in ("probe", run_id):  # runs that exist: the replicas let their viewers subscribe (push.conf)
        Run.objects.create(id=run)
    private_redis.start()
    out = []
    try:
        for name in ("a", "b"):
            out.append(Replica(tmp_path / name, private_redis.port, push_web))
        yield out
    finally:
        for r in out:
            stop(r.proc)


def test_replicas_share_their_channels_through_redis(replicas, run_id):
    a, b = replicas
    sent = [a.publish(run_id, {"type": "update", "step": 0})]  # the channel exists once published (push.conf)
    on_b = b.viewer(run_id, "0:0")
    sent += [b.publish(run_id, {"type": "update", "step": 1}), a.publish(run_id, {"type": "update", "step": 2})]
    got = [read(on_b) for _ in range(3)]
    # published on either replica, in order, on b, each with the id its publisher was given
    assert got == [(i, {"type": "update", "step": s}) for s, i in enumerate(sent)] and len(set(sent)) == 3
    on_b.close()
    # a reconnect lands on the other replica: it resumes after its last id from the shared buffer
    sent.append(b.publish(run_id, {"type": "update", "step": 3}))
    on_a = a.viewer(run_id, got[1][0])
    assert [read(on_a) for _ in range(2)] == [(sent[2], {"type": "update", "step": 2}),
                                              (sent[3], {"type": "update", "step": 3})]
    on_a.close()


def test_a_viewer_reconnecting_to_the_same_replica_resumes_with_no_hole_and_no_duplicate(replicas, run_id):
    a, b = replicas
    sent = [a.publish(run_id, {"type": "update", "step": 0})]  # the channel exists once published (push.conf)
    on_b = b.viewer(run_id, "0:0")
    sent += [a.publish(run_id, {"type": "update", "step": s}) for s in (1, 2)]
    got = [read(on_b) for _ in range(3)]
    assert [i for i, _ in got] == sent
    on_b.close()
    sent += [a.publish(run_id, {"type": "update", "step": s}) for s in (3, 4)]  # missed while away
    on_b = b.viewer(run_id, got[-1][0])
    resumed = [read(on_b) for _ in range(2)]
    sent.append(a.publish(run_id, {"type": "update", "step": 5}))  # live again: the next frame, nothing twice
    resumed.append(read(on_b))
    assert resumed == [(sent[s], {"type": "update", "step": s}) for s in (3, 4, 5)]
    on_b.close()


def test_the_publisher_is_its_own_port_and_the_public_one_serves_live_frames_only(replicas, run_id):
    a, _ = replicas
    for path in (f"/pub/runs/{run_id}", "/ws/runs/x/", "/api/runs/"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{a.port}{path}", data=b"{}"), timeout=5)
        assert e.value.code in (403, 404, 405), path
    assert urllib.request.urlopen(f"http://127.0.0.1:{a.port}/healthz", timeout=5).status == 200


def test_composes_proxy_carries_viewers_to_every_replica_and_publishes_nowhere(replicas, run_id, tmp_path):
    """deploy/nginx.conf with `push` resolving to both replicas (compose's DNS names every replica): viewers through
    the public port get frames POSTed to either replica; the proxy has no way to a publisher."""
    a, b = replicas
    assert ":8081" not in (ROOT / "deploy" / "nginx.conf").read_text()
    (tmp_path / "proxy").mkdir()
    main, port = _nginx_conf(tmp_path / "proxy", [free_port()], push_ports=[a.port, b.port])
    proxy = subprocess.Popen(["nginx", "-c", main], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        sent = [a.publish(run_id, {"step": 0})]  # the channel exists once published (push.conf)
        viewers = [a.viewer(run_id, "0:0", port=port) for _ in range(4)]  # spread over both replicas
        sent.append(b.publish(run_id, {"step": 1}))
        for v in viewers:
            assert [read(v) for _ in range(2)] == [(sent[0], {"step": 0}), (sent[1], {"step": 1})]
            v.close()
        for path in (f"/pub/runs/{run_id}", f"/live/runs/{run_id}"):  # no publisher behind the public port
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"{}"),
                                       timeout=10)
            assert e.value.code >= 400, path
        resumed = a.viewer(run_id, sent[1], port=port)
        sent.append(b.publish(run_id, {"step": 2}))
        assert read(resumed) == (sent[2], {"step": 2})  # nothing was published through the proxy in between
        resumed.close()
    finally:
        stop(proxy)
