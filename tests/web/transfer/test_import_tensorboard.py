"""manage.py import_tensorboard on a real logdir written in the test by the tensorboard package's own writers:
tensorboard.summary.Writer (tensor scalars, as tf.summary v2 writes them) and its EventFileWriter with legacy
`simple_value` scalars (as torch's SummaryWriter and tensorboardX write them). Every scalar is read back through
the public API, exactly as TensorBoard stored it (float32), wall times included."""

from __future__ import annotations

import io
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from observatory import contract
from webapp.transfer import tb_import
from webapp.metrics.models import Point, Series
from webapp.runs.models import Run, RunEvent

from ..servers import ROOT

pytestmark = pytest.mark.django_db

STEPS = 1200
T0 = 1_700_000_000.123456
SPECIAL = {100: math.nan, 200: math.inf, 300: -math.inf}  # steps of train/loss holding non-finite values


def _wall(step: int, k: int = 0) -> float:
    return T0 + step * 0.731 + k * 1e-6


def _v2_writer(path, steps, tags, tensor=True):
    """Write scalars {tag: [(step, value)]} with tensorboard.summary.Writer (tensor=True) or as legacy simple_value
    summaries through the same package's EventFileWriter. Returns {tag: {step: (float32 value, wall time)}}."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary import Writer
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    os.makedirs(path, exist_ok=True)
    want: dict[str, dict[int, tuple[float, float]]] = {t: {} for t in tags}
    if tensor:
        w = Writer(str(path))
        for step in steps:
            for k, (tag, fn) in enumerate(tags.items()):
                v = fn(step)
                if v is None:
                    continue
                w.add_scalar(tag, v, step, wall_time=_wall(step, k))
                want[tag][step] = (float(np.float32(v)), _wall(step, k))
        w.close()
    else:
        w = EventFileWriter(str(path))
        for step in steps:
            for k, (tag, fn) in enumerate(tags.items()):
                v = fn(step)
                if v is None:
                    continue
                ev = event_pb2.Event(wall_time=_wall(step, k), step=step)
                ev.summary.value.add(tag=tag, simple_value=v)
                w.add_event(ev)
                want[tag][step] = (float(np.float32(v)), _wall(step, k))
        # a histogram (not a scalar): counted as skipped
        ev = event_pb2.Event(wall_time=_wall(0), step=0)
        ev.summary.value.add(tag="weights", histo=summary_pb2.HistogramProto(min=0, max=1, num=2, sum=1,
                                                                             bucket_limit=[1.0], bucket=[2.0]))
        w.add_event(ev)
        w.close()
    return want


def _append(run_dir, tmp, steps, tags, name="events.out.tfevents.9999999999.appended"):
    """A later event file of a run (named to sort after the writer's first, as a later start time does)."""
    want = _v2_writer(tmp, steps, tags)
    (f,) = list(tmp.iterdir())
    shutil.move(str(f), str(run_dir / name))
    tmp.rmdir()
    return want, run_dir / name


def _loss(step):
    if step in SPECIAL:
        return SPECIAL[step]
    return 5.0 / (step + 1) + 1e-3 * math.sin(step)  # not representable in float32: stored rounded


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tb") / "mnist"
    rng = np.random.default_rng(7)
    noise = rng.standard_normal(STEPS) * 1e3
    want = {
        # tensor scalars (v2), nested tags, NaN/±Inf, a sparse tag, a renamed tag
        "exp1": _v2_writer(root / "exp1", range(STEPS), {
            "train/loss": _loss,
            "optim/learning_rate": lambda s: 3e-4 * min(1.0, s / 100),
            "eval loss": lambda s: 2.0 - s / 1e4 if s % 100 == 0 else None,
        }),
        # legacy simple_value scalars in a nested directory with a space in its name
        "exp2/seed 1": _v2_writer(root / "exp2" / "seed 1", range(0, 2 * STEPS, 2), {
            "loss": lambda s: float(noise[s // 2]),
            "acc@1": lambda s: 1e-40 if s == 4 else (3.0e38 if s == 6 else s / (2 * STEPS)),
        }, tensor=False),
        # event files directly in the logdir: a run named after the logdir
        ".": _v2_writer(root, range(5), {"sys/tiny": lambda s: float(s)}),
    }
    return root, want


IDS = {"exp1": "tb-exp1", "exp2/seed 1": "tb-exp2-seed-1", ".": "tb-mnist"}
NAMES = {"eval loss": "eval_loss", "acc@1": "acc_1"}


def _import(*args) -> str:
    out = io.StringIO()
    call_command("import_tensorboard", *map(str, args), stdout=out)
    return out.getvalue()


def _api(run_id, name):
    resp = Client().get(f"/api/runs/{run_id}/metrics/{name}/?points=20000")
    assert resp.status_code == 200, (run_id, name, resp.content[:300])
    body = resp.json()
    assert body["exact"]
    nonfinite = dict((s, k) for s, k in body["nonfinite"])
    got = {}
    for s, v in zip(body["steps"], body["values"]):
        got[s] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[nonfinite[s]] if v is None else v
    return got


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _check_all(want):
    for rel, tags in want.items():
        rid = IDS[rel]
        listed = {m["name"] for m in Client().get(f"/api/runs/{rid}/metrics/").json()["metrics"]}
        names = {NAMES.get(t, t) for t in tags}
        assert listed == names | {f"wall_time/{n}" for n in names}, rid
        for tag, points in tags.items():
            name = NAMES.get(tag, tag)
            got = _api(rid, name)
            assert sorted(got) == sorted(points), (rid, tag)
            bad = [(s, got[s], v) for s, (v, _) in points.items() if not _same(got[s], v)]
            assert not bad, (rid, tag, bad[:5])
            walls = _api(rid, f"wall_time/{name}")
            assert walls == {s: w for s, (_, w) in points.items()}, (rid, tag)


def test_every_scalar_of_every_run_imports_exactly_with_its_wall_times(logdir):
    root, want = logdir
    assert sum(len(p) for tags in want.values() for p in tags.values()) > 3 * STEPS
    text = _import(root)
    _check_all(want)
    exp1 = Run.objects.get(pk="tb-exp1")
    assert (exp1.name, exp1.source, exp1.state, exp1.last_step) == ("exp1", "tensorboard", "stopped", STEPS - 1)
    assert Run.objects.get(pk="tb-exp2-seed-1").name == "exp2/seed 1"
    assert Run.objects.get(pk="tb-mnist").name == "mnist"
    loss = _api("tb-exp1", "train/loss")
    assert math.isnan(loss[100]) and loss[200] == math.inf and loss[300] == -math.inf
    assert loss[7] != _loss(7) and loss[7] == float(np.float32(_loss(7)))  # float32, as TensorBoard keeps it
    acc = _api("tb-exp2-seed-1", "acc_1")
    assert acc[4] == float(np.float32(1e-40)) and acc[6] == float(np.float32(3.0e38))
    assert "renamed 'eval loss' -> 'eval_loss'" in text and "renamed 'acc@1' -> 'acc_1'" in text
    assert "tag 'weights'" in text and "not a scalar" in text
    assert "[1/3]" in text and "[3/3]" in text  # progress, run by run
    # the API's run detail serves the import like any run
    assert Client().get("/api/runs/tb-exp1/").json()["source"] == "tensorboard"


def test_a_second_import_changes_nothing_and_appended_events_import_alone(logdir, tmp_path):
    root = tmp_path / "mnist"
    shutil.copytree(logdir[0], root)
    _import(root)
    before = (Point.objects.count(), RunEvent.objects.count(),
              dict(Run.objects.values_list("id", "updated_at")), dict(Series.objects.values_list("id", "count")))
    text = _import(root)
    assert text.count(": up to date") == 3 and "writing" not in text
    after = (Point.objects.count(), RunEvent.objects.count(),
             dict(Run.objects.values_list("id", "updated_at")), dict(Series.objects.values_list("id", "count")))
    assert after == before

    # the run goes on: a new event file with 100 more steps of two tags, one rewritten step
    more, _ = _append(root / "exp1", tmp_path / "more", list(range(STEPS, STEPS + 100)) + [5], {
        "train/loss": lambda s: 0.5 if s == 5 else 1.0 / s, "optim/learning_rate": lambda s: 1e-4})
    text = _import(root)
    assert "tb-exp1: writing 400 new and 2 changed points" in text  # 2 tags x 100 steps x (value + wall time)
    assert text.count(": up to date") == 2
    assert Point.objects.count() == before[0] + 400
    loss = _api("tb-exp1", "train/loss")
    assert len(loss) == STEPS + 100 and loss[5] == 0.5 and loss[STEPS + 50] == float(np.float32(1.0 / (STEPS + 50)))
    assert _api("tb-exp1", "wall_time/train/loss")[STEPS + 50] == more["train/loss"][STEPS + 50][1]
    assert Run.objects.get(pk="tb-exp1").last_step == STEPS + 99


def test_run_ids_avoid_taken_ids_and_stay_the_same_on_reimport(tmp_path):
    root = tmp_path / "logs"
    for d in ("a b", "a-b", "x"):
        _v2_writer(root / d, range(3), {"loss": float})
    Run.objects.create(id="tb-x", name="a live run")
    _import(root)
    assert {r.id: r.name for r in Run.objects.filter(source="tensorboard")} == {
        "tb-a-b": "a b", "tb-a-b-2": "a-b", "tb-x-2": "x"}
    assert Run.objects.get(pk="tb-x").source == "stream" and not Series.objects.filter(run_id="tb-x").exists()
    text = _import(root)
    assert text.count(": up to date") == 3 and Run.objects.filter(source="tensorboard").count() == 3
    _import(root, "--run-prefix", "again.", "--no-wall-times")  # another prefix: another copy
    assert set(Run.objects.filter(source="tensorboard").values_list("id", flat=True)) >= {
        "again.a-b", "again.a-b-2", "again.x"}
    assert list(Series.objects.filter(run_id="again.x").values_list("name", flat=True)) == ["loss"]
    assert Series.objects.filter(run_id="tb-x-2", name="wall_time/loss").exists()


def test_tag_names_map_to_distinct_valid_metric_names():
    tags = ["loss", "a b", "a_b", "/x", "wall_time/loss", "é", "t" * 300, "acc@1", "-neg", "ok/name:1.0"]
    names = tb_import.metric_names(tags)
    assert names["loss"] == "loss" and names["ok/name:1.0"] == "ok/name:1.0" and names["acc@1"] == "acc_1"
    assert {names["a b"], names["a_b"]} == {"a_b", "a_b_2"} and names["/x"] == "_/x" and names["-neg"] == "_-neg"
    assert names["wall_time/loss"] == "wall_time/loss_2"  # "wall_time/loss" is the wall times of "loss"
    everything = set(names.values()) | {"wall_time/" + n for n in names.values()}
    assert len(everything) == 2 * len(tags)
    assert all(contract.METRIC_NAME_RE.match(n) for n in everything)
    assert tb_import.metric_names(reversed(tags)) == names  # the same whatever the order they were met in
    long_id = tb_import.base_run_id("tb-", "x" * 100, "/logs")
    assert len(long_id) == 64 and contract.RUN_ID_RE.match(long_id)
    assert tb_import.base_run_id("", ".hidden/run é", "/logs") == "hidden-run-"
    assert tb_import.base_run_id("tb-", ".", "/data/my logs") == "tb-my-logs"


def test_missing_and_empty_logdirs_are_refused(tmp_path):
    with pytest.raises(CommandError, match="no such directory"):
        _import(tmp_path / "nope")
    (tmp_path / "notes.txt").write_text("no events here")
    with pytest.raises(CommandError, match="no TensorBoard event files"):
        _import(tmp_path)
    with pytest.raises(CommandError, match="no such user"):
        _import(tmp_path, "--owner", "ghost")
    assert not Run.objects.exists()


def test_a_corrupt_file_fails_its_run_only_and_writes_none_of_it(tmp_path):
    root = tmp_path / "logs"
    _v2_writer(root / "good", range(50), {"loss": float})
    _v2_writer(root / "bad", range(50), {"loss": float})
    _import(root)
    stored = Point.objects.filter(series__run_id="tb-bad").count()
    # more steps in a new file of "bad", with a flipped byte in the middle: that run is not touched at all
    _, path = _append(root / "bad", tmp_path / "more", range(50, 100), {"loss": float})
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    _append(root / "good", tmp_path / "more", range(50, 60), {"loss": float})
    with pytest.raises(CommandError) as err:
        _import(root)
    assert "1 of 2 run(s) not imported" in str(err.value) and path.name in str(err.value)
    assert "corrupt" in str(err.value)
    assert Point.objects.filter(series__run_id="tb-bad").count() == stored  # nothing half-written
    assert Point.objects.filter(series__run_id="tb-good", series__name="loss").count() == 60  # the other run went in


def test_a_record_cut_off_at_the_end_is_skipped_and_said(tmp_path):
    root = tmp_path / "logs"
    _v2_writer(root / "live", range(20), {"loss": float})
    (path,) = list((root / "live").iterdir())
    path.write_bytes(path.read_bytes()[:-7])  # the writer was killed mid-record
    text = _import(root)
    assert "last record cut off" in text
    assert sorted(_api("tb-live", "loss")) == list(range(19))


def test_the_command_exits_2_with_the_message(tmp_path):
    env = {**os.environ, "OBS_DEBUG": "1", "OBS_DATA_DIR": str(tmp_path)}  # its own (empty) SQLite: no DB read
    env.pop("DATABASE_URL", None)
    p = subprocess.run([sys.executable, "manage.py", "import_tensorboard", str(tmp_path / "missing")], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "no such directory" in p.stderr


def test_a_run_prefix_gets_the_contracts_run_id_verdict(tmp_path, run_id_cases):
    for prefix in run_id_cases:
        if not prefix:
            continue  # no prefix: the ids are the directories' names alone
        with pytest.raises(CommandError) as e:  # a valid prefix gets as far as the (missing) log directory
            _import(tmp_path / "nope", f"--run-prefix={prefix}")
        refused = "--run-prefix" in str(e.value)
        assert refused == (not contract.RUN_ID_RE.match(prefix)) != ("no such directory" in str(e.value)), prefix
