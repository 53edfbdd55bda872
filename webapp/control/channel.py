"""Sending signed commands to a run's control stream, and bringing the audit trail up to date from Redis and SQL.

Everything a page shows about a command is read from shared state, so any web replica (or one restarted
mid-flight) tells the same story: `sync()` imports commands other senders (the CLI) put on the control stream,
moves each open command along the trainer's acks (matched by command id: see `follow`), and marks
commands undone from the `commands_rolled_back` events ingest stored. Every step is idempotent.
"""

from __future__ import annotations

import datetime as dt
import json

from django.conf import settings
from django.utils import timezone

from observatory import contract
from observatory.streams import text
from webapp.control.models import OperatorCommand, RunControlKey
from webapp.redis import get_redis
from webapp.runs.models import RunEvent

CONTROL_MAXLEN = 10_000
IMPORT_SCAN = 50  # newest control-stream entries looked at for commands sent from elsewhere
ACK_SCAN = 2000  # acks read per run and sync at most
OPEN = ("sent", "accepted")  # a record moves only forward from these; applied and rejected are final


class NoControlKey(RuntimeError):
    pass


def run_key(run_id: str) -> bytes:
    """The run's control key, derived from the master only the web tier holds, at the run's generation."""
    master = settings.OBS_CONTROL_KEY
    if master is None:
        raise NoControlKey("the web tier has no control key (OBS_CONTROL_KEY or OBS_CONTROL_KEY_FILE)")
    return contract.run_control_key(master, run_id, RunControlKey.generation_of(run_id))


def run_key_or_none(run_id: str) -> bytes | None:
    try:
        return run_key(run_id)
    except NoControlKey:
        return None


def send(cmd: OperatorCommand) -> None:
    """Put the command on its run's control stream, signed; the first send's entry goes on `cmd.sent_entry` (the
    caller saves it). A retry sends the same id again and leaves `sent_entry` as it was: acks of every send count."""
    key = run_key(cmd.run_id)
    # The entry's `user` is public: the trainer writes it into its events and phase ("paused by …"). A web operator
    # is named there as on public pages: by the name they chose to show, else "operator"; never by a login name.
    who = (cmd.operator_name(public=True) or "operator") if cmd.user else cmd.sender
    fields = contract.sign_command(cmd.run_id, contract.command_fields(cmd.id, cmd.name, cmd.args, cmd.reason, who),
                                   key)
    entry = get_redis().xadd(contract.control_stream(cmd.run_id), fields, maxlen=CONTROL_MAXLEN, approximate=True)
    cmd.sent_entry = cmd.sent_entry or text(entry)


def _fields(raw: dict) -> dict[str, str]:
    return {text(k): text(v) for k, v in raw.items()}


def _import_foreign(run_ids: list[str], pipe_results) -> None:
    """Commands on the control streams that no record holds yet (sent with the CLI: a web command is recorded
    before it is sent): record them as sent."""
    found = {}
    for run_id, entries in zip(run_ids, pipe_results):
        for eid, raw in entries:
            f = _fields(raw)
            if f.get("id"):
                found[f["id"]] = (run_id, text(eid), raw, f)
    if not found:
        return
    known = set(OperatorCommand.objects.filter(pk__in=list(found)).values_list("pk", flat=True))
    keys: dict[str, bytes | None] = {}
    for cmd_id, (run_id, eid, raw, f) in found.items():
        if cmd_id in known:
            continue
        if run_id not in keys:
            keys[run_id] = run_key_or_none(run_id)
        try:  # only commands signed with the run's key are operator commands; the trainer rejects anything else
            contract.verify_command(run_id, raw, keys[run_id])
            cmd = contract.parse_command(raw)
        except contract.CommandError:
            continue
        when = dt.datetime.fromtimestamp(cmd.t, dt.timezone.utc) if cmd.t else timezone.now()
        OperatorCommand.objects.get_or_create(pk=cmd_id, defaults=dict(
            run_id=run_id, name=cmd.name, args=cmd.args, reason=cmd.reason[:1000], source="cli",
            sender=cmd.user[:150], created_at=when, sent_entry=eid))


def entry_key(eid: str) -> tuple[int, int]:
    """A stream entry id's order; anything unparsable (a forged field) sorts first."""
    ms, _, seq = (eid or "").partition("-")
    try:
        return (int(ms or 0), int(seq or 0))
    except ValueError:
        return (-1, -1)


def scan_start(cmds: list[OperatorCommand]) -> str:
    """Where to read a run's ack stream from: the millisecond of its oldest open command's first send."""
    first = min((entry_key(c.sent_entry or "0-0") for c in cmds), default=(0, 0))
    return f"{first[0]}-0" if first > (0, 0) else "-"


def answers(cmd: OperatorCommand, ack_id: str, f: dict[str, str]) -> bool:
    """Whether an ack (its id on the ack stream, its fields) answers a send of `cmd`: its id is the command's, and
    the control entry it names is the first send or a later one (one stream: the order is meaningful). An ack that
    names no entry (an older trainer) counts from the first send's millisecond on: ack-stream ids are another
    stream's, and a refusal may get the very id of the send it answers."""
    if f.get("id") != cmd.id:
        return False
    first = entry_key(cmd.sent_entry or "0-0")
    if f.get("entry"):
        return entry_key(f["entry"]) >= first
    return entry_key(ack_id)[0] >= first[0]


