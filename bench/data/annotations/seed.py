"""The annotations bench's data set (bench/annotations.py; measures nothing): runs with a synthetic loss curve, one of
them carrying many annotations, and signed-in members to post more. Needs Django set up."""

from __future__ import annotations

from stack import load_series

STEPS = 2000


def world(runs: list[str], many: int, members: int) -> list[str]:
    """Runs with a loss curve (`runs[0]` gets `many` annotations), and signed-in members' session keys."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from observatory import contract
    from webapp.accounts import roles
    from webapp.annotations.models import Annotation
    from webapp.runs.models import Run

    for run_id in runs:
        run = Run.objects.create(id=run_id, name="annotations bench", last_step=STEPS - 1, state="training")
        load_series(run, contract.M_LOSS, ((s, 4.0 / (1 + s / 300)) for s in range(STEPS)))
    author = get_user_model().objects.create_user("bench-author", "a@example.org", "x" * 16)
    Annotation.objects.bulk_create(
        Annotation(run_id=runs[0], author=author, title=f"note {i}", body="b", body_html="<p>b</p>",
                   step_start=(i * 7) % STEPS, step_end=min(STEPS - 1, (i * 7) % STEPS + (i % 2) * 15))
        for i in range(many))
    sessions = []
    for i in range(members):
        user = get_user_model().objects.create_user(f"bench-member-{i}", f"m{i}@example.org", "x" * 16)
        roles.grant(user, "member")
        client = Client()
        client.force_login(user)
        sessions.append(client.cookies["sessionid"].value)
    return sessions
