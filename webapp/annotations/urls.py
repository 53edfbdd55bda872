from django.urls import path

from webapp.annotations import api, api_thread, views

urlpatterns = [
    path("annotations/<int:pk>/thread/", views.thread, name="annotation-thread"),
    path("api/runs/<str:run_id>/annotations/", api.run_annotations, name="api-run-annotations"),
    path("api/annotations/<int:pk>/", api.annotation_detail, name="api-annotation"),
    path("api/annotations/<int:pk>/revisions/", api.revisions, {"target": "annotation"},
         name="api-annotation-revisions"),
    path("api/annotations/<int:pk>/replies/", api_thread.replies, name="api-annotation-replies"),
    path("api/annotations/<int:pk>/reactions/", api_thread.react, {"target": "annotation"},
         name="api-annotation-reactions"),
    path("api/annotations/<int:pk>/moderation/", api_thread.moderate, {"target": "annotation"},
         name="api-annotation-moderation"),
    path("api/replies/<int:pk>/", api_thread.reply_detail, name="api-reply"),
    path("api/replies/<int:pk>/revisions/", api.revisions, {"target": "reply"}, name="api-reply-revisions"),
    path("api/replies/<int:pk>/reactions/", api_thread.react, {"target": "reply"}, name="api-reply-reactions"),
    path("api/replies/<int:pk>/moderation/", api_thread.moderate, {"target": "reply"}, name="api-reply-moderation"),
]
