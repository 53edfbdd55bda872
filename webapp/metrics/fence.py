"""Write fencing per run (models.IngestFence): an epoch taken with the run's ingest lease, checked under a row lock.

`bump` runs when a consumer takes a run's lease; `lock` runs first in every transaction that writes a run's
series (apply_messages). On PostgreSQL `lock` is SELECT ... FOR UPDATE: writers of one run queue on that row, so
each reads what the previous one committed (READ COMMITTED gives every statement a fresh snapshot), and a
consumer whose epoch is no longer current learns it before writing anything. On SQLite every write transaction
holds the database's write lock from its start (transaction_mode IMMEDIATE), which serialises them anyway.
"""

from __future__ import annotations

from typing import Iterable

from django.db import connection, transaction

from webapp.metrics.models import IngestFence

_T = IngestFence._meta.db_table


class Fenced(Exception):
    """A batch for runs whose lease this consumer no longer holds (another consumer took them over)."""

    def __init__(self, run_ids: Iterable[str]):
        self.run_ids = set(run_ids)
        super().__init__(f"fenced out of {sorted(self.run_ids)}")


def bump(run_id: str) -> int:
    """A new epoch for the run; writes carrying an older one are refused from now on."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"INSERT INTO {_T} (run_id, epoch) VALUES (%s, 1) ON CONFLICT (run_id) DO UPDATE "
                    f"SET epoch = {_T}.epoch + 1 RETURNING epoch", [run_id])
        return int(cur.fetchone()[0])


def lock(run_ids: Iterable[str]) -> dict[str, int]:
    """Lock these runs' fence rows until the end of the transaction (creating missing ones), in run id order so
    that two writers never wait on each other in a cycle; returns {run id: epoch}."""
    run_ids = sorted(set(run_ids))
    if not run_ids:
        return {}
    select = (f"SELECT run_id, epoch FROM {_T} WHERE run_id IN ({', '.join(['%s'] * len(run_ids))}) ORDER BY run_id"
              + (" FOR UPDATE" if connection.vendor == "postgresql" else ""))
    with connection.cursor() as cur:
        cur.execute(select, run_ids)
        held = {r: int(e) for r, e in cur.fetchall()}
        missing = [r for r in run_ids if r not in held]
        if missing:
            cur.execute(f"INSERT INTO {_T} (run_id, epoch) VALUES {', '.join(['(%s, 0)'] * len(missing))} "
                        f"ON CONFLICT (run_id) DO NOTHING", missing)
            cur.execute(select, run_ids)
            held = {r: int(e) for r, e in cur.fetchall()}
    return held
