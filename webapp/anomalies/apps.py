"""The anomalies app: its config registers the detection hook and timer with ingest (metrics.changes)."""

from django.apps import AppConfig


class AnomaliesConfig(AppConfig):
    """The anomaly log: observatory.anomalies' detectors run inside ingest on every stored point (and on a timer for
    stalls), anomalies stored per run with their triage, pushed live, and critical ones routed to webhooks/email."""

    name = "webapp.anomalies"
    label = "anomalies"
    verbose_name = "Anomaly log"

    def ready(self):
        from webapp.anomalies import lost
        from webapp.anomalies.detect import DETECTION
        from webapp.metrics import changes
        from webapp.runs import extensions

        extensions.add_header("anomalies/_run_link.html", order=10)
        extensions.add_script("js/anomalies.js", order=20)

        # ingest (live.LiveIngest) calls these; registered once per process even if ready() runs twice
        if DETECTION.committed not in changes.on_commit_hooks:
            changes.on_commit_hooks.append(DETECTION.committed)
        if lost.committed not in changes.on_commit_hooks:  # telemetry lost before ingest read it
            changes.on_commit_hooks.append(lost.committed)
        if DETECTION.tick not in changes.timers:
            changes.timers.append(DETECTION.tick)
