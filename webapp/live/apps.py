from django.apps import AppConfig


class LiveConfig(AppConfig):
    """WebSocket push of live run updates (Channels consumer, per-process fan-out hub, routing)."""

    name = "webapp.live"
    label = "live"

    def ready(self):
        from webapp.live.metrics import collect
        from webapp.ops import exposition

        if collect not in exposition.collectors:  # ready() may run twice
            exposition.collectors.append(collect)
