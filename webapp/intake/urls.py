from django.urls import path

from webapp.intake import views

urlpatterns = [
    path("api/runs/<str:run_id>/telemetry/", views.telemetry, name="api-run-telemetry"),
    path("accounts/tokens/", views.token_create, name="account-token-create"),
]
