"""Top-level URLs: pages and the public JSON API (WebSocket routes live in webapp.live.routing)."""

from django.contrib import admin
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path
from django.views.decorators.http import require_GET

from webapp.accounts.permissions import public


@public
@require_GET
def favicon(request):
    """Browsers ask for /favicon.ico when a page names no icon (the admin's pages name none)."""
    return redirect(static("favicon.ico"))


urlpatterns = [
    path("", include("webapp.accounts.urls")),
    path("", include("webapp.intake.urls")),
    path("", include("webapp.runs.urls")),
    path("", include("webapp.metrics.urls")),
    path("", include("webapp.anomalies.urls")),
    path("", include("webapp.experiments.urls")),
    path("", include("webapp.annotations.urls")),
    path("", include("webapp.control.urls")),
    path("", include("webapp.live.urls")),
    path("", include("webapp.ops.urls")),
    path("", include("webapp.reports.urls")),
    path("", include("webapp.publicapi.urls")),
    path("", include("webapp.front.urls")),
    path("admin/", admin.site.urls),
    path("favicon.ico", favicon),
]
