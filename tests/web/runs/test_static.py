"""Static files as the image serves them: after collectstatic, pages name content-hashed files, which the web server
(WhiteNoise, no proxy in front) answers gzipped and cacheable for a year, immutable; the operator panel loads the
same cartesian Plotly bundle as the dashboard, not the full one; the collected files are only what pages load
(no test-only asset such as axe-core, no unused bundle)."""

import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest

from ..servers import ROOT, free_port, stop, wait_port

sys.path.insert(0, str(ROOT / "deploy"))
from run_local import web_command  # noqa: E402


def get(url: str, **headers):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        return r.read(), r.headers


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """STATIC_ROOT after `manage.py collectstatic`, as deploy/Dockerfile runs it (once for this file)."""
    root = tmp_path_factory.mktemp("collected") / "static"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings", "PYTHONPATH": str(ROOT),
           "OBS_STATIC_ROOT": str(root), "OBS_DEBUG": "1"}
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"], cwd=ROOT,
                   env=env, check=True)
    return root


def test_collected_static_files_are_hashed_compressed_and_immutable(live_env, collected):
    env = {**live_env, "OBS_STATIC_ROOT": str(collected), "OBS_DEBUG": "0", "OBS_SSL_REDIRECT": "0",
           "DJANGO_SECRET_KEY": "static-test-" + "x" * 40}
    port = free_port()
    web = subprocess.Popen(web_command("127.0.0.1", port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        base = f"http://127.0.0.1:{port}"
        html = get(base + "/")[0].decode()
        scripts = re.findall(r'src="(/static/js/[^"]+)"', html)
        assert scripts and all(re.search(r"\.[0-9a-f]{12}\.js$", s) for s in scripts), scripts
        plain, _ = get(base + scripts[0])
        body, h = get(base + scripts[0], **{"Accept-Encoding": "gzip"})
        assert h["Content-Encoding"] == "gzip" and len(body) < len(plain)
        assert "immutable" in h["Cache-Control"] and int(re.search(r"max-age=(\d+)", h["Cache-Control"])[1]) >= 31536000
    finally:
        stop(web)


def test_the_operator_panel_draws_with_the_line_renderer_not_plotly():
    text = (ROOT / "templates" / "control" / "operate.html").read_text()
    assert "vendor/uPlot.iife.min.js" in text and "js/plot.js" in text and "plotly" not in text


def loaded_by_pages() -> set[str]:
    """Every static name a page loads: {% static %} literals of the templates, the scripts apps register on the
    dashboard (runs.extensions.add_script), the dashboard's first-paint scripts (runs.views.FIRST_SCRIPTS: its
    template and its answer's Link header list them), static() in the project's Python (the /favicon.ico redirect),
    and url(...) inside a collected stylesheet."""
    from webapp.runs.views import FIRST_SCRIPTS

    names = set(FIRST_SCRIPTS)
    for path in (ROOT / "templates").rglob("*.html"):
        names |= {m[1] for m in re.findall(r"""\{%\s*static\s+(["'])(.+?)\1""", path.read_text())}
    for path in (ROOT / "webapp").rglob("*.py"):
        names |= set(re.findall(r"""\b(?:add_script|static)\(["']([^"']+)["']""", path.read_text()))
    for path in (ROOT / "static").rglob("*.css"):
        names |= {m.lstrip("/").removeprefix("static/") for m in re.findall(r"url\(['\"]?([^'\")]+)", path.read_text())
                  if not m.startswith(("data:", "http"))}
    return names


def test_collected_static_files_hold_only_what_pages_load(collected):
    """The manifest lists every file collectstatic wrote (by its unhashed name): Django admin's own, and ours, each
    loaded by some page. A test-only asset (axe-core: tests/assets) or an unused bundle would fail here."""
    manifest = json.loads((collected / "staticfiles.json").read_text())["paths"]
    ours = sorted(n for n in manifest if not n.startswith("admin/"))
    assert ours and "js/dashboard.js" in ours and "vendor/plotly-cartesian.min.js" in ours
    unloaded = sorted(set(ours) - loaded_by_pages())
    assert unloaded == [], f"collected but no page loads them: {unloaded}"
    assert not [n for n in manifest if "axe" in n.lower() or n == "vendor/plotly.min.js"]
    on_disk = {p.relative_to(collected).as_posix() for p in collected.rglob("*") if p.is_file()}
    assert all(any(f.startswith(n.rsplit(".", 1)[0]) for n in manifest) or f == "staticfiles.json" for f in on_disk)
