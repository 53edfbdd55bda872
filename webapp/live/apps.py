from django.apps import AppConfig


class LiveConfig(AppConfig):
    """WebSocket push of live run updates (Channels consumer, per-process fan-out hub, routing)."""

    name = "webapp.live"
    label = "live"

    def ready(self):
        from webapp.live.metrics import collect, live_health
        from webapp.live.pipeline import IngestProcess
        from webapp.live.relay import add_page_data
        from webapp.metrics import changes
        from webapp.ops import exposition
        from webapp.live.push import send_frame
        from webapp.runs import extensions

        changes.ingest_process = IngestProcess  # what `manage.py ingest` runs: ingest wired to live pushes

        if collect not in exposition.collectors:  # ready() may run twice
            exposition.collectors.append(collect)
        if live_health not in exposition.health_checks:
            exposition.health_checks.append(live_health)
        extensions.add_page_data(add_page_data)
        extensions.add_script("js/live.js", order=10)
        extensions.set_sender(send_frame)  # earlier apps' frames (annotations) go out through live
