"""What the importers (import_wandb, import_tensorboard) share: writing contract messages through apply_messages in
bounded chunks, and the claim every imported run gets, so that no HTTP write token can append to it unless its
user is the run's --owner (webapp.intake.models.RunClaim: user None = nobody's)."""

from __future__ import annotations

from typing import Iterable

from django.contrib.auth import get_user_model

from observatory import contract
from webapp.intake.models import RunClaim
from webapp.metrics.apply import apply_messages

APPLY_POINTS = 20_000  # points per apply_messages call: bounded memory, few block rewrites


def owner_user(username: str | None):
    """--owner's user, or None; ValueError naming the user if there is none."""
    if not username:
        return None
    try:
        return get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise ValueError(f"--owner {username!r}: no such user") from None


def claim_blocks(run_id: str, owner) -> str | None:
    """Why an import may not write `run_id` because of its claim (a trainer's or an HTTP publisher's run), else
    None."""
    claim = RunClaim.objects.filter(pk=run_id).select_related("user").first()
    if claim is not None and claim.kind == RunClaim.TRAINER:
        return f"run id {run_id!r} is a trainer's run"
    if claim is None or claim.user_id is None or (owner is not None and claim.user_id == owner.pk):
        return None
    return f"run id {run_id!r} is claimed by the HTTP publisher {claim.user.username!r}"


def claim(run_id: str, owner) -> None:
    """The imported run is `owner`'s (given) or stays whose it was (nobody's if new). Inside the import's atomic()."""
    existing = RunClaim.objects.select_for_update().filter(pk=run_id).first()
    if existing is None:
        RunClaim.objects.create(run_id=run_id, user=owner, kind=RunClaim.IMPORT)
    elif owner is not None and existing.user_id != owner.pk:
        existing.user = owner
        existing.save(update_fields=["user"])


def apply_chunked(messages: Iterable[contract.Message], source: str) -> None:
    """apply_messages over `messages` (any iterable, consumed lazily) in chunks of about APPLY_POINTS points.
    Call inside atomic()."""
    chunk, size = [], 0
    for msg in messages:
        chunk.append(("", msg))
        size += len(msg.data.get("values", ()))
        if size >= APPLY_POINTS:
            apply_messages(chunk, source=source)
            chunk, size = [], 0
    if chunk:
        apply_messages(chunk, source=source)
