"""`make run` and the container image install requirements.txt alone (requirements-dev.txt adds the test tools on top).
Every module a runtime process loads must therefore come from a distribution that requirements.txt installs, itself or
as a dependency. The test venv has the dev tools too, so a missing pin passes every other test and fails only on a
user's first `make run` (websockets, needed by the web server's `--ws websockets-sansio`, was once pinned in the dev
file only: the web process died at start with ModuleNotFoundError)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..servers import ROOT

sys.path.insert(0, str(ROOT / "deploy"))
from run_local import UVICORN_FLAGS  # noqa: E402

# What each process of `make run` (deploy/run_local.py) loads at start: the web server with its flags' protocol
# implementations, the ASGI app, ingest and Celery through Django's settings, the trainer's CLI.
LOADER = r"""
import importlib, json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
flags = json.loads(sys.argv[1])
import uvicorn.config as uc
for table, key in ((uc.LOOP_FACTORIES, "--loop"), (uc.HTTP_PROTOCOLS, "--http"), (uc.WS_PROTOCOLS, "--ws")):
    target = table.get(flags[key], flags[key])  # (uvicorn also takes an import string: --http webapp.serving:…)
    importlib.import_module(target.split(":")[0])
import django
django.setup()
import webapp.asgi, webapp.metrics.ingest, webapp.celery, training.cli, observatory.client
print(json.dumps(sorted({m.split(".")[0] for m in list(sys.modules)})))
"""


# Imported when present, with a fallback when not (so not a requirement): module -> who tries it.
OPTIONAL = {"greenlet": "celery.utils.threads (falls back to _thread.get_ident)"}


def _runtime_distributions() -> set[str]:
    """requirements.txt's pins and, transitively, what they require (with the extras they name)."""
    todo = []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            todo.append(Requirement(line))
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        key = name + "[" + ",".join(sorted(req.extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for spec in requires:
            dep = Requirement(spec)
            envs = [{"extra": e} for e in req.extras] or [{"extra": ""}]
            if dep.marker is None or any(dep.marker.evaluate(env) for env in envs):
                todo.append(dep)
    return {k.split("[")[0] for k in seen}


def _flag_values() -> dict[str, str]:
    return {f: UVICORN_FLAGS[UVICORN_FLAGS.index(f) + 1] for f in ("--loop", "--http", "--ws")}


def test_every_module_the_runtime_processes_load_is_installed_by_requirements_txt(tmp_path):
    env = {**os.environ, "OBS_DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), "OBS_DEBUG": "1"}
    out = subprocess.run([sys.executable, "-c", LOADER, json.dumps(_flag_values())], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    modules = json.loads(out.stdout.strip().splitlines()[-1])
    owners = metadata.packages_distributions()
    runtime = _runtime_distributions()
    local = {p.name for p in ROOT.iterdir()}
    missing = {}
    for mod in modules:
        private_builtin = mod.startswith("_") and mod not in owners  # extension shims no distribution claims
        if mod in sys.stdlib_module_names or mod in local or mod in OPTIONAL or private_builtin:
            continue
        dists = {canonicalize_name(d) for d in owners.get(mod, [])}
        if dists and not dists & runtime:
            missing[mod] = sorted(dists)
    assert not missing, f"loaded at run time but installed only by the dev requirements: {missing}"


def test_the_closure_sees_the_pins_and_their_dependencies():
    runtime = _runtime_distributions()
    assert {"django", "uvicorn", "jax", "channels-redis"} <= runtime  # pinned
    assert {"asgiref", "h11", "jaxlib"} <= runtime  # required by pins
    assert not any(d.startswith("pytest") for d in runtime)
