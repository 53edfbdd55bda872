"""Control-test fixtures: signed-in operator and member clients, a run with a config and a manifest, and a fake
trainer that answers commands on the ack stream the way training/control.py does."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client

from observatory import contract
from webapp.runs.models import Run

from ..accounts.conftest import make_user

RUN = "ctl-run"
CONFIG = {"train": {"batch_size": 4, "lr": 0.01, "token_budget": 1_000_000, "allow_faults": False,
                    "warmup_ratio": 0.1, "min_lr_ratio": 0.1, "schedule": "linear"},
          "model": {"seq_len": 32}}
MANIFEST = {"domains": [{"name": "code"}, {"name": "prose"}],
            "stages": [{"name": "pretrain"}, {"name": "midtrain"}]}


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    cache.clear()
    yield


@pytest.fixture
def run(db, redis_client):
    return Run.objects.create(id=RUN, name=RUN, config=CONFIG, manifest=MANIFEST, last_step=40)


@pytest.fixture
def operator(db):
    c = Client()
    c.user = make_user("olga", "operator")
    c.force_login(c.user)
    return c


@pytest.fixture
def member(db):
    c = Client()
    c.force_login(make_user("mike", "member"))
    return c


class FakeTrainer:
    """Reads what the web put on the control stream and acks it as the trainer would."""

    def __init__(self, client, run_id=RUN):
        self.r, self.run_id = client, run_id

    def sent(self) -> list[dict]:
        return [{k.decode(): v.decode() for k, v in f.items()}
                for _, f in self.r.xrange(contract.control_stream(self.run_id))]

    def ack(self, cmd_id: str, status: str, detail: str = "", step: int | None = None) -> None:
        self.r.xadd(contract.ack_stream(self.run_id), contract.ack_fields(cmd_id, status, detail, step))


@pytest.fixture
def fake_trainer(redis_client):
    return FakeTrainer(redis_client)
