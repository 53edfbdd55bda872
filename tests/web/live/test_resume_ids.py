"""The page's last_event_id through the push tier (QA, issue 46): a first subscription sent a made-up "<time>:0" (the
page's time less a margin), no message's id, so nchan logged the first message of every page load on a run with a
full buffer as missed ("previous message id times don't match"). The page now asks for nchan's oldest kept message
(webapp.live.relay.SINCE), then resumes by the last id it got: nginx logs no missed message, and each viewer gets
the live log's entries in order, none twice, none skipped."""

from __future__ import annotations

import pytest

from observatory import contract
from tests.web.live.test_relay import (  # noqa: F401 (fixtures: the push tier as make run has it)
    ingest, nchan, open_channels, relay, relay_all)
from webapp.live.relay import add_page_data

pytestmark = pytest.mark.django_db(transaction=True)
STEPS = 70  # past both resume windows (deploy/push.conf: 50 messages on the full channel, 60 on the lite one)


def steps(trainer, relay, ingest, span) -> None:
    for step in span:  # one live-log entry, so one message on each channel, a step
        trainer.metrics_named(step, {contract.M_LOSS: 1.0 / (step + 1)})
        relay_all(relay, ingest)


def test_a_page_subscribes_and_resumes_with_no_missed_message_logged_and_every_entry_once_in_order(
        relay, nchan, trainer, ingest, run_id, settings, tmp_path):
    settings.OBS_LIVE_PUSH_URL = nchan.pub_url
    open_channels(relay, ingest, trainer)
    steps(trainer, relay, ingest, range(STEPS))  # the run has trained a while: its oldest messages are gone
    page: dict = {}
    add_page_data(None, None, page)  # the page data a dashboard opened now gets
    since = page["live_push"]["since"]
    viewers = {channel: nchan.viewer(run_id, since, channel=channel) for channel in ("", "lite")}
    for channel, v in viewers.items():
        v.read_until(lambda v=v: STEPS - 1 in v.points.get(contract.M_LOSS, {}), f"{channel or 'full'}: the last step")
        v.ws.close()  # the connection drops; the run goes on; the page resumes after the last id it got
    steps(trainer, relay, ingest, range(STEPS, STEPS + 5))
    for channel, v in viewers.items():
        v.ws = nchan.viewer(run_id, v.last_id, channel=channel).ws
        v.read_until(lambda v=v: STEPS + 4 in v.points[contract.M_LOSS], f"{channel or 'full'}: after the resume")
        got = v.received[contract.M_LOSS]
        assert got == list(range(got[0], STEPS + 5)), (channel, got)  # in order, none twice, none skipped
        assert v.seqs == list(range(v.seqs[0], v.seqs[0] + len(v.seqs))), (channel, v.seqs)
        v.close()
    log = (tmp_path / "logs" / "nginx-error.log").read_text()
    assert "Missed message" not in log, [line for line in log.splitlines() if "Missed message" in line][:3]