def follow(open_cmds: list[OperatorCommand], acks: list) -> list[OperatorCommand]:
    """Move each open command along the acks (in stream order) that answer it; the first final ack is what the
    trainer did, and a later one (a refused replay, a duplicate's answer) never changes it. The one rule for the
    recorded trail (sync) and the public reads (outcomes), in memory; returns the commands that changed."""
    order = {s: i for i, s in enumerate(OperatorCommand.STATUSES)}
    by_id = {c.id: c for c in open_cmds}
    changed: dict[str, OperatorCommand] = {}
    for eid, raw in acks:
        f = _fields(raw)
        cmd, status = by_id.get(f.get("id", "")), f.get("status", "")
        if cmd is None or status not in order or cmd.final or order[status] <= order[cmd.status]:
            continue
        if not answers(cmd, text(eid), f):
            continue
        cmd.status, cmd.detail = status, f.get("detail", "")[:2000]
        step = f.get("step", "")
        cmd.step = int(step) if step.isdigit() else cmd.step
        changed[cmd.id] = cmd
    return list(changed.values())


def _apply_acks(open_cmds: list[OperatorCommand], acks: list) -> None:
    order = {s: i for i, s in enumerate(OperatorCommand.STATUSES)}
    for cmd in follow(open_cmds, acks):
        # only forward: a slower replica applying an older ack must not move the record back
        OperatorCommand.objects.filter(pk=cmd.pk, status__in=[s for s in OPEN if order[s] < order[cmd.status]]) \
            .update(status=cmd.status, detail=cmd.detail, step=cmd.step, updated_at=timezone.now())


def undo_of(payload) -> tuple[list[str], str, str] | None:
    """A `commands_rolled_back` event's (ids, by, detail), or None when it names none."""
    ids = payload.get("ids") if isinstance(payload, dict) else None
    if not isinstance(ids, list) or not ids:
        return None
    by = str(payload.get("by") or "restart")[:200]
    detail = str(payload.get("detail") or "")[:1000]
    if by == "restart":
        detail = f"lost in a restart from the checkpoint at step {payload.get('resumed_step')}: {detail}"
    return [str(i) for i in ids][:1000], by, detail


def undo(cmds: list[OperatorCommand], events: list[tuple[dict, object]]) -> list[OperatorCommand]:
    """Mark the applied, not yet undone commands each event (payload, when) undid, in memory, in event order; the
    first undo stands. The one rule for the recorded trail and the public reads; returns those marked."""
    applied = {c.id: c for c in cmds if c.status == "applied" and c.undone_at is None}
    marked = []
    for payload, when in events:
        found = undo_of(payload) if applied else None
        for cmd_id in (found[0] if found else []):
            cmd = applied.pop(cmd_id, None)
            if cmd is not None:
                cmd.undone_by, cmd.undone_at, cmd.undone_detail = found[1], when, found[2]
                marked.append(cmd)
    return marked


def _apply_undos(run_ids: list[str]) -> None:
    events = RunEvent.objects.filter(run_id__in=run_ids, name="commands_rolled_back").order_by("id")
    for ev in events:
        found = undo_of(ev.payload)
        if found is None:
            continue
        ids, by, detail = found
        OperatorCommand.objects.filter(run_id=ev.run_id, pk__in=ids, status="applied", undone_at__isnull=True) \
            .update(undone_by=by, undone_at=ev.t or ev.created_at, undone_detail=detail)


def sync(run_ids: list[str]) -> None:
    """Bring these runs' command records up to date from their control and ack streams and undo events."""
    run_ids = list(run_ids)
    if not run_ids:
        return
    r = get_redis()
    pipe = r.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.xrevrange(contract.control_stream(run_id), count=IMPORT_SCAN)
    _import_foreign(run_ids, pipe.execute())
    open_cmds = list(OperatorCommand.objects.filter(run_id__in=run_ids, status__in=OPEN))
    by_run: dict[str, list[OperatorCommand]] = {}
    for c in open_cmds:
        by_run.setdefault(c.run_id, []).append(c)
    if by_run:
        pipe = r.pipeline(transaction=False)
        for run_id, cmds in by_run.items():
            pipe.xrange(contract.ack_stream(run_id), min=scan_start(cmds), count=ACK_SCAN)
        for cmds, acks in zip(by_run.values(), pipe.execute()):
            _apply_acks(cmds, acks)
    _apply_undos(run_ids)


def checkpoints(run_ids: list[str]) -> dict[str, dict]:
    """{run id: the checkpoint list its trainer published (contract.checkpoints_key)}."""
    pipe = get_redis().pipeline(transaction=False)
    for run_id in run_ids:
        pipe.get(contract.checkpoints_key(run_id))
    out = {}
    for run_id, raw in zip(run_ids, pipe.execute()):
        try:
            out[run_id] = json.loads(raw) if raw else {"t": None, "checkpoints": []}
        except ValueError:
            out[run_id] = {"t": None, "checkpoints": []}
    return out

