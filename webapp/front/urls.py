from django.urls import path

from webapp.front import previews, views

urlpatterns = [
    path("", views.front, name="front"),
    path("api/front/", views.front_api, name="api-front"),
    path("runs/<str:run_id>/preview.png", previews.run_image, name="preview-run"),
    path("annotations/<int:pk>/preview.png", previews.annotation_image, name="preview-annotation"),
]
