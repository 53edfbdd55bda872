"""One Redis client per process for web-side code (views, tasks), on settings.REDIS_URL."""

from __future__ import annotations

import threading

import redis
from django.conf import settings

_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def get_redis() -> redis.Redis:
    url = settings.REDIS_URL  # read at call time: tests point it at their own database
    with _lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
        return client
