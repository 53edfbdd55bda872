"""A report: a member's Markdown write-up with embedded blocks, drafted then published, edited with history kept,
moderated like an annotation (it reuses annotations' Post: author, body, moderation, soft delete)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from webapp.annotations.models import Post, PostQuerySet, _iso, author_json


class ReportQuerySet(PostQuerySet):
    def for_viewer(self, user, moderator: bool):
        """Annotations' visibility rule, and drafts only for their author (a moderator moderates what is published)."""
        qs = super().for_viewer(user, moderator)
        if user is not None and user.is_authenticated:
            return qs.filter(Q(published_at__isnull=False) | Q(author=user))
        return qs.filter(published_at__isnull=False)

    def listed(self):
        """What /reports/ and the API list: published, not hidden, not deleted, newest first."""
        return self.public().filter(published_at__isnull=False).order_by("-published_at", "-id")


class Report(Post):
    """`parts`: the body split into Markdown (rendered and sanitised on write) and validated blocks (blocks.py)."""

    title = models.CharField(max_length=200)
    parts = models.JSONField(default=list, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)  # None: a draft, seen by its author only
    runs = models.ManyToManyField("runs.Run", related_name="reports", blank=True)  # the runs its blocks cite

    objects = ReportQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [
            # serves: /reports/ and GET /api/reports/, published newest first
            models.Index(fields=["published_at", "id"], name="report_published"),
        ]

    def __str__(self):
        return f"report #{self.id} {self.title[:40]}"

    @property
    def draft(self) -> bool:
        return self.published_at is None

    def as_json(self, moderator_view: bool = False) -> dict:
        out = self._post_json({}, moderator_view)
        out.pop("reactions")
        out.update(title=self.title, parts=self.parts, published_at=_iso(self.published_at), draft=self.draft,
                   runs=sorted(r.id for r in self.runs.all()), url=f"/reports/{self.id}/")
        return out

    def summary_json(self) -> dict:
        return {"id": self.id, "title": self.title, "author": author_json(self.author),
                "published_at": _iso(self.published_at), "edited_at": _iso(self.edited_at),
                "url": f"/reports/{self.id}/"}


class ReportRevision(models.Model):
    """A version an edit replaced: the edit history, oldest first (the report_id foreign-key index serves it)."""

    report = models.ForeignKey(Report, on_delete=models.CASCADE, related_name="revisions")
    editor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    written_at = models.DateTimeField()
    replaced_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    @classmethod
    def of(cls, report: Report, editor) -> "ReportRevision":
        return cls(report=report, editor=editor, title=report.title, body=report.body,
                   written_at=report.edited_at or report.created_at)

    def as_json(self) -> dict:
        return {"id": self.id, "title": self.title, "body": self.body, "written_at": _iso(self.written_at),
                "replaced_at": _iso(self.replaced_at)}
