"""JSON API for operator commands: send one (operators only, signed, idempotent by id), follow their lives, preview a
re-plan, and the public list of a run's interventions."""

from __future__ import annotations

import uuid

from django.db import IntegrityError, transaction
from django.db.models import F
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods
from django_ratelimit.decorators import ratelimit

from observatory import contract
from webapp.accounts.permissions import api_requires, public
from webapp.api import ApiError, api_view, int_param, json_body
from webapp.control import channel, outcomes, plan, snapshot, tables
from webapp.control.models import OperatorCommand
from webapp.runs.api import get_run
from webapp.runs.models import Run

MAX_BODY_BYTES = 16 * 1024


def _error(status: int, message: str, **extra) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def check_for_run(run: Run, name: str, args: dict, confirm) -> None:
    """What the schema cannot know: the run's own limits, and the operator's confirmation. ApiError if not."""
    spec = contract.COMMAND_SPECS[name]
    if spec.destructive and confirm is not True:
        raise ApiError(400, f"{name} is destructive: confirm it (\"confirm\": true)", field="confirm")
    train = (run.config or {}).get("train") or {}
    if name == "inject-fault" and not train.get("allow_faults"):
        raise ApiError(400, "fault injection is disabled for this run (train.allow_faults is false)")
    if name == "set-mixture":
        weights = args["weights"]  # contract.MIXTURE_RULE held (validate_command): relative, the trainer scales
        domains = [d.get("name") for d in (run.manifest or {}).get("domains", []) if isinstance(d, dict)]
        unknown = sorted(set(weights) - set(domains)) if domains else []
        if unknown:
            raise ApiError(400, f"unknown domain(s) {', '.join(unknown)} (the run has {', '.join(domains)})",
                           field="weights")


def _parse(request) -> dict:
    return json_body(request, MAX_BODY_BYTES)


def _send_new(request, run: Run, body: dict) -> JsonResponse:
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 1000:
        raise ApiError(400, "reason is required (1-1000 characters): it goes into the public audit trail",
                       field="reason")
    cmd_id = body.get("id")
    if cmd_id is None:  # the server names it; an empty id is refused like any other bad one
        cmd_id = f"web-{uuid.uuid4().hex}"
    if not isinstance(cmd_id, str) or not contract.COMMAND_ID_RE.match(cmd_id):
        raise ApiError(400, f"id must be {contract.COMMAND_ID_RULE}", field="id")
    try:
        args = contract.validate_command(body.get("command"), body.get("args") or {})
    except contract.CommandError as e:
        raise ApiError(400, str(e), field="args") from None
    existing = OperatorCommand.objects.filter(pk=cmd_id).first()
    if existing is not None:
        return _retry(existing, run, body, args)
    check_for_run(run, body["command"], args, body.get("confirm"))
    try:
        channel.run_key(run.id)
    except channel.NoControlKey as e:
        raise ApiError(503, str(e)) from None
    cmd = OperatorCommand(id=cmd_id, run=run, name=body["command"], args=args, reason=reason.strip(),
                          user=request.user, sender=request.user.get_username())
    try:  # recorded first: a replica's sync that reads the stream entry finds this record, never a "CLI" command
        with transaction.atomic():
            cmd.save(force_insert=True)
    except IntegrityError:  # the same id came twice at once: answered as a retry of the one recorded
        return _retry(OperatorCommand.objects.get(pk=cmd_id), run, body, args)
    return _deliver(cmd, 202)


def _deliver(cmd: OperatorCommand, status: int) -> JsonResponse:
    """Put a recorded command on the stream; if that fails, the record says it was not sent (and why)."""
    try:
        channel.send(cmd)
    except Exception as e:  # Redis away: nothing was sent, and the audit trail says so (the same id may send it)
        why = f"could not reach the run's control stream: {type(e).__name__}"
        cmd.status, cmd.detail = OperatorCommand.UNSENT, f"not sent: {why}"
        OperatorCommand.objects.filter(pk=cmd.pk, status="sent", sent_entry="").update(
            status=cmd.status, detail=cmd.detail, updated_at=timezone.now())
        raise ApiError(503, why, command=cmd.as_json()) from None
    OperatorCommand.objects.filter(pk=cmd.pk).update(sent_entry=cmd.sent_entry)
    return JsonResponse(cmd.as_json(), status=status)


