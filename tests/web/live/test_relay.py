"""The push tier: the trainer's stream -> ingest (commits, appends to the run's live log) -> the relay
(webapp.live.relay) -> a real nginx + nchan (deploy/run_local.py's generated config), and viewers on nchan's websocket
as static/js/live.js subscribes (ws+meta.nchan, last_event_id). Real Redis, the real database."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from websockets.sync.client import connect

from observatory import contract
from observatory.streams.nchan import NchanPublisher, PushError
from tests.web.servers import free_port, stop, wait_for, wait_port
from webapp.live.livelog import log_key
from webapp.live.push import LivePublisher
from webapp.live.relay import Relay, cursor_key
from webapp.metrics.models import Point

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "deploy"))
from run_local import nchan_config, push_tier_missing  # noqa: E402
from push_tier import viewer_cap  # noqa: E402,F401  (test_push_rules)

FROM_START = "0:0"  # a last_event_id older than anything: nchan's whole buffer
pytestmark = pytest.mark.django_db(transaction=True)


class Nchan:
    """nginx with nchan as `make run` configures it, in front of the web server at web_port (the push_web fixture's:
    it answers nchan's subscriber check)."""

    def __init__(self, var: Path, web_port: int, pub_port: int | None = None, conn_limit: int | None = None,
                 nofile: int | None = None):
        self.port, self.pub_port = free_port(), pub_port or free_port()
        (var / "nginx").mkdir(parents=True)
        (var / "logs").mkdir()
        conf = var / "nginx" / "nginx.conf"
        conf.write_text(nchan_config(var, "127.0.0.1", self.port, web_port, self.pub_port, free_port(),
                                     conn_limit=conn_limit, nofile=nofile))
        self.nofile = nofile  # (nginx started with this open-file limit, soft and hard)
        self.argv = ["nginx", "-c", str(conf), "-p", str(var / "nginx"), "-e", str(var / "logs" / "nginx-error.log")]
        self.start()
        self.pub_url = f"http://127.0.0.1:{self.pub_port}/pub/runs/"
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """nginx (again, after stop(): empty, as a restarted nginx is), once it listens."""
        nofile = self.nofile
        limit = None if nofile is None else (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
        self.proc = subprocess.Popen(self.argv, stderr=subprocess.PIPE, preexec_fn=limit)
        wait_port(self.port)
        wait_port(self.pub_port)

    def viewer(self, run_id: str, last_id: str | None = None, channel: str = "") -> Viewer:
        query = f"?last_event_id={last_id}" if last_id else ""
        path = f"{run_id}/{channel}/" if channel else f"{run_id}/"
        return Viewer(connect(f"ws://127.0.0.1:{self.port}/live/runs/{path}{query}",
                              subprotocols=["ws+meta.nchan"]))


class Viewer:
    """A subscriber that applies frames as the dashboard does (rewinds first, then only steps after its last)."""

    def __init__(self, ws):
        self.ws = ws
        self.last_id = None
        self.frames: list[dict] = []
        self.points: dict[str, dict[int, float | None]] = {}
        self.received: dict[str, list[int]] = {}  # every step delivered, in order, duplicates included
        self.seqs: list[int] = []  # the live log's number of every entry, in order, repeats included
        self.messages = 0  # WebSocket messages (a paced lite message carries several entries)

    def read_until(self, condition, what: str, timeout: float = 20.0) -> None:
        def one():
            if condition():
                return True
            try:
                text = self.ws.recv(timeout=0.2)
            except TimeoutError:
                return False
            head, _, data = text.partition("\n\n")
            self.last_id = head.split("\n")[0].removeprefix("id: ")
            msg = json.loads(data)
            frames = msg if isinstance(msg, list) else [msg]
            self.messages += 1
            self.seqs.extend(dict.fromkeys(f.get("seq") for f in frames))  # an entry's frames share its number
            for frame in frames:
                self.apply(frame)
            return condition()
        wait_for(one, timeout, what, every=0)

    def apply(self, frame: dict) -> None:
        self.frames.append(frame)
        if frame.get("type") != "update":
            return
        for rw in frame.get("rewinds", []):
            for pts in self.points.values():
                for step in [s for s in pts if s > rw["to_step"]]:
                    del pts[step]
        for name, s in frame.get("series", {}).items():
            pts = self.points.setdefault(name, {})
            self.received.setdefault(name, []).extend(s["steps"])
            for step, value in zip(s["steps"], s["values"]):
                if step > max(pts, default=-1):
                    pts[step] = value

    def close(self) -> None:
        self.ws.close()


@pytest.fixture
def nchan(tmp_path, push_web):
    missing = push_tier_missing()
    if missing:
        pytest.skip(f"push tier not installed ({missing}): apt-get install -y nginx-light libnginx-mod-nchan")
    n = Nchan(tmp_path, push_web)
    yield n
    stop(n.proc)


@pytest.fixture
def relay(redis_client, nchan):
    r = Relay(redis_client, NchanPublisher(nchan.pub_url))
    yield r
    r.close()


@pytest.fixture
def ingest(redis_client):
    """Ingest as `manage.py ingest` runs it: a batch's points appended to its run's live log before the SQL write,
    what storage made (events, summary, new series) after it, every batch at once."""
    from webapp.live.pipeline import LiveIngest

    return LiveIngest(redis_client, LivePublisher(redis_client).send, consumer="test-ingest", interval=0.0,
                      early_points=True)


def relay_all(relay: Relay, ingest) -> None:
    """Ingest what the trainer sent, then step the relay until it has published all of it."""
    ingest.drain()
    relay.drain()


def open_channels(relay: Relay, ingest, trainer) -> None:
    """The run announces itself and the relay publishes that: nchan subscribes viewers to channels that exist only
    (deploy/push.conf: a run the relay never published is refused). Viewers then start from FROM_START."""
    trainer.send("run", name=trainer.run_id, config={})
    relay_all(relay, ingest)


def test_a_viewer_gets_every_step_in_order(relay, nchan, trainer, ingest, run_id):
    open_channels(relay, ingest, trainer)
    viewer = nchan.viewer(run_id, FROM_START)
    for step in range(30):
        trainer.metrics(step, loss=1.0 / (step + 1), acc=step / 30)
        if step % 7 == 0:
            relay_all(relay, ingest)
    relay_all(relay, ingest)
    viewer.read_until(lambda: 29 in viewer.points.get("loss", {}), "step 29")
    assert viewer.received["loss"] == list(range(30))  # every step once, in order
    assert viewer.received["acc"] == list(range(30))
    assert viewer.points["loss"][29] == pytest.approx(1 / 30)
    assert viewer.seqs == list(range(viewer.seqs[0], viewer.seqs[0] + len(viewer.seqs)))  # numbered, no hole
    viewer.close()


def test_a_rewind_cuts_what_storage_does_not_keep(relay, nchan, trainer, ingest, run_id):
    open_channels(relay, ingest, trainer)
    viewer = nchan.viewer(run_id, FROM_START)
    for step in range(10):
        trainer.metrics(step, loss=float(step))
    relay_all(relay, ingest)  # the viewer shows steps 0-9 ...
    trainer.send("rewind", from_step=9, to_step=5)  # ... then the run goes back to its step-5 checkpoint
    for step in range(6, 12):
        trainer.metrics(step, loss=100.0 + step)
    relay_all(relay, ingest)
    viewer.read_until(lambda: 11 in viewer.points.get("loss", {}), "the steps after the rewind")
    stored = dict(Point.objects.filter(series__run_id=run_id, series__name="loss").values_list("step", "value"))
    assert viewer.points["loss"] == stored  # exactly what storage keeps: the old steps 6-9 are gone
    assert viewer.points["loss"][7] == 107.0
    viewer.close()


def test_the_lite_channel_carries_the_default_dashboards_series_and_every_rewind(relay, nchan, trainer, ingest, run_id):
    open_channels(relay, ingest, trainer)
    full, lite = nchan.viewer(run_id, FROM_START), nchan.viewer(run_id, FROM_START, channel="lite")
    for step in range(6):
        trainer.metrics_named(step, {"train/loss": 1.0, "train/loss/docs_text": 2.0, "time/step_s": 0.1})
    trainer.send("rewind", from_step=5, to_step=3)
    trainer.metrics_named(4, {"time/step_s": 0.2})  # a step with no lite series: its frame still cuts
    relay_all(relay, ingest)
    full.read_until(lambda: full.points.get("time/step_s", {}).get(4) == 0.2, "the full channel's step 4")
    lite.read_until(lambda: any(f.get("rewinds") for f in lite.frames), "the rewind on the lite channel")
    assert set(full.points) == {"train/loss", "train/loss/docs_text", "time/step_s"}
    assert set(lite.points) == {"train/loss", "train/loss/docs_text"}
    assert lite.points["train/loss"] == {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}  # cut at the rewind, as storage does
    full.close()
    lite.close()


def test_a_reconnect_resumes_with_no_hole_and_no_duplicate(relay, nchan, trainer, ingest, run_id):
    open_channels(relay, ingest, trainer)
    viewer = nchan.viewer(run_id, FROM_START)
    for step in range(5):
        trainer.metrics(step, loss=float(step))
        relay_all(relay, ingest)
    viewer.read_until(lambda: 4 in viewer.points.get("loss", {}), "step 4")
    viewer.ws.close()  # the viewer's connection drops; the run goes on
    for step in range(5, 12):
        trainer.metrics(step, loss=float(step))
        relay_all(relay, ingest)
    viewer.ws = nchan.viewer(run_id, viewer.last_id).ws  # as live.js reconnects: after the last id it has
    viewer.read_until(lambda: 11 in viewer.points["loss"], "step 11 after the reconnect")
    assert viewer.received["loss"] == list(range(12))
    viewer.close()


def test_a_full_width_frame_is_published(relay, nchan, trainer, ingest, run_id):
    """The demo's ~240 series in one step: ~20 KB, past nginx's in-memory body buffer (a temp file that nchan's
    worker could not write under a private var/ answered 400)."""
    open_channels(relay, ingest, trainer)
    viewer = nchan.viewer(run_id, FROM_START)
    names = [f"train/router/layer_{i}/routing_hist/{e}" for i in range(16) for e in range(32)]
    trainer.metrics_named(0, {n: 0.123456789 for n in names})
    relay_all(relay, ingest)
    viewer.read_until(lambda: len(viewer.points) == len(names), "the full-width step")
    viewer.close()


def test_a_restarted_relay_resumes_from_its_cursor(redis_client, nchan, trainer, ingest, run_id):
    first = Relay(redis_client, NchanPublisher(nchan.pub_url))
    open_channels(first, ingest, trainer)
    viewer = nchan.viewer(run_id, FROM_START)
    for step in range(4):
        trainer.metrics(step, loss=float(step))
    relay_all(first, ingest)
    assert redis_client.get(cursor_key(run_id)).decode().split(" ")[0] == first.cursors[run_id].split("-")[0]
    first.close()
    for step in range(4, 9):  # written while no relay runs
        trainer.metrics(step, loss=float(step))
    second = Relay(redis_client, NchanPublisher(nchan.pub_url))
    relay_all(second, ingest)
    viewer.read_until(lambda: 8 in viewer.points.get("loss", {}), "step 8")
    assert viewer.received["loss"] == list(range(9))
    second.close()
    viewer.close()


def test_nothing_but_the_live_log_leaves_for_the_public(relay, nchan, trainer, ingest, redis_client, run_id):
    """Operator material (commands and their acks on the control streams, a failure's full detail, host paths)
    never reaches the public channel: the relay reads the live log only, which ingest fills with what the public
    may see; refused entries are dead-lettered, never appended."""
    secret = "/home/operator/secret.py"
    redis_client.xadd(contract.control_stream(run_id), {"command": json.dumps({"op": "pause", "note": secret})})
    redis_client.xadd(contract.ack_stream(run_id), {"ack": secret})
    trainer.send("state", state="failed", step=1, detail=f"Traceback: {secret}")
    trainer.send("event", name="note", step=1, payload={"file": secret})
    trainer.raw({"v": "1", "run": run_id, "kind": "metrics", "data": json.dumps({"bad": secret})})  # refused
    trainer.metrics(2, loss=0.5)
    relay_all(relay, ingest)
    viewer = nchan.viewer(run_id, FROM_START)
    viewer.read_until(lambda: 2 in viewer.points.get("loss", {}), "step 2")
    assert secret not in json.dumps(viewer.frames)
    viewer.close()


def test_the_publisher_is_not_reachable_from_the_public_port(nchan, run_id):
    bad = NchanPublisher(f"http://127.0.0.1:{nchan.port}/pub/runs/")
    with pytest.raises(PushError):
        bad.publish(run_id, '{"type":"update","run_id":"forged"}')


def test_every_producer_appends_to_the_log_and_only_the_relay_publishes(relay, nchan, redis_client, run_id):
    """A feature frame (an anomaly), a one-off update (a Celery task) and ingest's messages all go to the run's live
    log, numbered in the order they came; the relay publishes them on both channels with those numbers."""
    pub = LivePublisher(redis_client)
    pub.send(run_id, {"series": {"loss": {"steps": [1], "values": [1.0], "nonfinite": []}}, "rewinds": [],
                      "events": [{"id": 7, "kind": "event"}], "run": {"id": run_id}, "t": 1.0})
    pub.send(run_id, {"type": "anomaly", "run_id": run_id, "id": 3})
    relay.drain()
    viewer, lite = nchan.viewer(run_id, FROM_START), nchan.viewer(run_id, FROM_START, channel="lite")
    viewer.read_until(lambda: len(viewer.frames) >= 2, "two frames")
    lite.read_until(lambda: len(lite.frames) >= 2, "two frames on the lite channel")
    first = viewer.frames[0]["seq"]
    assert viewer.frames == [{"type": "update", "run_id": run_id, "series": {"loss": {
        "steps": [1], "values": [1.0], "nonfinite": []}}, "rewinds": [], "events": [{"id": 7, "kind": "event"}],
        "run": {"id": run_id}, "seq": first}, {"type": "anomaly", "run_id": run_id, "id": 3, "seq": first + 1}]
    assert [f["seq"] for f in lite.frames] == [first, first + 1]
    assert lite.frames[0]["series"] == {}  # "loss" is not a lite series
    viewer.close()
    lite.close()


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/pub/", "http://127.0.0.1:8101/pub", "127.0.0.1:8101/pub/"])
def test_a_bad_publisher_url_is_refused_with_a_clear_error(url):
    with pytest.raises(ValueError, match="expected http://host:port/path/"):
        NchanPublisher(url)


def test_metrics_report_each_relay(relay, nchan, trainer, ingest, run_id, client, settings, redis_client):
    settings.OBS_LIVE_PUSH_URL = nchan.pub_url
    settings.OBS_METRICS_TOKEN = "push-tier-scrape"
    trainer.metrics(0, loss=1.0)
    relay_all(relay, ingest)
    viewers = [nchan.viewer(run_id) for _ in range(2)]
    trainer.metrics(1, loss=1.0)
    relay_all(relay, ingest)
    relay.next_report = 0.0
    relay.report()
    body = client.get("/metrics", HTTP_AUTHORIZATION="Bearer push-tier-scrape").content.decode()
    name = relay.token[:12]
    assert f'observatory_push_subscribers{{relay="{name}"}} 2' in body  # the two on the full channel
    entries = redis_client.xlen(log_key(run_id))  # the step's points, then what storage made of it
    assert f'observatory_push_frames_total{{relay="{name}"}} {entries}' in body
    assert f'observatory_push_relay_lag_entries{{relay="{name}"}} 0' in body
    assert f'observatory_push_relay_leases_lost_total{{relay="{name}"}} 0' in body
    assert f'observatory_push_delay_seconds{{quantile="0.5",relay="{name}"}}' in body
    for v in viewers:
        v.close()
