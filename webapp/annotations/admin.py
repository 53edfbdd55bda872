from django.contrib import admin

from webapp.annotations.models import Annotation, Reaction, Reply, Revision


@admin.register(Annotation)
class AnnotationAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "title", "author", "step_start", "step_end", "hidden", "deleted_at", "created_at")
    list_filter = ("hidden",)
    search_fields = ("title", "body", "run__id")
    raw_id_fields = ("run", "author", "hidden_by")


@admin.register(Reply)
class ReplyAdmin(admin.ModelAdmin):
    list_display = ("id", "annotation", "author", "hidden", "deleted_at", "created_at")
    list_filter = ("hidden",)
    search_fields = ("body",)
    raw_id_fields = ("annotation", "author", "hidden_by")


admin.site.register(Revision)
admin.site.register(Reaction)
