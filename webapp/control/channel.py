"""Sending a signed command to a run's control stream and reading the trainer's acks back."""

from __future__ import annotations

from django.conf import settings

from observatory import contract
from observatory.streams import text
from webapp.control.models import OperatorCommand
from webapp.redis import get_redis

ACK_SCAN = 2000  # newest ack entries looked at when refreshing a command's status


class NoControlKey(RuntimeError):
    pass


def send(cmd: OperatorCommand) -> None:
    key = settings.OBS_CONTROL_KEY
    if key is None:
        raise NoControlKey("the web tier has no control key (OBS_CONTROL_KEY or OBS_CONTROL_KEY_FILE)")
    who = cmd.user.get_username() if cmd.user else ""
    fields = contract.sign_command(cmd.run_id, contract.command_fields(cmd.id, cmd.name, cmd.args, cmd.reason, who),
                                   key)
    get_redis().xadd(contract.control_stream(cmd.run_id), fields, maxlen=10_000, approximate=True)


def refresh(commands: list[OperatorCommand]) -> None:
    """Bring the commands' status up to date from the run's ack stream (the newest ack of each id wins)."""
    open_ = {c.id: c for c in commands if c.status not in ("applied", "rejected")}
    if not open_:
        return
    run_id = next(iter(open_.values())).run_id
    order = {s: i for i, s in enumerate(OperatorCommand.STATUSES)}
    for _eid, f in reversed(get_redis().xrevrange(contract.ack_stream(run_id), count=ACK_SCAN)):
        cmd = open_.get(text(f.get(b"id", b"")))
        status = text(f.get(b"status", b""))
        if cmd is None or order.get(status, -1) <= order[cmd.status]:
            continue
        cmd.status, cmd.detail = status, text(f.get(b"detail", b""))
        step = text(f.get(b"step", b""))
        cmd.step = int(step) if step.isdigit() else cmd.step
        cmd.save(update_fields=["status", "detail", "step", "updated_at"])
