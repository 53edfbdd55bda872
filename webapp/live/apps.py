from django.apps import AppConfig


class LiveConfig(AppConfig):
    """WebSocket push of live run updates (Channels consumer and routing)."""

    name = "webapp.live"
    label = "live"
