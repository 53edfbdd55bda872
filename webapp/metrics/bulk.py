"""Bulk row writes with the fewest round trips each database allows: plain inserts (COPY on PostgreSQL, executemany
on SQLite) and upserts (multi-row INSERT ... ON CONFLICT DO UPDATE, the same SQL on both).

Raw SQL on purpose: the ORM's per-object work (bulk_create) costs more than the database on these paths.
"""

from __future__ import annotations

from typing import Sequence

from django.db import connection


def _qn(name: str) -> str:
    return connection.ops.quote_name(name)


def insert(table: str, cols: Sequence[str], rows: Sequence[tuple]) -> None:
    """Plain INSERT of rows that must not exist yet: a duplicate key raises IntegrityError (callers that guessed
    "these are new" wrap this in a savepoint and fall back to `upsert`). COPY on PostgreSQL is several times
    faster than any INSERT there (it batches heap and index insertions)."""
    if not rows:
        return
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            with cur.cursor.copy(f"COPY {_qn(table)} ({', '.join(_qn(c) for c in cols)}) FROM STDIN") as cp:
                for row in rows:
                    cp.write_row(row)
        else:
            cur.executemany(f"INSERT INTO {_qn(table)} ({', '.join(_qn(c) for c in cols)}) "
                            f"VALUES ({', '.join(['%s'] * len(cols))})", rows)


def upsert(model, cols: Sequence[str], n_key: int, rows: Sequence[tuple], chunk: int = 500) -> None:
    """INSERT ... ON CONFLICT (first n_key cols) DO UPDATE the rest, into `model`'s table. On PostgreSQL the rows
    travel as one typed array per column (unnest): a handful of parameters instead of rows x columns."""
    if not rows:
        return
    table = model._meta.db_table
    tail = (f" ON CONFLICT ({', '.join(_qn(c) for c in cols[:n_key])}) DO UPDATE SET "
            + ", ".join(f"{_qn(c)} = excluded.{_qn(c)}" for c in cols[n_key:]))
    if connection.vendor == "postgresql":
        types = {f.column: f.db_type(connection) for f in model._meta.concrete_fields}
        arrays = ", ".join(f"%s::{types[c]}[]" for c in cols)
        with connection.cursor() as cur:
            cur.execute(f"INSERT INTO {_qn(table)} ({', '.join(_qn(c) for c in cols)}) SELECT * FROM unnest({arrays})"
                        + tail, [list(col) for col in zip(*rows)])
        return
    head = f"INSERT INTO {_qn(table)} ({', '.join(_qn(c) for c in cols)}) VALUES "
    one = "(" + ", ".join(["%s"] * len(cols)) + ")"
    with connection.cursor() as cur:
        for i in range(0, len(rows), chunk):
            part = rows[i:i + chunk]
            cur.execute(head + ", ".join([one] * len(part)) + tail, [v for row in part for v in row])
