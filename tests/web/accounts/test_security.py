"""The security baseline: production settings pass Django's deploy checks; headers on every page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _manage(*args, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OBS_", "DJANGO_"))}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120)


def test_check_deploy_is_clean_under_production_settings(tmp_path):
    out = _manage("check", "--deploy", "--fail-level", "WARNING", OBS_DEBUG="0", OBS_DATA_DIR=str(tmp_path),
                  DJANGO_SECRET_KEY="k" * 20 + "-production-secret-" + "q9Zr" * 10,
                  OBS_ALLOWED_HOSTS="observatory.example.org")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    out = _manage("check", OBS_DEBUG="0", OBS_DATA_DIR=str(tmp_path))
    assert out.returncode != 0 and "DJANGO_SECRET_KEY" in out.stderr


@pytest.mark.django_db
def test_pages_carry_a_strict_content_security_policy(client):
    resp = client.get("/accounts/login/")
    csp = resp["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert "frame-ancestors 'none'" in csp
    assert resp["X-Frame-Options"] == "DENY"
