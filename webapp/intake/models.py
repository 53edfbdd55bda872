"""Every run's owner: the trainer that published it straight into Redis, the user whose write token published it
over HTTP, or an importer's --owner (or nobody)."""

from __future__ import annotations

from typing import Callable, Iterable

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.utils import timezone


class RunClaim(models.Model):
    """A token's scope says which run ids it may name; the claim says whose the run is. Without it a member could
    scope a token to someone else's run (or the lab trainer's) and rewind or fail it.

    Kinds: TRAINER (claimed by ingest when it first sees a run a producer wrote straight into Redis; user None),
    PUBLISHER (claimed by the first write token that published to a new id), IMPORT (import_wandb,
    import_tensorboard: their --owner, or nobody). Only a claim's user may write the run through the intake;
    `user` None is nobody's, never claimable again (a deleted user's runs become nobody's too)."""

    TRAINER, PUBLISHER, IMPORT = "trainer", "publisher", "import"
    KINDS = [(k, k) for k in (TRAINER, PUBLISHER, IMPORT)]

    run_id = models.CharField(primary_key=True, max_length=64)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                             related_name="run_claims")
    kind = models.CharField(max_length=12, choices=KINDS, default=PUBLISHER)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.run_id} ({self.user or self.kind})"

    @classmethod
    def for_trainer(cls, run_id: str) -> None:
        """Ingest's first sight of a run: the trainer's, unless someone (the intake, an import) claimed it first."""
        cls.objects.get_or_create(run_id=run_id, defaults={"kind": cls.TRAINER, "user": None})

    @classmethod
    def may_write(cls, run_id: str, user, published_elsewhere: Callable[[], bool]) -> bool:
        """True if `user` owns the run, claiming it now if it is new. Every run ingest has seen has a claim; one a
        producer wrote into Redis that ingest has not claimed yet (`published_elsewhere()`) is not new either."""
        claim = cls.objects.filter(pk=run_id).first()
        if claim is None:
            if published_elsewhere():
                return False
            try:
                with transaction.atomic():
                    claim = cls.objects.create(run_id=run_id, user=user, kind=cls.PUBLISHER)
            except IntegrityError:  # claimed by a concurrent request a moment ago
                claim = cls.objects.get(pk=run_id)
        return claim.user_id is not None and claim.user_id == user.pk

    @classmethod
    def refusal(cls, user, scope: Iterable[str]) -> str | None:
        """Why a write token of `user` may not be scoped to these entries (exact run ids someone else owns), or
        None. Prefixes (`alice-*`) may cover others' runs: the intake refuses those runs one by one."""
        ids = [e for e in scope if not e.endswith("*")]
        claims = {c.run_id: c for c in cls.objects.filter(pk__in=ids)}
        for run_id in ids:
            claim = claims.get(run_id)
            if claim is None or claim.user_id is not None and claim.user_id == user.pk:
                continue  # the user's run, or a new id the token's first write claims
            if claim.kind == cls.TRAINER:
                return f"{run_id} is the trainer's run: no write token may publish to it"
            return f"{run_id} belongs to another user" if claim.user_id else f"{run_id} is nobody's to write"
        return None

