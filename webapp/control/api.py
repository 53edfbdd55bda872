"""JSON API for operator commands: send one (operators only, signed, idempotent by id) and follow its life."""

from __future__ import annotations

import json
import re
import uuid

from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_http_methods
from django_ratelimit.decorators import ratelimit

from observatory import contract
from webapp.accounts.permissions import api_requires
from webapp.control import channel
from webapp.control.models import OperatorCommand
from webapp.runs.models import Run

COMMAND_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{8,200}$")
MAX_BODY_BYTES = 16 * 1024


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


@api_requires("run.command")
@require_http_methods(["GET", "POST"])
@ratelimit(key="user_or_ip", rate="30/m", method="POST", block=True)
def commands(request, run_id: str):
    run = get_object_or_404(Run, pk=run_id)
    if request.method == "GET":
        recent = list(OperatorCommand.objects.filter(run=run).select_related("user")[:100])
        channel.refresh(recent)
        return JsonResponse({"commands": [c.as_json() for c in recent]})
    if len(request.body) > MAX_BODY_BYTES:
        return _error(413, f"body larger than {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        return _error(400, "body must be a JSON object")
    if not isinstance(body, dict):
        return _error(400, "body must be a JSON object")
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 1000:
        return _error(400, "reason is required (1-1000 characters): it goes into the public audit trail")
    cmd_id = body.get("id") or f"web-{uuid.uuid4().hex}"
    if not isinstance(cmd_id, str) or not COMMAND_ID_RE.match(cmd_id):
        return _error(400, "id must be 8-200 characters of letters, digits and _.:-")
    try:
        args = contract.validate_command(body.get("command"), body.get("args") or {})
    except contract.CommandError as e:
        return _error(400, str(e))
    existing = OperatorCommand.objects.filter(pk=cmd_id).first()
    if existing is not None:  # a retry: the same id is never sent twice
        if existing.run_id != run.id or existing.name != body["command"]:
            return _error(409, "this id belongs to a different command")
        return JsonResponse(existing.as_json(), status=200)
    cmd = OperatorCommand(id=cmd_id, run=run, name=body["command"], args=args, reason=reason.strip(),
                          user=request.user)
    try:
        channel.send(cmd)
    except channel.NoControlKey as e:
        return _error(503, str(e))
    cmd.save()
    return JsonResponse(cmd.as_json(), status=202)
