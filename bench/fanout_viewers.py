"""WebSocket viewer processes for bench/fanout.py: each process holds many viewers of one run (websockets library)
and records, per viewer, when each step of the loss first arrived (an update, a coalesced batch or a backfill)."""

from __future__ import annotations

import asyncio
import json
import re
import time

# The loss series of a frame (update, backfill or any frame inside a coalesced batch). A regex instead of
# json.loads: the harness must not be the bottleneck it measures (BRIEF §4), and frames put "series" first.
LOSS_STEPS = re.compile(r'"train/loss":\{"steps":\[([0-9,]*)\]')


async def _viewer(url: str, origin: str, resume: dict | None, rec: dict, state: dict, hub: bool) -> None:
    """hub: the web server's /ws/runs/ (a hello, then a resume); else nchan's /live/runs/ (frames only)."""
    import websockets

    try:
        async with websockets.connect(url, origin=origin, max_size=None, open_timeout=120,
                                      ping_interval=None, close_timeout=2) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), 120)) if hub else {"type": "hello"}
            if hello.get("type") != "hello":
                state["failed"] += 1
                return
            if hub and resume is not None:
                last = (hello.get("run") or {}).get("last_step")
                await ws.send(json.dumps({**resume, "after_step": last if isinstance(last, int) else -1}))
            state["connected"] += 1
            async for raw in ws:  # until the bench cancels this task at its stop time
                now = time.time()
                if isinstance(raw, bytes):
                    raw = raw.decode()
                for m in LOSS_STEPS.finditer(raw):
                    for s in m.group(1).split(","):
                        if s:
                            rec.setdefault(int(s), now)
            state["dropped"] += 1  # the server closed it before the end
            state["errors"]["closed"] = state["errors"].get("closed", 0) + 1
    except asyncio.CancelledError:
        return
    except Exception as e:  # a refused handshake or a dropped socket: counted, never fatal to the others
        state["errors"][type(e).__name__] = state["errors"].get(type(e).__name__, 0) + 1
        if not rec:
            state["failed"] += 1
        else:
            state["dropped"] += 1


async def _main(urls: list[str], origin: str, count: int, resume: dict | None, ramp_per_s: float,
                conn, hub: bool) -> tuple[list[dict], dict]:
    recs = [dict() for _ in range(count)]
    state = {"connected": 0, "failed": 0, "dropped": 0, "errors": {}}
    tasks = []
    for i in range(count):
        tasks.append(asyncio.create_task(_viewer(urls[i % len(urls)], origin, resume, recs[i], state, hub)))
        if ramp_per_s > 0:  # 0: everyone at once (a reconnect storm)
            await asyncio.sleep(1 / ramp_per_s)
    while state["connected"] + state["failed"] + state["dropped"] < count:
        await asyncio.sleep(0.1)
    conn.send(("ready", state["connected"], state["failed"]))
    _, stop_at = await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # ("stop", unix time)
    await asyncio.wait(tasks, timeout=max(0.0, stop_at - time.time()))
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return recs, state


def worker(urls: list[str], origin: str, count: int, resume: dict | None, ramp_per_s: float, conn,
           hub: bool = True) -> None:
    """Process entry point: open `count` viewers, say ("ready", connected, failed), take ("stop", unix time), run
    until then and send back what each viewer saw as ("done", [[(step, arrival)]], state)."""
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    recs, state = asyncio.run(_main(urls, origin, count, resume, ramp_per_s, conn, hub))
    conn.send(("done", [list(r.items()) for r in recs], state))
    conn.close()
