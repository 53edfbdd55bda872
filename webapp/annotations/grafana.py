"""Grafana-shaped export of a run's public annotations (`GET /api/runs/<id>/annotations/?format=grafana`).

Grafana's annotation is {time, timeEnd, tags, text, dashboardUID, panelId, ...} with epoch milliseconds on the
time axis. Ours uses **training steps** as the time axis (time = step_start, timeEnd = step_end): a Grafana panel
whose x axis is the step (or a JSON-API/Infinity data source reading this URL) draws them where they belong.
`dashboardUID` is the run id; the metric a note is about (Grafana's "panel") is in `data.metric` because Grafana's
`panelId` is a number; `text` is the title and the Markdown body; `created`/`updated` are epoch milliseconds.
"""

from __future__ import annotations

from webapp.accounts.models import shown_name
from webapp.public import absolute


def _ms(t) -> int | None:
    return int(t.timestamp() * 1000) if t else None


def export(items, request) -> list[dict]:
    out = []
    for a in items:
        text = a.title if not a.body else f"{a.title}\n\n{a.body}"
        url = absolute(request, f"/runs/{a.run_id}/?annotation={a.id}")
        out.append({
            "id": a.id, "dashboardUID": a.run_id, "panelId": None,
            "time": a.step_start, "timeEnd": a.step_end, "tags": list(a.tags), "text": text,
            "login": shown_name(a.author),  # Grafana's author field: the display name, never the login name
            "created": _ms(a.created_at), "updated": _ms(a.edited_at or a.created_at),
            "data": {"run": a.run_id, "metric": a.metric or None, "title": a.title, "url": url,
                     "time_axis": "step"},
        })
    return out
