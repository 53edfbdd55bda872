"""The `observatory` distribution as a user gets it: the wheel built from pyproject.toml (offline, no build isolation),
installed with pip into a fresh virtualenv that has nothing else, then a plain training loop through
`observatory.client` puts a run on a live site (uvicorn + ingest), and the console scripts run."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from observatory import contract

from ..servers import ROOT, wait_ingested

STEPS = 300

# What a user writes: about twenty lines, the site and token from the environment (OBS_URL, OBS_TOKEN).
LOOP = '''
import json, math, sys
import observatory.client as obs

run_id, steps = sys.argv[1], int(sys.argv[2])
with obs.init(name="installed-client", run_id=run_id, config={"lr": 3e-4, "steps": steps}) as run:
    for step in range(steps):
        loss = 2.0 + 3.0 * math.exp(-step / 50)
        run.log({"train/loss": loss, "optim/learning_rate": 3e-4}, step=step)
    run.event("eval_done", {"accuracy": 0.5})
stats = run.stats()
try:
    obs.init(name="needs-redis", url="redis://127.0.0.1:1/0", finish_at_exit=False)
    redis_mode = "started"
except ModuleNotFoundError as e:
    redis_mode = str(e)
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"jax", "jaxlib", "django", "redis", "numpy"})
print(json.dumps({"stats": stats, "file": obs.__file__, "loaded": loaded, "redis_mode": redis_mode}))
'''


def _clean_env(**extra: str) -> dict:
    """No PYTHONPATH, no project settings: what a user's shell has."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"), **extra}


# What a build reads (the packaging config, the readme it names) and the packages it must leave out, so the test
# that the wheel holds neither the trainer nor the site can fail. Copying the whole checkout raced the other test
# workers: hypothesis writes and deletes temporary files under .hypothesis/ while the copy walks it.
_SOURCES = ("pyproject.toml", "docs/CLIENT.md", "observatory", "training", "webapp")


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n.startswith(".") or n in {"__pycache__", "build", "dist"} or n.endswith(".egg-info")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The wheel built from a copy of the checkout (a build writes build/ and *.egg-info beside its sources), and a
    fresh virtualenv (no pip, no packages) into which the venv's pip installed it, offline."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for rel in _SOURCES:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / rel).is_dir():
            shutil.copytree(ROOT / rel, src / rel, ignore=_ignore)
        else:
            shutil.copy2(ROOT / rel, src / rel)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "--no-cache-dir", "-q", "-w", str(tmp / "dist"), str(src)], check=True)
    wheel = next((tmp / "dist").glob("observatory-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--no-cache-dir", "-q", str(wheel)], check=True)
    return {"wheel": wheel, "venv": venv, "python": python, "tmp": tmp}


def test_the_wheel_holds_the_core_and_the_client_and_nothing_of_the_trainer_or_the_site(installed):
    with zipfile.ZipFile(installed["wheel"]) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert {n.split("/")[0] for n in names} == {"observatory", installed["wheel"].name.split("-py3")[0] + ".dist-info"}
    for module in ("observatory/client/__init__.py", "observatory/contract/messages.py", "observatory/downsample.py",
                   "observatory/anomalies/scan.py", "observatory/scaling/cli.py", "observatory/streams/queued.py"):
        assert module in names
    assert "Requires-Dist: redis>=5; extra == \"redis\"" in meta and "Provides-Extra: scaling" in meta
    assert "observatory-anomalies = observatory.anomalies.__main__:main" in entry_points
    assert "observatory-scaling = observatory.scaling.cli:main" in entry_points


@pytest.mark.slow
def test_a_plain_loop_in_a_fresh_venv_puts_its_run_on_the_site(installed, servers, publisher_token, run_id):
    _, secret = publisher_token("newuser", run_id)
    (installed["tmp"] / "train.py").write_text(LOOP)
    servers.wait_web()
    proc = subprocess.run([str(installed["python"]), "train.py", run_id, str(STEPS)], cwd=installed["tmp"],
                          env=_clean_env(OBS_URL=servers.url, OBS_TOKEN=secret), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["file"].startswith(str(installed["venv"]))  # the installed copy, not the checkout
    assert out["loaded"] == []  # neither JAX nor Django (nor redis, nor numpy)
    assert "pip install 'observatory[redis]'" in out["redis_mode"]
    st = out["stats"]
    assert st["dropped"] == 0 and st["rejected"] == 0 and st["invalid"] == 0 and st["skipped"] == 0

    wait_ingested(run_id, STEPS - 1)
    with urllib.request.urlopen(f"{servers.url}/api/runs/{run_id}/metrics/{contract.M_LOSS}/?points={STEPS}",
                                timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["exact"] and body["steps"] == list(range(STEPS))
    assert body["values"] == [2.0 + 3.0 * math.exp(-s / 50) for s in range(STEPS)]
    with urllib.request.urlopen(f"{servers.url}/api/runs/{run_id}/", timeout=10) as resp:
        detail = json.loads(resp.read())
    assert detail["name"] == "installed-client" and detail["state"] == "stopped"


def test_the_console_scripts_run_from_the_fresh_venv(installed, tmp_path):
    bin_dir = installed["venv"] / "bin"
    rows = ["step,train/loss"] + [f"{s},{float('nan') if s == 120 else 3.0 - s / 1000}" for s in range(200)]
    (tmp_path / "m.csv").write_text("\n".join(rows) + "\n")
    scan = subprocess.run([str(bin_dir / "observatory-anomalies"), "scan", "m.csv"], cwd=tmp_path,
                          env=_clean_env(), capture_output=True, text=True)
    assert scan.returncode == 0, scan.stderr
    found = [json.loads(line) for line in scan.stdout.splitlines()]
    assert any(a["kind"] == "nonfinite" and a["start_step"] == 120 for a in found), found

    # The scaling CLI needs the [scaling] extra (numpy): the test's own numpy stands in for it, offline.
    import numpy

    iso = ["flops,loss"] + [f"{1e18 * 3 ** i:.6g},{1.7 + 2.6e3 * (1e18 * 3 ** i) ** -0.155:.6f}" for i in range(10)]
    (tmp_path / "iso.csv").write_text("\n".join(iso) + "\n")
    fit = subprocess.run([str(bin_dir / "observatory-scaling"), "fit", "iso.csv", "--law", "compute", "--columns",
                          "C=flops,L=loss", "--json"], cwd=tmp_path, capture_output=True, text=True,
                         env=_clean_env(PYTHONPATH=str(Path(numpy.__file__).parents[1])))
    assert fit.returncode == 0, fit.stderr
    assert abs(json.loads(fit.stdout)["params"]["alpha"] - 0.155) < 1e-3
