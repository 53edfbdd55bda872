from django.apps import AppConfig


class LiveConfig(AppConfig):
    """WebSocket push of live run updates (Channels consumer, per-process fan-out hub, routing)."""

    name = "webapp.live"
    label = "live"

    def ready(self):
        from webapp.live.metrics import collect
        from webapp.live.pipeline import IngestProcess
        from webapp.live.relay import add_page_data
        from webapp.metrics import changes
        from webapp.ops import exposition
        from webapp.runs import pagedata

        changes.ingest_process = IngestProcess  # what `manage.py ingest` runs: ingest wired to live pushes

        if collect not in exposition.collectors:  # ready() may run twice
            exposition.collectors.append(collect)
        if add_page_data not in pagedata.PAGE_EXTRAS:
            pagedata.PAGE_EXTRAS.append(add_page_data)
