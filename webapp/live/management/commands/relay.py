"""`manage.py relay`: the push tier's relay (webapp.live.relay), from every run's live log to nchan's publisher
(OBS_LIVE_PUSH_URL). Run as many as you like: they share the runs by leases, and one killed is replaced within
--lease-ms and a discovery round. SIGTERM/SIGINT finish the current read, hand the runs back and exit 0."""

from __future__ import annotations

import logging
import signal
import threading

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from observatory.streams import Backoff, connect
from observatory.streams.nchan import NchanPublisher, PushError
from webapp.live.relay import LEASE_MS, Relay

log = logging.getLogger("observatory.relay")


class Command(BaseCommand):
    help = "Publish each run's live log (every frame a viewer may see, numbered) to the push tier (nchan)."

    def add_arguments(self, parser):
        parser.add_argument("--block-ms", type=int, default=500, help="XREAD block time (default 500)")
        parser.add_argument("--batch", type=int, default=500, help="entries per log per read (default 500)")
        parser.add_argument("--lease-ms", type=int, default=LEASE_MS,
                            help=f"a run's lease: how soon a dead relay's runs are taken over (default {LEASE_MS})")

    def handle(self, *args, block_ms=500, batch=500, lease_ms=LEASE_MS, **kw):
        if block_ms < 1 or batch < 1:
            raise CommandError("--block-ms and --batch must be >= 1")
        if lease_ms < 500:
            raise CommandError("--lease-ms must be >= 500")
        if not settings.OBS_LIVE_PUSH_URL:
            raise CommandError("OBS_LIVE_PUSH_URL is not set: there is no push tier to relay to")
        client = connect(settings.REDIS_URL, timeout=block_ms / 1000 + 5)
        try:
            client.ping()
        except redis.RedisError as e:
            raise CommandError(f"Redis at {settings.REDIS_URL} is not reachable: {e}") from None
        relay = Relay(client, NchanPublisher(settings.OBS_LIVE_PUSH_URL), batch=batch, lease_ms=lease_ms).start()
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
            try:
                relay.close()
            except redis.RedisError:
                pass
            log.info("relay stopped: %s", dict(relay.stats))
