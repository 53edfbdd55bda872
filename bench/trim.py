"""Ingest fallen far behind a capped telemetry stream: what is lost, how fast the publisher goes, Redis memory.

    .venv/bin/python bench/trim.py [--read 500000] [--behind 1500000] [--width 1] [--json]

What it measures and how: docs/PERFORMANCE.md, `trim` (bench/results/trim.md).
"""

from __future__ import annotations

import json
import time

from harness import PrivateRedis, parser, report


def publish(pub, steps, names) -> float:
    """Publish these steps without overflowing the queue; returns the seconds it took."""
    t0 = time.perf_counter()
    for step in steps:
        if step % 1000 == 0 and pub.stats()["queue_depth"] > pub.max_queue // 2:
            pub.flush(60)  # a bench waits for a full queue rather than drop
        pub.metrics(step, {n: 0.5 for n in names})
    assert pub.flush(600) and pub.stats()["dropped"] == 0
    return time.perf_counter() - t0


def read_back(client, stream) -> tuple[list[int], int]:
    """The ingest group's backlog: (metrics steps in order, other entries)."""
    from observatory import contract

    steps, other, last = [], 0, ">"
    while True:
        reply = client.xreadgroup(contract.INGEST_GROUP, "bench", {stream: last}, count=20_000)
        entries = reply[0][1] if reply else []
        if not entries:
            return steps, other
        for _, fields in entries:
            if fields[b"kind"] == b"metrics":
                steps.append(json.loads(fields[b"data"])["step"])
            else:
                other += 1
        client.xack(stream, contract.INGEST_GROUP, *[e for e, _ in entries])


def measure(read: int, behind: int, width: int) -> dict:
    import redis

    from observatory import contract
    from observatory.streams import Publisher

    names = [f"bench/m{i}" for i in range(width)]
    with PrivateRedis() as private:
        url = private.url
        client = redis.Redis.from_url(url)
        run_id = "trim-bench"
        stream = contract.telemetry_stream(run_id)
        client.xgroup_create(stream, contract.INGEST_GROUP, id="0", mkstream=True)
        pub = Publisher(url, run_id, batch=500)
        t_read = publish(pub, range(read), names)
        last = client.xrevrange(stream, count=1)[0][0]
        client.xgroup_setid(stream, contract.INGEST_GROUP, last, entries_read=read)  # read and acknowledged
        t_behind = publish(pub, range(read, read + behind), names)
        pub.close()
        mem = client.info("memory")
        length = client.xlen(stream)
        lost_key = getattr(contract, "telemetry_lost_key", None)
        counted = {k.decode(): int(v) for k, v in client.hgetall(lost_key(run_id)).items()} if lost_key else None
        t0 = time.perf_counter()
        steps, other = read_back(client, stream)
        t_back = time.perf_counter() - t0
        missing = behind - len(set(steps) & set(range(read, read + behind)))
        client.close()
    return {"cap": contract.STREAM_MAXLEN, "hard_cap": getattr(contract, "STREAM_HARD_MAXLEN", None),
            "width": width, "acknowledged_before": read, "behind": behind,
            "entries_lost": missing, "lost_counted": counted, "other_entries_in_backlog": other,
            "in_order": steps == sorted(steps), "stream_length_at_end": length,
            "publish_s": round(t_read + t_behind, 1),
            "publish_rate_per_s": round((read + behind) / (t_read + t_behind)),
            "read_back_s": round(t_back, 1), "redis_used_memory_mb": round(mem["used_memory"] / 2**20),
            "redis_peak_memory_mb": round(mem["used_memory_peak"] / 2**20),
            "bytes_per_entry": round(mem["used_memory"] / max(1, length))}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--read", type=int, default=500_000, help="entries ingest reads and acknowledges first")
    ap.add_argument("--behind", type=int, default=1_500_000, help="entries published after ingest stopped")
    ap.add_argument("--width", type=int, default=1, help="metrics per entry (the demo trainer publishes ~242)")
    args = ap.parse_args()
    report("trim", measure(args.read, args.behind, args.width), args.json, not args.no_save)


if __name__ == "__main__":
    main()
