"""Dead letters keep the entry they refuse, bounded, whatever the reason: the contract's, the database's (a real
trigger rejects the row) or ingest's own bug."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from observatory import contract
from webapp.metrics import ingest
from webapp.runs.models import RunEvent

from .test_ingest import MALFORMED

pytestmark = pytest.mark.django_db(transaction=True)


def _letters(redis_client) -> dict[str, dict]:
    return {f[b"reason"].decode(): {k.decode(): v.decode() for k, v in f.items()}
            for _, f in redis_client.xrange(contract.DEADLETTER_STREAM)}


def _fields(fields: dict) -> dict:
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in fields.items()}


@pytest.fixture
def poison_trigger():
    """A trigger in the test database that refuses any run event named "poison", as a constraint would."""
    table = RunEvent._meta.db_table
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute(f"CREATE TRIGGER reject_poison BEFORE INSERT ON {table} WHEN NEW.name = 'poison' "
                        "BEGIN SELECT RAISE(ABORT, 'poison refused'); END")
        else:
            cur.execute("CREATE FUNCTION reject_poison() RETURNS trigger AS $$ BEGIN IF NEW.name = 'poison' THEN "
                        "RAISE EXCEPTION 'poison refused' USING ERRCODE = 'check_violation'; END IF; "  # a constraint's
                        "RETURN NEW; END $$ LANGUAGE plpgsql")
            cur.execute(f"CREATE TRIGGER reject_poison BEFORE INSERT ON {table} FOR EACH ROW "
                        "EXECUTE FUNCTION reject_poison()")
    yield
    with connection.cursor() as cur:
        cur.execute("DROP TRIGGER reject_poison" + ("" if connection.vendor == "sqlite" else f" ON {table}"))
        if connection.vendor != "sqlite":
            cur.execute("DROP FUNCTION reject_poison()")


def test_a_dead_letter_of_each_reason_keeps_the_entry(trainer, ingestor, run_id, redis_client, poison_trigger,
                                                      monkeypatch):
    sent = {}
    for reason, fields in MALFORMED.items():
        fields = {k: v.replace("{run}", run_id) if isinstance(v, str) else v for k, v in fields.items()}
        sent[reason] = (trainer.raw(fields), fields)
    poison = contract.encode(run_id, "event", {"t": 1.0, "step": 3, "name": "poison", "payload": {"why": "db"}})
    sent["db_rejected"] = (trainer.raw(poison), poison)
    bug = contract.encode(run_id, "event", {"t": 1.0, "step": 4, "name": "bug", "payload": {"why": "ingest"}})
    sent["internal"] = (trainer.raw(bug), bug)
    trainer.metrics(5, loss=1.0)

    real = ingest.apply_messages

    def apply_with_a_bug(items, **kw):  # ingest's own code failing on one message: what "internal" stands for
        items = list(items)
        if any(m.kind == "event" and m.data["name"] == "bug" for _, m in items):
            raise TypeError("a bug in ingest")
        return real(items, **kw)

    monkeypatch.setattr(ingest, "apply_messages", apply_with_a_bug)
    assert ingestor.drain() == len(sent) + 1

    letters = _letters(redis_client)
    assert set(letters) == set(sent)
    for reason, (entry_id, fields) in sent.items():
        letter = letters[reason]
        assert letter["id"] == entry_id.decode() and letter["stream"] == trainer.stream
        if reason == "bad_encoding":  # undecodable bytes are kept as their repr
            assert "\\xff\\xfe" in letter["raw"] and letter["truncated"] == "0"
        elif reason == "oversized":  # bounded: the first 64 KiB, flagged, with the original size
            assert letter["truncated"] == "1" and len(letter["raw"].encode()) == contract.DEADLETTER_RAW_BYTES
            assert letter["raw"].startswith(json.dumps(_fields(fields), separators=(",", ":"))[:1000])
            assert int(letter["bytes"]) > 300_000
        else:
            assert json.loads(letter["raw"]) == _fields(fields) and letter["truncated"] == "0", reason
    assert "poison refused" in letters["db_rejected"]["error"]
    assert "TypeError: a bug in ingest" in letters["internal"]["error"]
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] == 0
