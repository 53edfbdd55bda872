"""What a moderator hides (or its author deletes) is unreachable through every live channel from that moment, with or
without a resume id: nchan's full and lite channels replayed from the start of their buffer (`?last_event_id=0:0`, a
`Last-Event-ID: 0:0` header, with or without ws+meta.nchan), and the hub's socket resuming from the start of the run's
live log. User text never travels on a live channel at all: frames carry references (ids, versions, counts) and the
page reads the public view over HTTP, where moderation applies (tests/web/annotations/test_live.py, the browser test).

Real Redis, real nginx + nchan (make run's config), the real ASGI app, the real relay."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from websockets.sync.client import connect

from observatory.streams.nchan import NchanPublisher
from tests.support import wait_for
from webapp.asgi import application
from webapp.live.livelog import log_key, seq_of
from webapp.live.relay import Relay

from ..accounts.conftest import _fresh_rate_limits, personas  # noqa: F401  (fixtures)
from ..annotations.conftest import RUN, _fast_passwords, create, post, run  # noqa: F401  (fixtures)
from .test_relay import FROM_START, nchan  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)
SECRETS = ("SECRET-TITLE", "SECRET-BODY", "SECRET-REPLY", "DELETED-TITLE", "DELETED-BODY")
ORIGIN = [(b"origin", b"http://127.0.0.1:8000")]


def _about(frame: dict, pk: int) -> bool:
    """Whether an annotation frame concerns annotation `pk` (a reference frame, or a landed full-record one)."""
    return frame.get("type") == "annotation" and pk in (frame.get("id"), (frame.get("annotation") or {}).get("id"))


def _frames(text: str) -> list[dict]:
    data = text.partition("\n\n")[2] if text.startswith("id: ") else text
    msg = json.loads(data)
    return msg if isinstance(msg, list) else [msg]


def _read_nchan(url: str, sentinel: int, *, meta: bool, header: bool = False) -> list[str]:
    """Every message a fresh anonymous subscriber gets, up to the frame about `sentinel` (written last)."""
    kwargs = {"subprotocols": ["ws+meta.nchan"]} if meta else {}
    if header:
        kwargs["additional_headers"] = {"Last-Event-ID": FROM_START}
    else:
        url += f"?last_event_id={FROM_START}"
    texts: list[str] = []
    with connect(url, **kwargs) as ws:
        def seen() -> bool:
            try:
                texts.append(ws.recv(timeout=0.2))
            except TimeoutError:
                return False
            return any(_about(f, sentinel) for f in _frames(texts[-1]))
        wait_for(seen, 20, f"the frame about annotation {sentinel} on {url}", every=0)
    return texts


async def _read_hub(write_sentinel, after_seq: int) -> list[str]:
    """What an anonymous hub socket gets when it resumes from the start of the run's live log, up to the frame about
    an annotation written once it has joined."""
    comm = WebsocketCommunicator(application, f"/ws/runs/{RUN}/", headers=ORIGIN)
    assert (await comm.connect(timeout=5))[0]
    texts = [await comm.receive_from(timeout=5)]
    await comm.send_json_to({"type": "resume", "after_seq": after_seq, "after_event": 0})
    texts.append(await comm.receive_from(timeout=5))  # the log's entries after after_seq: all it holds
    assert len(_frames(texts[-1])) >= 5 and all(f["type"] == "annotation" for f in _frames(texts[-1])), texts[-1]
    sentinel = await database_sync_to_async(write_sentinel)()
    while not any(_about(f, sentinel) for f in _frames(texts[-1])):
        texts.append(await comm.receive_from(timeout=10))
    await comm.disconnect()
    return texts


def _relay_until_idle(relay: Relay) -> None:
    """The relay publishes what the run's live log holds (landed code: its producers published it themselves)."""
    if hasattr(relay, "drain"):
        relay.drain()


def test_a_hidden_or_deleted_annotation_is_unreadable_on_every_live_channel(run, personas, nchan, settings,
                                                                           redis_client):
    settings.OBS_LIVE_PUSH_URL = nchan.pub_url
    relay = Relay(redis_client, NchanPublisher(nchan.pub_url))
    member, moderator = personas["member"], personas["moderator"]
    hidden = create(member, title="SECRET-TITLE", body="SECRET-BODY").json()
    assert post(personas["operator"], f"/api/annotations/{hidden['id']}/replies/",
                {"body": "SECRET-REPLY"}).status_code == 201
    deleted = create(member, title="DELETED-TITLE", body="DELETED-BODY").json()
    _relay_until_idle(relay)
    assert post(moderator, f"/api/annotations/{hidden['id']}/moderation/",
                {"action": "hide", "reason": "doxxing"}).status_code == 200
    assert member.delete(f"/api/annotations/{deleted['id']}/").status_code == 200
    sentinel = create(member, title="later note", body="nothing secret").json()["id"]
    _relay_until_idle(relay)
    # the HTTP API already refuses them to the public
    from django.test import Client
    assert Client().get(f"/api/annotations/{hidden['id']}/").status_code == 404

    first = seq_of(redis_client.xrange(log_key(RUN), count=1)[0][0])
    base = f"ws://127.0.0.1:{nchan.port}/live/runs/{RUN}/"
    channels = {
        "full, last_event_id, ws+meta.nchan": lambda: _read_nchan(base, sentinel, meta=True),
        "lite, last_event_id, ws+meta.nchan": lambda: _read_nchan(base + "lite/", sentinel, meta=True),
        "full, last_event_id": lambda: _read_nchan(base, sentinel, meta=False),
        "full, Last-Event-ID header": lambda: _read_nchan(base, sentinel, meta=True, header=True),
        "hub, resume from the start": lambda: asyncio.run(_read_hub(
            lambda: create(member, title="another", body="nothing secret").json()["id"], first - 1)),
    }
    for channel, read in channels.items():
        texts = read()
        joined = "\n".join(texts)
        leaked = [s for s in SECRETS if s in joined]
        assert not leaked, f"{channel}: {leaked} readable after the hide / delete"
        # nothing user-written at all: annotation frames are references
        for frame in (f for t in texts for f in _frames(t) if f.get("type") == "annotation"):
            assert not {"annotation", "reply", "title", "body", "body_html", "author"} & set(frame), (channel, frame)
