"""The anomaly log in the Django admin: notification routes (where critical anomalies go), deliveries, anomalies."""

from django.contrib import admin

from webapp.anomalies.models import Anomaly, Delivery, DetectorState, NotificationRoute


@admin.register(NotificationRoute)
class NotificationRouteAdmin(admin.ModelAdmin):
    """Where critical anomalies go: staff add a webhook URL or email addresses here."""

    list_display = ("name", "channel", "target", "min_severity", "kinds", "run_prefix", "enabled")
    list_filter = ("channel", "enabled", "min_severity")


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("created_at", "anomaly", "route", "severity", "status", "attempts", "last_error")
    list_filter = ("status", "route")
    readonly_fields = [f.name for f in Delivery._meta.fields]


@admin.register(Anomaly)
class AnomalyAdmin(admin.ModelAdmin):
    list_display = ("run", "kind", "metric", "start_step", "end_step", "severity", "status", "superseded")
    list_filter = ("kind", "severity", "status", "superseded")
    search_fields = ("run__id", "metric", "explanation")
    raw_id_fields = ("run", "acknowledged_by", "resolved_by")


@admin.register(DetectorState)
class DetectorStateAdmin(admin.ModelAdmin):
    list_display = ("run", "last_step", "version", "updated_at")
    readonly_fields = ("run", "snapshot", "last_step", "version", "updated_at")