def _retry(existing: OperatorCommand, run: Run, body: dict, args: dict) -> JsonResponse:
    """The same id again: never a second command. An unanswered one is put on the stream again (the trainer
    applies an id once) while it is within the trainer's window; an answered one is returned as it is."""
    if existing.run_id != run.id or existing.name != body["command"] or existing.args != args:
        raise ApiError(409, "this id belongs to a different command")
    if existing.status == OperatorCommand.UNSENT:  # never on the stream: this is its first send
        existing.status, existing.detail, existing.created_at = "sent", "", timezone.now()
        if not OperatorCommand.objects.filter(pk=existing.pk, status=OperatorCommand.UNSENT).update(
                status="sent", detail="", created_at=existing.created_at):
            raise ApiError(409, "this command is being sent by another request; look at the list")
        return _deliver(existing, 202)
    if existing.undone_at is not None:
        raise ApiError(409, f"this command was undone ({existing.undone_detail or existing.undone_by}); "
                            "send it again as a new command", command=existing.as_json())
    if existing.final:
        return JsonResponse(existing.as_json(), status=200)
    age = (timezone.now() - existing.created_at).total_seconds()
    if age > contract.STALE_AFTER_S:  # the trainer refuses it as stale, or may no longer remember its id
        raise ApiError(409, f"this command was sent {age:.0f} s ago, more than the trainer's "
                            f"{contract.STALE_AFTER_S} s window; send it again as a new command",
                       command=existing.as_json())
    try:
        channel.send(existing)
    except Exception as e:
        raise ApiError(503, f"could not resend: {type(e).__name__}: {e}"[:300]) from None
    existing.sent_count += 1  # sent_entry stays the first send's: the acks of every send count (channel.follow)
    OperatorCommand.objects.filter(pk=existing.pk).update(sent_count=F("sent_count") + 1)
    return JsonResponse(existing.as_json(), status=202)


@api_requires("run.command")
@require_http_methods(["GET", "POST"])
@ratelimit(key="user_or_ip", rate="30/m", method="POST", block=True)
def commands(request, run_id: str):
    try:
        run = get_run(run_id)
        if request.method == "GET":
            channel.sync([run.id])
            recent = OperatorCommand.objects.filter(run=run).select_related("user__profile")[:200]
            return JsonResponse({"commands": [c.as_json() for c in recent]})
        return _send_new(request, run, _parse(request))
    except ApiError as e:
        return _error(e.status, e.message, **e.extra)


@api_requires("run.command")
@require_GET
def operate(request):
    """The panel's state (what the WebSocket pushes), for clients that cannot hold a socket open."""
    return JsonResponse(tables.with_html(snapshot.build()))


@api_requires("run.command")
@api_view
def plan_preview(request, run_id: str):
    """The schedule and ETA a set-token-budget would produce, before it is sent."""
    run = get_run(run_id)
    tokens = int_param(request, "tokens", None, lo=1, hi=2**62)
    if tokens is None:
        raise ApiError(400, "parameter 'tokens' is required", parameter="tokens")
    values = snapshot.latest_values([run.id])[run.id]
    beat = snapshot.heartbeats([run.id])[run.id] or run.heartbeat or {}
    current = snapshot.current_plan(run, values.get(contract.M_TOTAL_STEPS))
    try:
        out = plan.preview(run.config or {}, current, step=int(beat.get("step") or run.last_step or 0),
                           tokens_seen=int(beat.get("tokens") or 0), new_tokens=tokens,
                           multiplier=values.get(contract.M_LR_MULT) or 1.0, steps_per_s=beat.get("steps_per_s"))
    except plan.PlanError as e:
        raise ApiError(400, str(e), parameter="tokens") from None
    return JsonResponse(out)


@public
@api_view
def interventions(request, run_id: str):
    """Public: the run's applied (and undone) commands with their reasons; names only where operators opted in."""
    run = get_run(run_id)
    rows = outcomes.applied(run.id)  # nobody may be watching the operator panel: as they stand now, never written
    return JsonResponse({"run_id": run.id, "interventions": [c.as_json(public=True) for c in rows]})
