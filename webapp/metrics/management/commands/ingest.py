"""`manage.py ingest`: the long-running process that moves run telemetry from Redis streams into the database
(webapp.metrics.ingest) and pushes live updates to browsers (webapp.live.pipeline, which live registers as
metrics.changes.ingest_process). Run as many as you like: they share the streams through leases. SIGTERM/SIGINT
finish the current batch, flush pushes, hand the streams back to the other ingest processes, and exit 0."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from observatory.streams import Backoff, connect
from webapp.metrics import changes

log = logging.getLogger("observatory.ingest")


class Command(BaseCommand):
    help = "Ingest run telemetry from Redis streams into the database and push coalesced live updates."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="process what is there now, then exit")
        parser.add_argument("--block-ms", type=int, default=500, help="XREADGROUP block time (default 500)")
        parser.add_argument("--batch", type=int, default=500, help="entries per stream per read (default 500)")
        parser.add_argument("--consumer", default=f"ingest-{socket.gethostname()}-{os.getpid()}",
                            help="consumer name in the streams' group (default ingest-<hostname>-<pid>); entries "
                                 "a dead consumer left pending are taken over by whoever takes its streams")
        parser.add_argument("--lease-ms", type=int, default=10_000,
                            help="a stream's lease: a dead ingest's streams move to another after this (default "
                                 "10000)")
        parser.add_argument("--push-interval-ms", type=int, default=100,
                            help="at most one live push per run per this many ms (default 100)")

    def handle(self, *args, once=False, block_ms=500, batch=500, consumer="", push_interval_ms=100, lease_ms=10_000,
               **kw):
        if block_ms < 1 or batch < 1 or push_interval_ms < 1:
            raise CommandError("--block-ms, --batch and --push-interval-ms must be >= 1")
        if lease_ms < 3 * block_ms:
            raise CommandError("--lease-ms must be at least 3 x --block-ms (leases are renewed between reads)")
        client = connect(settings.REDIS_URL, timeout=max(5.0, block_ms / 1000 + 5))
        try:
            client.ping()
        except redis.RedisError as e:
            raise CommandError(f"Redis at {settings.REDIS_URL} is not reachable: {e}") from None
        if changes.ingest_process is None:
            raise CommandError("no ingest process registered (webapp.live registers it: is it installed?)")
        ing = changes.ingest_process(client, consumer=consumer, batch=batch, interval=push_interval_ms / 1000,
                                     lease_ms=lease_ms)
        stop = threading.Event()

        def on_signal(signum, frame):
            log.info("signal %s: finishing the current batch", signal.Signals(signum).name)
            stop.set()

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        log.info("ingest starting: redis %s, consumer %s, batch %d", settings.REDIS_URL, consumer, batch)
        try:
            if once:
                n = ing.drain()
                log.info("ingest --once: %d entries", n)
                return
            backoff = Backoff(start_s=0.5, cap_s=10.0)
            while not stop.is_set():
                try:
                    ing.step(block_ms)
                    backoff.ok()
                except (redis.ConnectionError, redis.TimeoutError, DatabaseError) as e:
                    log.warning("%s: %s; retrying in %.1fs", type(e).__name__, e, backoff.delay_s)
                    backoff.wait(stop)
                except Exception:  # a bug must not stop ingestion of every other run; entries stay pending
                    log.exception("ingest step failed; retrying in %.1fs", backoff.delay_s)
                    backoff.wait(stop)
        finally:
            ing.close()
            for s, h in old.items():
                signal.signal(s, h)
            log.info("ingest stopped: %s", dict(ing.stats))
