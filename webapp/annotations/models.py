"""Annotations on a run's step range, their replies, edit history and reactions, with moderation and soft delete."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from webapp.accounts.models import shown_name

# Tags an annotation may carry (the API refuses others): a short, shared vocabulary keeps filters useful.
TAGS = ("spike", "divergence", "data", "hardware", "optimizer", "eval", "question", "explained", "idea")
# Reaction kinds -> what the button says. One of each per user and post (a unique constraint).
REACTIONS = {"+1": "+1", "explains": "explains it", "same": "seen it too", "question": "unclear"}


# A revision or reaction belongs to exactly one annotation or one reply.
ONE_TARGET = (Q(annotation__isnull=False, reply__isnull=True) | Q(annotation__isnull=True, reply__isnull=False))


def _iso(t):
    return t.isoformat() if t else None


def author_json(user) -> dict | None:
    """Who wrote a post, as shown to everyone: the id (the page compares it with its viewer) and a display name."""
    if user is None:
        return None
    return {"id": user.pk, "name": shown_name(user)}


class PostQuerySet(models.QuerySet):
    def for_viewer(self, user, moderator: bool):
        """What a viewer may read: moderators everything (marked); authors their own hidden posts; the public
        what is neither hidden nor deleted."""
        if moderator:
            return self
        live = self.filter(deleted_at__isnull=True)
        if user is not None and user.is_authenticated:
            return live.filter(Q(hidden=False) | Q(author=user))
        return live.filter(hidden=False)

    def public(self):
        return self.filter(hidden=False, deleted_at__isnull=True)


class Post(models.Model):
    """What an annotation and a reply share: a Markdown body (and its sanitised HTML), moderation, soft delete."""

    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    body = models.TextField(blank=True)  # Markdown source, as written
    body_html = models.TextField(blank=True)  # rendered and sanitised once, on write (markdown.render)
    hidden = models.BooleanField(default=False)  # by a moderator: gone for the public, marked for moderators
    hidden_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    hidden_reason = models.CharField(max_length=500, blank=True)
    hidden_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)  # soft delete by the author
    created_at = models.DateTimeField(default=timezone.now)
    edited_at = models.DateTimeField(null=True, blank=True)

    objects = PostQuerySet.as_manager()

    class Meta:
        abstract = True

    @property
    def public(self) -> bool:
        return not self.hidden and self.deleted_at is None

    def hide(self, moderator, reason: str) -> None:
        self.hidden, self.hidden_by, self.hidden_reason, self.hidden_at = True, moderator, reason, timezone.now()

    def unhide(self, moderator, reason: str) -> None:
        # who restored it and why replaces who hid it: the last moderation decision is the one shown
        self.hidden, self.hidden_by, self.hidden_reason, self.hidden_at = False, moderator, reason, timezone.now()

    def _post_json(self, reactions: dict[str, int], moderator_view: bool) -> dict:
        out = {"id": self.id, "author": author_json(self.author), "body": self.body, "body_html": self.body_html,
               "created_at": _iso(self.created_at), "edited_at": _iso(self.edited_at),
               "reactions": reactions}
        if not self.public:  # only moderators and the author ever get a record that is not public
            out.update(hidden=self.hidden, hidden_reason=self.hidden_reason, deleted=self.deleted_at is not None)
            if moderator_view and self.hidden_by is not None:
                out["hidden_by"] = shown_name(self.hidden_by)
        return out


class Annotation(Post):
    """A note on a run's step range [step_start, step_end] (equal: one step, drawn as a marker), optionally about
    one metric (then drawn only on the charts of that series) and about one anomaly of the run."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="annotations")
    title = models.CharField(max_length=200)
    tags = models.JSONField(default=list, blank=True)  # a subset of TAGS
    metric = models.CharField(max_length=200, blank=True)  # a series name of the run, or "" for every chart
    step_start = models.BigIntegerField()
    step_end = models.BigIntegerField()
    # the anomaly of the log this note discusses or explains; its foreign-key index serves "notes on anomaly X"
    anomaly = models.ForeignKey("anomalies.Anomaly", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="annotations")

    class Meta:
        ordering = ["step_start", "id"]
        indexes = [
            # serves: a run's annotations in step order, filtered to a window (step_start <= end); the dashboard
            # and the Grafana export read exactly this
            models.Index(fields=["run", "step_start"], name="annotation_run_step"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(step_start__gte=0) & Q(step_end__gte=models.F("step_start")),
                                   name="annotation_step_range"),
        ]

    def __str__(self):
        return f"{self.run_id} #{self.id} [{self.step_start}, {self.step_end}] {self.title[:40]}"

    def as_json(self, reply_count: int = 0, reactions: dict | None = None, moderator_view: bool = False) -> dict:
        out = self._post_json(reactions or {}, moderator_view)
        out.update(run=self.run_id, title=self.title, tags=list(self.tags), metric=self.metric,
                   step_start=self.step_start, step_end=self.step_end, reply_count=reply_count,
                   anomaly=self.anomaly_id)
        return out


