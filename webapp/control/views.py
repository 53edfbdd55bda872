"""Pages: the operator panel (/operate/, operators only) and a run's public command log (/runs/<id>/log/), which
reads the commands' outcomes as they stand without writing (webapp.control.outcomes)."""

from __future__ import annotations

import dataclasses

from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from observatory import contract
from webapp.accounts.permissions import public, requires
from webapp.control import outcomes, snapshot, tables
from webapp.runs.models import Run


def command_specs() -> list[dict]:
    """The contract's command schema as the panel builds its forms from it (no hand-written per-command form)."""
    return [{"name": s.name, "summary": s.summary, "destructive": s.destructive, "positional": list(s.positional),
             "args": [{**dataclasses.asdict(a), "choices": list(a.choices), "only_for": list(a.only_for)}
                      for a in s.args]}
            for s in contract.COMMAND_SPECS.values()]


@requires("run.command")
@require_GET
def operate(request):
    body = snapshot.build()
    return render(request, "control/operate.html", {**tables.rows(body), "page": {
        "specs": command_specs(), "ws_path": "/ws/operate/", "snapshot_url": "/api/operate/",
        "select": request.GET.get("run", ""), "metrics": {"loss": contract.M_LOSS, "lr": contract.M_LR},
        "snapshot": body,
    }})


@public
@require_GET
def command_log(request, run_id: str):
    run = get_object_or_404(Run, pk=run_id)
    commands = [{**c.as_json(public=True), "when": c.created_at.strftime("%Y-%m-%d %H:%M:%S")}
                for c in outcomes.log(run.id)]
    return render(request, "control/log.html", {"run": run, "commands": commands})
