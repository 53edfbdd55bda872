"""bench/viewers.c, the compiled viewer client of bench/fanout.py: against a real nginx + nchan push tier fed by the
relay (every published step reaches every viewer once), and against a raw WebSocket server on a socket that sends
what a server may (a split handshake, frames in pieces, a fragmented message with a ping inside, a 64-bit length,
a close) and checks what the client sends back (the hub's masked resume after its hello, the pong, the close)."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import sys
import threading
from pathlib import Path

import pytest

from tests.web.live.test_relay import (  # noqa: F401 (fixtures: the push tier as make run has it)
    Nchan, ingest, nchan, open_channels, relay, relay_all)
from tests.web.servers import stop, wait_for
from webapp.live.livelog import LiveLog

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
from harness import pct  # noqa: E402
from viewer_client import CViewers, bin_ms, build, gcc, got, pairs, wpct  # noqa: E402

LOSS = "train/loss"


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    if not gcc():
        pytest.skip("no gcc: the C viewer client cannot be built")
    return build(tmp_path_factory.mktemp("viewers"))


@pytest.mark.django_db(transaction=True)
def test_every_published_step_reaches_every_viewer_once(relay, nchan, trainer, ingest, run_id, exe):  # noqa: F811
    open_channels(relay, ingest, trainer)  # the run's channels exist (nchan refuses made-up runs)
    views = CViewers([f"ws://127.0.0.1:{nchan.port}/live/runs/{run_id}/lite/",
                      f"ws://127.0.0.1:{nchan.port}/live/runs/{run_id}/"], 6, rate=0, exe=exe)
    try:
        assert views.ready() == (6, 0)
        for step in range(40):
            trainer.metrics_named(step, {LOSS: 1.0 / (step + 1), f"{LOSS}/docs_text": 2.0, "optim/learning_rate": 0.1})
            if step % 9 == 0:
                relay_all(relay, ingest)
        relay_all(relay, ingest)
        wait_for(lambda: views.count()[0] >= 6 * 40, 20, "every viewer to get every step")
        views.stop(0)
        out = views.result()
    finally:
        views.kill()
    assert (out["connected"], out["failed"], out["dropped"], out["errors"]) == (6, 0, 0, {})
    assert out["duplicates"] == 0 and out["too_old"] == 0
    assert sorted((s, n) for s, n, _first, _hist in out["steps"]) == [(s, 6) for s in range(40)]
    assert all(sum(h[1::2]) == 6 for _s, _n, _first, h in out["steps"])  # the histogram holds every viewer
    assert got(out, set(range(40))) == 240


@pytest.mark.django_db(transaction=True)
def test_a_crowd_arriving_at_once_is_let_in_and_nginx_survives_it(tmp_path, push_web, redis_client, run_id, exe):
    """1,000 sockets in one burst (bench/fanout.py --browser --others 1000): each handshake's subscriber check opens
    a connection to nginx's loopback cache server; on make run's unix socket the full backlog failed that connect
    inside nchan's subrequest and nchan 1.3.6 crashed the worker (SIGSEGV): ~980 of the 1,000 refused, and every
    viewer it held dropped."""
    n = Nchan(tmp_path, push_web, conn_limit=1100)  # (the crowd shares 127.0.0.1)
    try:
        LiveLog(redis_client).append(run_id, [{"type": "update", "run_id": run_id, "series": {}}])  # a live run
        views = CViewers([f"ws://127.0.0.1:{n.port}/live/runs/{run_id}/lite/"], 1000, rate=0, exe=exe)
        try:
            ready = views.ready()
        finally:
            views.kill()
        crashed = [ln for ln in (tmp_path / "logs" / "nginx-error.log").read_text().splitlines() if "signal" in ln]
        assert (ready, crashed) == ((1000, 0), [])
    finally:
        stop(n.proc)


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC11B65").encode()).digest()).decode()


def frame(op: int, payload: bytes, fin: bool = True) -> bytes:
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | op])
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack(">H", n)
    else:
        head += bytes([127]) + struct.pack(">Q", n)
    return head + payload


def read_frame(sock) -> tuple[int, bytes]:
    """A client frame: it must be masked (RFC 6455 §5.3)."""
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            assert chunk, "the client closed the connection"
            buf += chunk
        return buf
    b0, b1 = exact(2)
    assert b1 & 0x80, "a client frame must be masked"
    n = b1 & 127
    if n == 126:
        n = struct.unpack(">H", exact(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", exact(8))[0]
    mask = exact(4)
    return b0 & 15, bytes(c ^ mask[i % 4] for i, c in enumerate(exact(n)))


class RawServer(threading.Thread):
    """One WebSocket connection, written byte by byte where it matters; records what the client sent."""

    def __init__(self, hub: bool):
        super().__init__(daemon=True)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.hub, self.request, self.sent, self.error = hub, b"", [], None

    def run(self):
        try:
            conn, _ = self.listener.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.serve(conn)
        except Exception as e:  # reported by the test
            self.error = e

    def serve(self, conn):
        while b"\r\n\r\n" not in self.request:
            self.request += conn.recv(4096)
        key = [ln.split(":", 1)[1].strip() for ln in self.request.decode().split("\r\n")
               if ln.lower().startswith("sec-websocket-key:")][0]
        answer = (f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Accept: {accept_key(key)}\r\n\r\n").encode()
        conn.sendall(answer[:20])  # the handshake's answer in two pieces, the second with the first frame
        if self.hub:
            hello = json.dumps({"type": "hello", "run": {"id": "r", "last_step": 41}, "limits": {}}).encode()
            conn.sendall(answer[20:] + frame(1, hello))
            self.sent.append(read_frame(conn))  # the resume
        else:
            conn.sendall(answer[20:])
        one = b'{"type":"update","series":{"train/loss":{"steps":[42,43],"values":[1,2]}}}'
        for i in range(len(one) + 2):  # a frame in one-byte writes
            conn.sendall(frame(1, one)[i:i + 1])
        # a fragmented message, the needle split across fragments, a ping between them
        two = b'[{"type":"update","series":{"train/loss":{"steps":[44],"values":[3]}}},' \
              b'{"type":"update","series":{"train/loss":{"steps":[45,43],"values":[4,2]}}}]'
        conn.sendall(frame(1, two[:30], fin=False) + frame(9, b"are you there") + frame(0, two[30:60], fin=False))
        conn.sendall(frame(0, two[60:]))
        self.sent.append(read_frame(conn))  # the pong
        big = b'{"series":{"train/loss":{"steps":[46],"values":[5]}},"pad":"' + b"x" * 70000 + b'"}'
        conn.sendall(frame(1, big))  # a 64-bit length
        conn.sendall(frame(8, struct.pack(">H", 1001) + b"going away"))
        self.sent.append(read_frame(conn))  # the close's answer


@pytest.mark.parametrize("hub", [False, True], ids=["nchan", "hub"])
def test_split_fragmented_pinged_and_closed_frames(exe, hub):
    server = RawServer(hub)
    server.start()
    resume = {"type": "resume", "metrics": [LOSS]}
    views = CViewers([f"ws://127.0.0.1:{server.port}/ws/runs/r/"], 1, hub=hub, resume=resume, exe=exe)
    try:
        assert views.ready() == (1, 0)
        server.join(20)
        assert server.error is None and not server.is_alive()
        wait_for(lambda: views.count()[2] == 1, 20, "the close to reach the client")
        views.stop(0)
        out = views.result()
    finally:
        views.kill()
    assert b"\r\nOrigin: http://127.0.0.1\r\n" in server.request and b"permessage-deflate" not in server.request
    if hub:  # hello first, then the browser's resume after the run's last step
        op, body = server.sent.pop(0)
        assert op == 1 and json.loads(body) == {**resume, "after_step": 41}
    assert server.sent == [(10, b"are you there"), (8, struct.pack(">H", 1001))]
    assert sorted(s for s, _n, _first, _hist in out["steps"]) == [42, 43, 44, 45, 46]
    assert all(n == 1 for _s, n, _first, _hist in out["steps"])
    assert out["duplicates"] == 1  # step 43 again, in the batch
    assert (out["connected"], out["failed"], out["dropped"], out["errors"]) == (1, 0, 1, {"closed_1001": 1})


def test_histogram_bins_read_back_as_delays():
    assert [bin_ms(b) for b in (0, 5, 127)] == [0.5, 5.5, 127.5]
    assert bin_ms(128) == 130.0 and bin_ms(160) == 260.0  # [128, 132) and [256, 264): 1/32 of an octave
    result = {"steps": [[1, 3, 100.0, [0, 2, 128, 1]], [2, 1, 100.5, [3, 1]], [9, 1, 0.0, [0, 1]]]}
    ws = pairs(result, {1: 99.9, 2: 100.4}, {1, 2})
    assert sorted((round(d, 6), w) for d, w in ws) == [(100.5, 2), (103.5, 1), (230.0, 1)]
    flat = [d for d, w in ws for _ in range(w)]  # what harness.pct() reads from one delay per viewer
    assert [wpct(ws, q) for q in (0, 25, 50, 99, 100)] == [pct(flat, q) for q in (0, 25, 50, 99, 100)]
    assert round(wpct(ws, 50), 6) == 103.5
