from django.apps import AppConfig


class LiveConfig(AppConfig):
    """WebSocket push of live run updates (Channels consumer, per-process fan-out hub, routing)."""

    name = "webapp.live"
    label = "live"

    def ready(self):
        from webapp.live.metrics import collect
        from webapp.live.relay import add_page_data
        from webapp.ops import exposition
        from webapp.runs import pagedata

        if collect not in exposition.collectors:  # ready() may run twice
            exposition.collectors.append(collect)
        if add_page_data not in pagedata.PAGE_EXTRAS:
            pagedata.PAGE_EXTRAS.append(add_page_data)
