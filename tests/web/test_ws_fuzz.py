"""Fuzz pass over every WebSocket message type: the public live socket (/ws/runs/<id>/: ping, resume, anything
else) and the operator socket (/ws/operate/: ping, refresh, anything else) get hypothesis-generated frames, typed
and untyped, with JSON of any shape and strings holding lone surrogates (as \\uD800 escapes). After each frame the
socket must still answer a ping: the consumer never raised (the socket's 1011 / the HTTP 500 equivalent), and every
answer is a well-formed frame. OBS_FUZZ_WS_EXAMPLES frames per socket (default 120)."""

from __future__ import annotations

import json
import os
import time

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webapp.asgi import application
from webapp.control.consumers import OperateConsumer
from webapp.runs.models import Run

from .accounts.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)
EXAMPLES = int(os.environ.get("OBS_FUZZ_WS_EXAMPLES", "120"))
ORIGIN = [(b"origin", b"http://127.0.0.1:8000")]
PER_SOCKET = 20  # frames per connection, each followed by a ping: well inside the rate limit's burst

TEXT = st.one_of(st.text(max_size=20), st.builds(lambda a, b: a + "\ud800" + b, st.text(max_size=5),
                                                 st.text(max_size=5)),
                 st.sampled_from(["train/loss", "loss", "a" * 300, "\udfff", "", "../x"]))
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False), TEXT)
JSON = st.recursive(SCALAR, lambda c: st.lists(c, max_size=4) | st.dictionaries(TEXT, c, max_size=4), max_leaves=12)
TYPES = ["ping", "resume", "refresh", "hello", "update", "backfill", "error", "pong", "snapshot"]
FIELDS = {"metrics": st.one_of(st.lists(TEXT, max_size=5), JSON), "after_step": st.one_of(st.integers(-5, 2**63), JSON),
          "after": st.one_of(st.dictionaries(TEXT, st.integers(-3, 10**6), max_size=4), JSON),
          "after_event": st.one_of(st.integers(-3, 2**63), JSON), "run_id": TEXT, "x": JSON}
TYPED = st.builds(lambda t, extra: json.dumps({"type": t, **extra}),
                  st.one_of(st.sampled_from(TYPES), TEXT, JSON),
                  st.fixed_dictionaries({}, optional=FIELDS))
NAMES = st.one_of(st.sampled_from(["train/loss", "loss", "gpu/0/util"]), TEXT)
RESUME = st.builds(lambda extra: json.dumps({"type": "resume", **extra}), st.fixed_dictionaries(
    {"metrics": st.lists(NAMES, max_size=4)},
    optional={"after_step": st.integers(-2, 20), "after": st.dictionaries(NAMES, st.integers(-2, 20), max_size=3),
              "after_event": st.integers(-1, 5)}))
FRAMES = st.one_of(TYPED, RESUME, st.builds(json.dumps, JSON), st.text(min_size=1, max_size=40),  # UTF-8 text
                   st.sampled_from(["[" * 5000, "{", "null", '{"type": 1}', '"ping"', "x" * 70_000]))


def _frames() -> list[str]:
    """EXAMPLES generated frames (derandomized: the same in every run)."""
    out: list[str] = []

    @settings(max_examples=EXAMPLES, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(FRAMES)
    def collect(frame):
        out.append(frame)

    collect()
    return out


async def _fuzz(connect, ping_answer) -> tuple[int, list[str]]:
    """Every generated frame, then a ping, over sockets from `connect()`; (frames sent, answer types seen)."""
    frames, seen, comm = _frames(), [], None
    for i, frame in enumerate(frames):
        if i % PER_SOCKET == 0:
            if comm is not None:
                await comm.disconnect()
            comm = await connect()
        await comm.send_to(text_data=frame)
        await comm.send_to(text_data='{"type": "ping"}')
        while True:  # answers to the frame (if any), then the pong; a consumer that raised ends here with its error
            out = await comm.receive_output(timeout=10)
            assert out["type"] == "websocket.send", (frame[:200], out)
            msg = json.loads(out["text"])
            for m in msg if isinstance(msg, list) else [msg]:
                assert isinstance(m, dict) and isinstance(m.get("type"), str), (frame[:200], m)
                seen.append(m["type"])
            if ping_answer(msg):
                break
    await comm.disconnect()
    return len(frames), seen


async def test_the_live_socket_survives_every_generated_frame(redis_client):
    await database_sync_to_async(Run.objects.create)(id="ws-fuzz-run", name="fuzz", last_step=10)

    async def connect():
        comm = WebsocketCommunicator(application, "/ws/runs/ws-fuzz-run/", headers=ORIGIN)
        assert (await comm.connect(timeout=10))[0]
        assert (await comm.receive_json_from(timeout=10))["type"] == "hello"
        return comm

    t0 = time.perf_counter()
    n, seen = await _fuzz(connect, lambda m: isinstance(m, dict) and m.get("type") == "pong")
    print(f"live socket fuzz: {n} frames in {time.perf_counter() - t0:.1f} s: {sorted(set(seen))}")
    assert n == EXAMPLES and {"error", "backfill", "pong"} <= set(seen)


async def test_the_operator_socket_survives_every_generated_frame(redis_client):
    op = await database_sync_to_async(make_user)("ws-fuzz-op", "operator")

    async def connect():
        comm = WebsocketCommunicator(OperateConsumer.as_asgi(), "/ws/operate/")
        comm.scope["user"] = op
        assert (await comm.connect(timeout=10))[0]
        return comm

    n, seen = await _fuzz(connect, lambda m: m == {"type": "pong"})
    assert n == EXAMPLES and "pong" in seen
