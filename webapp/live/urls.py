from django.urls import path

from webapp.live import views

urlpatterns = [
    # nchan's nchan_authorize_request (deploy/push.conf): may a socket subscribe to this run's live channels?
    path("live/authorize/<str:run_id>/", views.authorize, name="live-authorize"),
]
