"""A run's commands as they stand now, for public reads, which never write: the stored records, the commands sent
from a shell that no record holds yet, the trainer's newer acks and the rollbacks' undo events, all applied in
memory. The operator paths (the panel, a send) record the same through channel.sync, by the same rules."""

from __future__ import annotations

from django.utils import timezone

from observatory import contract
from observatory.streams import text
from webapp.control import channel
from webapp.control.models import OperatorCommand
from webapp.redis import get_redis
from webapp.runs.models import RunEvent, from_unix

def current(run_id: str, rows) -> list[OperatorCommand]:
    """`rows` (some of the run's records) and the run's unrecorded shell commands, brought up to date; newest
    first. The records are changed in memory only."""
    r = get_redis()
    cmds = list(rows) + _unrecorded(run_id, r.xrevrange(contract.control_stream(run_id), count=channel.IMPORT_SCAN))
    _follow_acks(r, run_id, [c for c in cmds if c.status in ("sent", "accepted")])
    _undo(run_id, cmds)
    return sorted(cmds, key=lambda c: c.created_at, reverse=True)


def log(run_id: str, limit: int = 1000) -> list[OperatorCommand]:
    """The run's newest commands, newest first: its public command log."""
    rows = OperatorCommand.objects.filter(run_id=run_id).select_related("user__profile")[:limit]
    return current(run_id, rows)[:limit]


def applied(run_id: str, limit: int = 1000) -> list[OperatorCommand]:
    """The run's applied commands (undone ones too), oldest first: its public interventions."""
    rows = (OperatorCommand.objects.filter(run_id=run_id, status__in=("sent", "accepted", "applied"))
            .select_related("user__profile").order_by("created_at")[:limit])
    return [c for c in reversed(current(run_id, rows)) if c.status == "applied"][:limit]


def _fields(raw) -> dict[str, str]:
    return {text(k): text(v) for k, v in raw.items()}


def _unrecorded(run_id: str, entries) -> list[OperatorCommand]:
    """Signed commands on the control stream that no record holds (sent with the CLI), as unsaved records."""
    found = {}
    for eid, raw in entries:
        f = _fields(raw)
        if f.get("id"):
            found[f["id"]] = (text(eid), raw)
    known = set(OperatorCommand.objects.filter(pk__in=list(found)).values_list("pk", flat=True))
    out = []
    key = channel.run_key_or_none(run_id) if set(found) - known else None
    for cmd_id, (eid, raw) in found.items():
        if cmd_id in known:
            continue
        try:  # only commands signed with the run's key are operator commands; the trainer rejects anything else
            contract.verify_command(run_id, raw, key)
            cmd = contract.parse_command(raw)
        except contract.CommandError:
            continue
        out.append(OperatorCommand(id=cmd_id, run_id=run_id, name=cmd.name, args=cmd.args, reason=cmd.reason[:1000],
                                   source="cli", sender=cmd.user[:150], sent_entry=eid,
                                   created_at=from_unix(cmd.t) or timezone.now()))
    return out


def _follow_acks(r, run_id: str, open_cmds: list[OperatorCommand]) -> None:
    """Each open command moved forward along the acks that answer it (channel.follow, the recording rule)."""
    if open_cmds:
        channel.follow(open_cmds, r.xrange(contract.ack_stream(run_id), min=channel.scan_start(open_cmds),
                                           count=channel.ACK_SCAN))


def _undo(run_id: str, cmds: list[OperatorCommand]) -> None:
    """Applied commands a rollback (or a restart from an older checkpoint) undid (channel.undo, the recording rule)."""
    if any(c.status == "applied" and c.undone_at is None for c in cmds):
        events = RunEvent.objects.filter(run_id=run_id, name="commands_rolled_back").order_by("id")
        channel.undo(cmds, [(ev.payload, ev.t or ev.created_at) for ev in events])
