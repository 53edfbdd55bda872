"""The push tier scaled out (deploy/k8s/push.yaml): two nginx + nchan replicas running the manifest's own config,
sharing their channels through a real Redis. A frame published to either replica reaches the viewers of both, and a
viewer that reconnects to the other replica resumes from the shared buffer by message id, with no hole."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from websockets.sync.client import connect

from observatory.streams.nchan import NchanPublisher
from tests.support import PrivateRedis
from tests.web.servers import free_port, wait_for, wait_port

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "deploy"))
from run_local import NCHAN_MODULE, push_tier_missing  # noqa: E402

RUN = "replicated-run"


def manifest_conf() -> str:
    docs = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "push.yaml").read_text())
    return next(d for d in docs if d and d["kind"] == "ConfigMap")["data"]["default.conf"]


class Replica:
    """nginx running the manifest's default.conf, with only its addresses changed (ports, Redis)."""

    def __init__(self, var: Path, redis_url: str):
        self.port, self.pub_port = free_port(), free_port()
        conf = manifest_conf()
        for old, new in (("listen 80;", f"listen 127.0.0.1:{self.port};"),
                         ("listen 8081;", f"listen 127.0.0.1:{self.pub_port};"),
                         ("redis://redis:6379/0", redis_url)):
            assert old in conf, f"deploy/k8s/push.yaml no longer has {old!r}: update this test's substitutions"
            conf = conf.replace(old, new)
        var.mkdir(parents=True)
        temps = "\n".join(f"    {k}_temp_path {var / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (var / "default.conf").write_text(conf)
        (var / "nginx.conf").write_text(
            f"load_module {NCHAN_MODULE};\nworker_processes 1;\ndaemon off;\npid {var / 'nginx.pid'};\n"
            f"error_log {var / 'error.log'} warn;\nevents {{ worker_connections 1024; }}\n"
            f"http {{\n    access_log off;\n{temps}\n    include {var / 'default.conf'};\n}}\n")
        self.proc = subprocess.Popen(["nginx", "-c", str(var / "nginx.conf"), "-p", str(var), "-e",
                                      str(var / "error.log")], stderr=subprocess.PIPE)
        wait_port(self.port)
        wait_port(self.pub_port)
        self.publisher = NchanPublisher(f"http://127.0.0.1:{self.pub_port}/pub/runs/")

    def viewer(self, last_id: str | None = None):
        query = f"?last_event_id={last_id}" if last_id else ""
        return connect(f"ws://127.0.0.1:{self.port}/live/runs/{RUN}/lite/{query}", subprotocols=["ws+meta.nchan"])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def frames(ws, want: int) -> list[tuple[str, dict]]:
    """(message id, frame) until `want` frames have arrived."""
    got: list[tuple[str, dict]] = []

    def one():
        try:
            text = ws.recv(timeout=0.2)
        except TimeoutError:
            return False
        head, _, data = text.partition("\n\n")
        got.append((head.split("\n")[0].removeprefix("id: "), json.loads(data)))
        return len(got) >= want
    wait_for(one, 20, f"{want} frames", every=0)
    return got


@pytest.fixture
def replicas(tmp_path):
    missing = push_tier_missing()
    if missing:
        pytest.skip(f"push tier not installed ({missing}): apt-get install -y nginx-light libnginx-mod-nchan")
    with PrivateRedis() as redis:
        reps = [Replica(tmp_path / name, redis.url) for name in ("a", "b")]
        try:
            yield reps
        finally:
            for r in reps:
                r.stop()


def publish_until_seen(replica: Replica, ws, frame: dict) -> None:
    """The first publish can precede the subscription's registration in Redis: repeat it until the viewer has it
    (a frame the viewer already got is never published again)."""
    def seen():
        replica.publisher.publish(RUN, json.dumps(frame), "lite")
        try:
            text = ws.recv(timeout=0.5)
        except TimeoutError:
            return False
        return json.loads(text.partition("\n\n")[2]) == frame
    wait_for(seen, 20, "the first frame through the other replica", every=0)


def test_a_frame_published_to_one_replica_reaches_the_viewers_of_the_other(replicas):
    a, b = replicas
    with b.viewer() as on_b, a.viewer() as on_a:
        publish_until_seen(a, on_b, {"type": "update", "n": 0})
        a.publisher.publish(RUN, json.dumps({"type": "update", "n": 1}), "lite")
        b.publisher.publish(RUN, json.dumps({"type": "update", "n": 2}), "lite")
        assert [f["n"] for _, f in frames(on_b, 2)] == [1, 2]
        got_a = [f["n"] for _, f in frames(on_a, 3)]
        assert got_a[-2:] == [1, 2] and set(got_a) <= {0, 1, 2}


def test_a_viewer_reconnecting_to_the_other_replica_resumes_with_no_hole_and_no_duplicate(replicas):
    a, b = replicas
    with a.viewer() as on_a:
        publish_until_seen(a, on_a, {"type": "update", "n": 0})
        a.publisher.publish(RUN, json.dumps({"type": "update", "n": 1}), "lite")
        (last_id, first), = frames(on_a, 1)
        assert first["n"] == 1
    for n in (2, 3):  # while the viewer is away, published through the other replica
        b.publisher.publish(RUN, json.dumps({"type": "update", "n": n}), "lite")
    with b.viewer(last_id) as on_b:
        got = frames(on_b, 2)
        assert [f["n"] for _, f in got] == [2, 3]
        assert all(re.fullmatch(r"\d+:\d+(?:\[\d+\])?", i) for i, _ in got), got
