"""The client's HTTP transport against a stand-in intake server: batching within the limits, retries, refusals."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import observatory.client as obs
from observatory import contract
from observatory.client.http import HttpPublisher


class FakeIntake:
    """Answers POSTs with the next scripted status (then 202), recording every request it accepted."""

    def __init__(self):
        self.statuses: list[int] = []
        self.accepted: list[list[dict]] = []
        self.seen: list[tuple[str, dict, int]] = []  # (path, headers, body size) of every request
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with fake.lock:
                    fake.seen.append((self.path, dict(self.headers), len(body)))
                    status = fake.statuses.pop(0) if fake.statuses else 202
                    if status == 202:
                        fake.accepted.append(json.loads(body)["messages"])
                out = json.dumps({"error": "scripted refusal"} if status != 202 else {"accepted": 1}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def messages(self, kind=None):
        with self.lock:
            return [m for batch in self.accepted for m in batch if kind is None or m["kind"] == kind]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def intake():
    fake = FakeIntake()
    yield fake
    fake.close()


def test_it_posts_the_run_in_order_in_batches_within_the_intake_limits(intake):
    run = obs.init(name="exp", run_id="http-1", url=intake.url + "/", token="obs_secret", finish_at_exit=False)
    assert run.mode == "http" and run.dashboard_url == f"{intake.url}/runs/http-1/"
    for step in range(2500):
        run.log({contract.M_LOSS: step / 7, contract.M_LR: float("nan") if step == 3 else 1e-3})
    assert run.finish()
    kinds = [m["kind"] for m in intake.messages()]
    assert kinds[:2] == ["run", "state"] and kinds[-2:] == ["state", "heartbeat"]
    metrics = intake.messages("metrics")
    assert [m["data"]["step"] for m in metrics] == list(range(2500))
    assert metrics[10]["data"]["values"][contract.M_LOSS] == 10 / 7
    assert metrics[3]["data"]["values"][contract.M_LR] != metrics[3]["data"]["values"][contract.M_LR]  # NaN
    for path, headers, size in intake.seen:
        assert path == contract.intake_path("http-1") and headers["Authorization"] == "Bearer obs_secret"
        assert size <= contract.INTAKE_MAX_BYTES
    assert all(len(b) <= contract.INTAKE_MAX_MESSAGES for b in intake.accepted)
    assert len(intake.seen) < 100  # batched, not a request per message
    st = run.stats()
    assert st["published"] == len(intake.messages()) and st["rejected"] == 0 and st["queue_depth"] == 0


def test_a_batch_too_big_for_one_request_is_split_and_a_failed_part_resent_alone(intake):
    intake.statuses = [202, 503]  # the second request of the batch fails once
    pub = HttpPublisher(intake.url, "obs_secret", "http-2", max_bytes=4000, max_backoff_s=0.05, linger_s=0)
    for step in range(200):
        pub.metrics(step, {contract.M_LOSS: float(step)})
    assert pub.flush(10)
    assert [m["data"]["step"] for m in intake.messages("metrics")] == list(range(200))  # none twice, none lost
    assert all(size <= 4000 for _, _, size in intake.seen)
    st = pub.stats()
    assert st["errors"] == 1 and st["reconnects"] == 1 and st["published"] == 200
    pub.close()


def test_it_retries_overload_and_server_errors_with_backoff(intake):
    intake.statuses = [429, 503, 500]
    pub = HttpPublisher(intake.url, "obs_secret", "http-3", max_backoff_s=0.05)
    pub.publish("state", {"state": "training", "step": 0})
    assert pub.flush(10)
    assert len(intake.messages()) == 1 and len(intake.seen) == 4
    st = pub.stats()
    assert st["errors"] == 3 and "HTTP Error 500" in st["last_error"] and st["connected"]
    pub.close()


def test_a_refused_token_drops_the_messages_and_says_why(intake):
    intake.statuses = [401]
    pub = HttpPublisher(intake.url, "obs_wrong", "http-4", linger_s=0.2)
    for step in range(5):
        pub.metrics(step, {contract.M_LOSS: 1.0})
    assert pub.flush(5)  # refused for good: nothing left to deliver
    st = pub.stats()
    assert st["rejected"] == 5 and st["published"] == 0 and st["last_error"] == "HTTP 401: scripted refusal"
    pub.close()


def test_logging_never_blocks_when_the_site_is_down():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = obs.init(name="down", url=f"http://127.0.0.1:{port}", token="obs_x", max_queue=1000, finish_at_exit=False)
    # (no clock: a call that waited would show as the drops not counted below; timings are benchmarks')
    for step in range(5000):
        run.log({contract.M_LOSS: 1.0})
    assert run.finish(timeout=0.2) is False
    st = run.stats()
    assert st["dropped_by_kind"]["metrics"] >= 4000 and st["errors"] >= 1 and st["published"] == 0
