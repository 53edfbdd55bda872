"""Static files as the image serves them: after collectstatic, pages name content-hashed files, which the web server
(WhiteNoise, no proxy in front) answers gzipped and cacheable for a year, immutable; the operator panel loads the
same cartesian Plotly bundle as the dashboard, not the full one."""

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


def test_collected_static_files_are_hashed_compressed_and_immutable(live_env, tmp_path):
    root = tmp_path / "static"
    env = {**live_env, "OBS_STATIC_ROOT": str(root)}
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"], cwd=ROOT,
                   env=env, check=True)  # as deploy/Dockerfile runs it
    env = {**env, "OBS_DEBUG": "0", "DJANGO_SECRET_KEY": "static-test-" + "x" * 40, "OBS_SSL_REDIRECT": "0"}
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


def test_the_operator_panel_loads_the_cartesian_plotly_bundle():
    text = (ROOT / "templates" / "control" / "operate.html").read_text()
    assert "vendor/plotly-cartesian.min.js" in text and "vendor/plotly.min.js" not in text
