"""Which user may write a run through the intake: the first whose token published to it."""

from __future__ import annotations

from typing import Callable

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.utils import timezone


class RunClaim(models.Model):
    """A token's scope says which run ids it may name; the claim says whose the run is. Without it a member could
    scope a token to someone else's run (or the lab trainer's) and rewind or fail it.

    `user` None: nobody's. Importers (import_wandb, import_tensorboard) claim every run they write, for their
    --owner or for nobody, so no write token can append to an imported run it does not own; a deleted user's
    runs become nobody's too (never claimable again)."""

    run_id = models.CharField(primary_key=True, max_length=64)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                             related_name="run_claims")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.run_id} ({self.user})"

    @classmethod
    def may_write(cls, run_id: str, user, published_elsewhere: Callable[[], bool]) -> bool:
        """True if `user` owns the run, claiming it now if it is new. A run some other producer (the trainer,
        a Redis client) already published is nobody's to claim: `published_elsewhere()` says so."""
        claim = cls.objects.filter(pk=run_id).first()
        if claim is None:
            if published_elsewhere():
                return False
            try:
                with transaction.atomic():
                    claim = cls.objects.create(run_id=run_id, user=user)
            except IntegrityError:  # claimed by a concurrent request a moment ago
                claim = cls.objects.get(pk=run_id)
        return claim.user_id is not None and claim.user_id == user.pk
