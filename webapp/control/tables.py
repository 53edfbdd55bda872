"""The operator panel's two tables (its runs, every run's commands) as HTML rendered from a snapshot
(snapshot.build()): the page arrives with them, and each snapshot the panel receives (the /ws/operate/ frame, or
/api/operate/ while the socket is down) carries them again under "html", which static/js/operate.js puts in place.
The text is written here the way the panel's script wrote it (en-US numbers, UTC times, durations as the run pages
write them); user text (reasons, trainer details, names) goes through the template's auto-escaping."""

from __future__ import annotations

import datetime as dt
import math

from django.template.loader import render_to_string

from observatory import contract
from webapp.runs.pagedata import duration

OUTCOME_WORDS = {"timeout": "no answer", "unsent": "not sent"}
RETRIED = ("timeout", "unsent")  # the outcomes a command can be sent again from (same id, within the window)


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def js(x) -> str:
    """A value as JavaScript's String() writes it (1.0 -> "1", True -> "true")."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if x is None:
        return "null"
    if isinstance(x, float) and math.isfinite(x) and x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    return str(x)


def num(x) -> str:
    """A count with thousands separators (en-US), "–" when there is none."""
    if x is None or x == "":
        return "–"
    x = float(x)
    return f"{int(x):,}" if x.is_integer() else f"{round(x, 3):,}"


def sig(x, d: int = 3) -> str:
    """`d` significant digits, trailing zeros dropped; "–" for anything but a number."""
    return js(float(f"{x:.{d}g}")) if _is_num(x) and math.isfinite(x) else "–"


def utc(iso: str | None) -> str:
    if not iso:
        return "–"
    return dt.datetime.fromisoformat(iso).astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _run(r: dict) -> dict:
    mix = r.get("mixture") or {}
    weights = ", ".join(f"{d} {sig(w, 2)}" for d, w in (mix.get("weights") or {}).items())
    ckpts = r.get("checkpoints") or []
    return {"id": r["id"], "name": r["name"], "state": r["state"], "health": r["health"], "step": num(r.get("step")),
            "tokens": f"{num(r.get('tokens'))} / {num(r.get('token_budget'))}", "eta": duration(r.get("eta_s")),
            "mfu": "–" if r.get("mfu") is None else f"{100 * r['mfu']:.1f} %", "hb_t": js(r.get("heartbeat_t") or ""),
            "lrm": sig(r.get("lr_multiplier")),
            "mix": f"{mix['stage_name']}: {weights}" if mix.get("stage_name") else weights or "–",
            "ckpt": ", ".join(js(c["step"]) for c in ckpts[-3:]) or "–", "ckpt_count": len(ckpts)}


def _arg_text(args: dict | None) -> str:
    return " ".join(f"{k}=" + (",".join(f"{a}:{sig(b)}" for a, b in v.items()) if isinstance(v, dict) else js(v))
                    for k, v in (args or {}).items())


def _command(c: dict, now: dt.datetime) -> dict:
    detail = " — ".join(x for x in (c.get("detail"), c.get("undone_detail")) if x)
    sent = c.get("sent_count") or 0
    # past the trainer's window an id may be forgotten (or is refused as stale): that is a new command, not a retry
    late = (now - dt.datetime.fromisoformat(c["created_at"])).total_seconds() >= contract.STALE_AFTER_S
    return {"id": c["id"], "run": c["run"], "sent": utc(c["created_at"]), "command": c["command"],
            "args": _arg_text(c.get("args")), "reason": c["reason"], "user": c.get("user") or "–",
            "outcome": c["outcome"], "outcome_text": OUTCOME_WORDS.get(c["outcome"], c["outcome"]),
            "detail": (detail or "–") + (f" (sent {sent}×)" if sent > 1 else ""),
            "retry": c["outcome"] in RETRIED and not late}


def rows(body: dict) -> dict:
    now = dt.datetime.now(dt.timezone.utc)
    return {"runs": [_run(r) for r in body.get("runs", [])],
            "commands": [_command(c, now) for c in body.get("commands", [])]}


def render(body: dict) -> dict:
    """{"runs": the runs table's rows, "commands": the commands table's rows}, as HTML."""
    ctx = rows(body)
    return {"runs": render_to_string("control/_op_runs.html", ctx),
            "commands": render_to_string("control/_op_commands.html", ctx)}


def with_html(body: dict) -> dict:
    return {**body, "html": render(body)}