class Reply(Post):
    """One message in an annotation's thread."""

    annotation = models.ForeignKey(Annotation, on_delete=models.CASCADE, related_name="replies")

    class Meta:
        ordering = ["id"]
        indexes = [
            # serves: a thread in posting order, and the per-annotation reply counts of the run's list
            models.Index(fields=["annotation", "id"], name="reply_thread"),
        ]

    def __str__(self):
        return f"reply #{self.id} to #{self.annotation_id}"

    def as_json(self, reactions: dict | None = None, moderator_view: bool = False) -> dict:
        out = self._post_json(reactions or {}, moderator_view)
        out["annotation"] = self.annotation_id
        return out


class Revision(models.Model):
    """A version an edit replaced (of an annotation or of a reply): the edit history, oldest first."""

    annotation = models.ForeignKey(Annotation, null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="revisions")
    reply = models.ForeignKey(Reply, null=True, blank=True, on_delete=models.CASCADE, related_name="revisions")
    editor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    title = models.CharField(max_length=200, blank=True)  # annotations only
    tags = models.JSONField(default=list, blank=True)  # annotations only
    body = models.TextField(blank=True)
    body_html = models.TextField(blank=True)
    written_at = models.DateTimeField()  # when this version was written (created_at or the previous edited_at)
    replaced_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        # the history of one post: the annotation_id / reply_id foreign-key indexes serve it
        constraints = [
            models.CheckConstraint(condition=ONE_TARGET,
                                   name="revision_one_target"),
        ]

    @classmethod
    def of(cls, post: Post, editor) -> "Revision":
        """The revision that keeps `post` as it is now (call before changing it)."""
        rev = cls(editor=editor, body=post.body, body_html=post.body_html,
                  written_at=post.edited_at or post.created_at)
        if isinstance(post, Annotation):
            rev.annotation, rev.title, rev.tags = post, post.title, list(post.tags)
        else:
            rev.reply = post
        return rev

    def as_json(self) -> dict:
        out = {"id": self.id, "body": self.body, "body_html": self.body_html,
               "written_at": _iso(self.written_at), "replaced_at": _iso(self.replaced_at)}
        if self.annotation_id is not None:
            out.update(title=self.title, tags=list(self.tags))
        return out


class Reaction(models.Model):
    """One user's reaction of one kind to one annotation or reply."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    annotation = models.ForeignKey(Annotation, null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="reactions")
    reply = models.ForeignKey(Reply, null=True, blank=True, on_delete=models.CASCADE, related_name="reactions")
    kind = models.CharField(max_length=16, choices=[(k, v) for k, v in REACTIONS.items()])
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=ONE_TARGET,
                                   name="reaction_one_target"),
            # serve: "has this user reacted so?" and the per-post counts (annotation_id / reply_id lead them)
            models.UniqueConstraint(fields=["annotation", "user", "kind"], condition=Q(annotation__isnull=False),
                                    name="reaction_once_per_annotation"),
            models.UniqueConstraint(fields=["reply", "user", "kind"], condition=Q(reply__isnull=False),
                                    name="reaction_once_per_reply"),
        ]


def reaction_counts(field: str, ids) -> dict[int, dict[str, int]]:
    """{post id: {kind: count}} for annotations (field="annotation") or replies (field="reply")."""
    out: dict[int, dict[str, int]] = {}
    rows = (Reaction.objects.filter(**{f"{field}_id__in": list(ids)}).values(f"{field}_id", "kind")
            .annotate(n=models.Count("id")).values_list(f"{field}_id", "kind", "n"))
    for pid, kind, n in rows:
        out.setdefault(pid, {})[kind] = n
    return out
