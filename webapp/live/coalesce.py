"""Single-flight reads for a crowd: viewers asking the same question at once share one database read.

Safe for backfills: a round's read starts only after every request in it arrived, so each requester gets data at
least as fresh as its own subscription (what it would have read alone); requests arriving during a read wait for
the next round instead of taking a stale answer.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Hashable


class Coalescer:
    def __init__(self):
        self.waiting: dict[Hashable, list[asyncio.Future]] = {}
        self.running: set[Hashable] = set()

    async def get(self, key: Hashable, read: Callable[[], Awaitable]):
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.waiting.setdefault(key, []).append(fut)
        if key not in self.running:
            self.running.add(key)
            loop.create_task(self._rounds(key, read))
        return await fut

    async def _rounds(self, key: Hashable, read: Callable[[], Awaitable]) -> None:
        try:
            while self.waiting.get(key):
                round_ = self.waiting.pop(key)
                try:
                    result = await read()
                except Exception as e:
                    for f in round_:
                        if not f.done():
                            f.set_exception(e)
                    continue
                for f in round_:
                    if not f.done():
                        f.set_result(result)
        finally:
            self.running.discard(key)
