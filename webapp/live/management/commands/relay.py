"""`manage.py relay`: the push tier's relay (webapp.live.relay), from every run's Redis telemetry stream to nchan's
publisher (OBS_LIVE_PUSH_URL). One is enough (it does little per entry); a second would publish every frame twice.
SIGTERM/SIGINT finish the current read and exit 0."""

from __future__ import annotations

import logging
import signal
import threading

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from observatory.streams import Backoff, connect
from observatory.streams.nchan import NchanPublisher, PushError
from webapp.live.relay import Relay

log = logging.getLogger("observatory.relay")


class Command(BaseCommand):
    help = "Publish each run's live points and rewinds from its Redis stream to the push tier (nchan)."

    def add_arguments(self, parser):
        parser.add_argument("--block-ms", type=int, default=500, help="XREAD block time (default 500)")
        parser.add_argument("--batch", type=int, default=500, help="entries per stream per read (default 500)")

    def handle(self, *args, block_ms=500, batch=500, **kw):
        if block_ms < 1 or batch < 1:
            raise CommandError("--block-ms and --batch must be >= 1")
        if not settings.OBS_LIVE_PUSH_URL:
            raise CommandError("OBS_LIVE_PUSH_URL is not set: there is no push tier to relay to")
        client = connect(settings.REDIS_URL, timeout=block_ms / 1000 + 5)
        try:
            client.ping()
        except redis.RedisError as e:
            raise CommandError(f"Redis at {settings.REDIS_URL} is not reachable: {e}") from None
        relay = Relay(client, NchanPublisher(settings.OBS_LIVE_PUSH_URL), batch=batch)
        stop = threading.Event()
        old = {s: signal.signal(s, lambda signum, frame: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
        log.info("relay starting: redis %s -> %s", settings.REDIS_URL, settings.OBS_LIVE_PUSH_URL)
        backoff = Backoff(start_s=0.2, cap_s=5.0)
        try:
            while not stop.is_set():
                try:
                    relay.step(block_ms)
                    backoff.ok()
                except (redis.ConnectionError, redis.TimeoutError, PushError) as e:
                    if backoff.first:
                        log.warning("%s: %s; retrying", type(e).__name__, e)
                    backoff.wait(stop)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            log.info("relay stopped: %s", dict(relay.stats))
