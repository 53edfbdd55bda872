"""The push tier's publisher: POSTs a run's live frames to nchan's internal publisher location (deploy/push.conf,
deploy/run_local.py), which fans them out to every subscribed browser and keeps a buffer that a reconnecting one
resumes from by message id. Standard library only; one kept-alive connection per thread."""

from __future__ import annotations

import http.client
import json
import threading
from urllib.parse import quote, urlparse

TIMEOUT_S = 5.0
CHANNELS = ("", "lite")  # a run's channels: every series, the default dashboard's


class PushError(OSError):
    """nchan refused or could not be reached: the caller keeps what it meant to publish and retries."""


class NchanPublisher:
    """publish(run_id, text, channel): one message on one of the run's channels: "" (every series) or "lite" (the
    default dashboard's series: webapp.live.relay.LITE). `url` is the publisher location's base, e.g.
    http://127.0.0.1:8101/pub/runs/ (the run id and channel are appended); ValueError for anything else."""

    def __init__(self, url: str, timeout: float = TIMEOUT_S):
        u = urlparse(url)
        if u.scheme != "http" or not u.hostname or not u.path.endswith("/"):
            raise ValueError(f"push tier publisher URL {url!r}: expected http://host:port/path/ (ending in '/')")
        self.host, self.port, self.path = u.hostname, u.port or 80, u.path
        self.timeout = timeout
        self.local = threading.local()

    def publish(self, run_id: str, text: str, channel: str = "") -> dict:
        """nchan's answer, the channel's info ({"messages", "subscribers", "last_message_id"}), or PushError."""
        status, answer = self._request("POST", run_id, channel, text.encode())
        if status not in (200, 201, 202):
            raise PushError(f"nchan publisher answered {status} to a {len(text)}-byte message for {run_id!r}: "
                            f"{answer[:120]!r}")
        return _channel_info(answer)

    def info(self, run_id: str, channel: str = "") -> dict | None:
        """The channel's info (its last message id among it), None when nchan has no such channel; or PushError."""
        status, answer = self._request("GET", run_id, channel, None)
        if status == 404:
            return None
        if status != 200:
            raise PushError(f"nchan publisher answered {status} to a channel info request for {run_id!r}")
        return _channel_info(answer)

    def _request(self, method: str, run_id: str, channel: str, body: bytes | None) -> tuple[int, bytes]:
        for attempt in (0, 1):  # a kept-alive connection nginx closed meanwhile (no answer at all): one fresh try
            conn = self._conn()
            try:
                conn.request(method, self.path + quote(run_id, safe="") + (f"/{channel}" if channel else ""), body,
                             {"Content-Type": "application/json", "Accept": "text/json"})
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self.local.conn = None
                # Only a connection closed before any answer is tried again: after a timeout or a garbled answer
                # nginx may have taken the message, and a second POST would publish it twice.
                closed = isinstance(e, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError))
                if attempt or not closed:
                    raise PushError(f"nchan publisher at {self.host}:{self.port}: {e}") from None
        raise AssertionError("unreachable")

    def publish_all(self, run_id: str, text: str) -> None:
        """A frame every viewer of the run gets, whichever channel it watches (events, summaries, feature frames)."""
        for channel in CHANNELS:
            self.publish(run_id, text, channel)

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return conn

    def close(self) -> None:
        conn = getattr(self.local, "conn", None)
        if conn is not None:
            conn.close()
            self.local.conn = None


def _channel_info(answer: bytes) -> dict:
    """nchan's channel info (Accept: text/json) -> a dict ({} when it is not JSON)."""
    try:
        info = json.loads(answer)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


_shared: dict[str, NchanPublisher] = {}


def shared(url: str) -> NchanPublisher:
    """The process's publisher for `url` (its connections are per thread)."""
    pub = _shared.get(url)
    if pub is None:
        pub = _shared[url] = NchanPublisher(url)
    return pub
