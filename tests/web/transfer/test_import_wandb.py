"""manage.py import_wandb on a real W&B offline run written by wandb itself (no network)."""

import glob
import io
import math
import os

import pytest
from django.core.management import CommandError, call_command

from observatory import contract
from webapp.metrics.models import Point
from webapp.transfer.wandb_file import read_run
from webapp.runs.models import Run

from ..servers import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory):
    wandb = pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("wandb")
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true",
           "WANDB_DIR": str(root), "WANDB_CONSOLE": "off"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        run = wandb.init(mode="offline", dir=str(root), project="obs-test", name="tiny run",
                         config={"lr": 0.003, "layers": 2, "optimizer": {"name": "adamw", "beta2": 0.95}},
                         settings=wandb.Settings(console="off"))
        for step in range(30):
            loss = math.nan if step == 17 else 5.0 / (step + 1)
            run.log({contract.M_LOSS: loss, contract.M_LR: 1e-3 * step, "eval loss": 1.0, "note": "text"},
                    step=step)
        run.summary["best_loss"] = 0.1875  # what a script records beside its history
        run.summary["best_step"] = 29
        run_id = run.id
        run.finish()
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    (path,) = glob.glob(str(root / "wandb" / "offline-run-*"))
    # finish() can return before W&B's service process has written the log out: the exit record comes last
    wait_for(lambda: read_run(path)["exit_code"] is not None, 60, "W&B to finish writing the offline run")
    return path, run_id


def _values(run_id, name):
    return list(Point.objects.filter(series__run_id=run_id, series__name=name).order_by("step")
                .values_list("step", "value", "special"))


def test_it_imports_an_offline_run_with_its_series_and_says_what_it_skipped(offline_run):
    path, wandb_id = offline_run
    out = io.StringIO()
    call_command("import_wandb", path, stdout=out)
    run = Run.objects.get(pk=f"wandb-{wandb_id}")
    assert (run.name, run.source, run.last_step) == ("tiny run", "wandb", 29)
    assert (run.state, run.health) == ("stopped", "ended")  # W&B wrote its exit record, code 0
    assert run.config["lr"] == 0.003
    loss = _values(run.id, contract.M_LOSS)
    assert [p[0] for p in loss] == list(range(30))
    assert loss[3][1] == pytest.approx(1.25)
    assert loss[17] == (17, None, 1)  # the NaN is kept, as NaN
    assert len(_values(run.id, "eval_loss")) == 30
    text = out.getvalue()
    assert "renamed 'eval loss' -> 'eval_loss'" in text
    assert "non-numeric values of 'note'" in text


def test_a_reimport_replaces_instead_of_doubling(offline_run):
    path, wandb_id = offline_run
    call_command("import_wandb", path, "--run-id", "imported", stdout=io.StringIO())
    call_command("import_wandb", path, "--run-id", "imported", stdout=io.StringIO())
    assert len(_values("imported", contract.M_LOSS)) == 30


def test_it_refuses_a_path_without_a_run(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import_wandb", str(tmp_path))


def test_it_refuses_to_overwrite_a_live_run(offline_run):
    Run.objects.create(id="live-one")
    with pytest.raises(CommandError, match="not imported from W&B"):
        call_command("import_wandb", offline_run[0], "--run-id", "live-one")


def test_the_summary_and_config_appear_on_the_run_page(offline_run, client):
    path, wandb_id = offline_run
    call_command("import_wandb", path, "--run-id", "summarised", stdout=io.StringIO())
    detail = client.get("/api/runs/summarised/").json()
    assert detail["summary"]["best_loss"] == 0.1875 and detail["summary"]["best_step"] == 29
    assert detail["summary"]["train/loss"] == pytest.approx(5.0 / 30)  # W&B's own: the last value logged
    assert not any(k.startswith("_") for k in detail["summary"]), "W&B's bookkeeping (_runtime...) is not shown"
    page = client.get("/runs/summarised/").content.decode()
    section = page.split('id="run-facts"')[1].split("</section>")[0]
    for text in ("best_loss", "0.1875", "best_step", "optimizer.name", "adamw", "optimizer.beta2", "0.95", "lr",
                 "0.003"):
        assert f">{text}<" in section, text
