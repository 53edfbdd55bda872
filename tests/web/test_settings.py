"""Settings helpers: DATABASE_URL parsing and typed environment variables that fail loudly."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp import settings as s

ROOT = Path(__file__).resolve().parents[2]


def test_a_postgres_url_becomes_a_postgresql_database():
    db = s.database_from_url("postgres://obs:p%40ss@db.example:6543/observatory?sslmode=require", Path("/tmp"))
    assert (db["ENGINE"], db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "django.db.backends.postgresql", "observatory", "obs", "p@ss", "db.example", "6543")
    assert db["OPTIONS"] == {"sslmode": "require"}


def test_a_sqlite_url_becomes_a_sqlite_file():
    assert s.database_from_url("sqlite:////srv/obs.db", Path("/tmp"))["NAME"] == "/srv/obs.db"


@pytest.mark.parametrize("url", ["mysql://x@y/z", "postgres://x@y", "postgres://x@y:notaport/db", "sqlite://"])
def test_a_bad_database_url_is_refused(url):
    with pytest.raises(ImproperlyConfigured):
        s.database_from_url(url, Path("/tmp"))


def test_a_bad_boolean_is_refused(monkeypatch):
    monkeypatch.setenv("OBS_TEST_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="OBS_TEST_FLAG"):
        s.env_bool("OBS_TEST_FLAG")


def test_a_secret_can_come_from_a_file(monkeypatch, tmp_path):
    (tmp_path / "key").write_text("s3cret\n")
    monkeypatch.delenv("OBS_TEST_SECRET", raising=False)
    monkeypatch.setenv("OBS_TEST_SECRET_FILE", str(tmp_path / "key"))
    assert s.env_secret("OBS_TEST_SECRET") == "s3cret"
    monkeypatch.setenv("OBS_TEST_SECRET", "also")
    with pytest.raises(ImproperlyConfigured, match="not both"):
        s.env_secret("OBS_TEST_SECRET")


def test_a_bad_number_is_refused(monkeypatch):
    monkeypatch.setenv("OBS_TEST_NUMBER", "fast")
    with pytest.raises(ImproperlyConfigured, match="OBS_TEST_NUMBER"):
        s.env_float("OBS_TEST_NUMBER", 1.0)
    monkeypatch.setenv("OBS_TEST_NUMBER", "-5")
    with pytest.raises(ImproperlyConfigured, match=">= 0"):
        s.env_float("OBS_TEST_NUMBER", 1.0)
    monkeypatch.setenv("OBS_TEST_NUMBER", "2.5")
    assert s.env_float("OBS_TEST_NUMBER", 1.0) == 2.5


def _settings_in_a_child(tmp_path, **env) -> dict:
    """What webapp.settings says in a fresh process that has imported pytest, under this environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OBS_", "DJANGO_"))}
    code = ("import json, pytest, django; from django.conf import settings; from webapp.live import hub; "
            "print(json.dumps({'testing': settings.TESTING, 'interval': hub.MIN_INTERVAL_S, "
            "'budget': hub.FRAME_BUDGET, 'pace': [settings.OBS_LIVE_PACE_VIEWERS, settings.OBS_LIVE_PACE_MS]}))")
    p = subprocess.run([sys.executable, "-c", "import django; django.setup(); " + code], cwd=ROOT, text=True,
                       capture_output=True, timeout=120,
                       env={**base, "DJANGO_SETTINGS_MODULE": "webapp.settings", "OBS_DEBUG": "1",
                            "OBS_DATA_DIR": str(tmp_path), **env})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_test_mode_is_a_setting_not_a_guess(tmp_path, settings):
    assert settings.TESTING  # this process: tests/testmode.py set OBS_TESTING
    assert "OBS_TESTING" not in os.environ  # ... and processes the tests start do not inherit it
    assert _settings_in_a_child(tmp_path)["testing"] is False  # importing pytest does not make a test run
    assert _settings_in_a_child(tmp_path, OBS_TESTING="1")["testing"] is True


def test_the_live_hub_takes_its_pace_from_settings(tmp_path):
    got = _settings_in_a_child(tmp_path, OBS_LIVE_MIN_INTERVAL_MS="700", OBS_LIVE_FRAME_BUDGET="500")
    assert (got["interval"], got["budget"]) == (0.7, 500.0)


def test_the_lite_channels_pace_takes_its_crowd_and_interval_from_settings(tmp_path, settings):
    assert _settings_in_a_child(tmp_path)["pace"] == [2000, 333]
    assert _settings_in_a_child(tmp_path, OBS_LIVE_PACE_VIEWERS="50", OBS_LIVE_PACE_MS="500")["pace"] == [50, 500]
    from webapp.live.lite import LitePacing

    settings.OBS_LIVE_PACE_VIEWERS, settings.OBS_LIVE_PACE_MS = 5, 250
    relay = LitePacing()
    relay.subscribers = {("r", "lite"): 4, ("r", ""): 50}  # nchan's counts at the relay's last publishes
    assert relay.pace_s == 0.25 and not relay.paced("r")  # the full channel's crowd does not count
    relay.subscribers["r", "lite"] = 5
    assert relay.paced("r") and not relay.paced("another run")


async def test_channel_layers_on_two_redis_databases_do_not_hear_each_other(redis_url):
    """Redis pub/sub ignores database numbers: without a prefix per database, two test sessions (or xdist workers)
    on one server would receive each other's group messages for a run id they share."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    base = redis_url.rsplit("/", 1)[0]
    layers = [RedisPubSubChannelLayer(**s.channel_layers(f"{base}/{db}")["default"]["CONFIG"]) for db in (1, 2)]
    try:
        channels = [await layer.new_channel() for layer in layers]
        for layer, channel in zip(layers, channels):
            await layer.group_add("run.shared-id", channel)
        await layers[0].group_send("run.shared-id", {"type": "m", "db": 1})
        await layers[1].group_send("run.shared-id", {"type": "m", "db": 2})
        assert (await layers[1].receive(channels[1]))["db"] == 2  # its own, not the other database's sent first
        assert (await layers[0].receive(channels[0]))["db"] == 1
    finally:
        for layer in layers:
            await layer.flush()


def test_database_0_keeps_the_default_channel_prefix():
    assert s.channel_layers("redis://127.0.0.1:6379/0")["default"]["CONFIG"]["prefix"] == "asgi"
    assert s.channel_layers("redis://127.0.0.1:6379")["default"]["CONFIG"]["prefix"] == "asgi"
    assert s.channel_layers("unix:///run/redis.sock?db=3")["default"]["CONFIG"]["prefix"] == "asgi-db3"


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://example.org", "http://example.org/site", "http://",
                                 "http://example.org:port", "http://user:pw@example.org", "https://example.org?x=1"])
def test_a_wrong_public_url_stops_the_site_naming_it(url):
    from webapp.settings import public_url

    with pytest.raises(ImproperlyConfigured, match="OBS_PUBLIC_URL"):
        public_url(url)


def test_the_public_url_is_the_trusted_origin_and_an_allowed_host(tmp_path):
    code = ("import json; from django.conf import settings as s; print(json.dumps({'origins': "
            "getattr(s, 'CSRF_TRUSTED_ORIGINS', []), 'hosts': s.ALLOWED_HOSTS, 'url': s.OBS_PUBLIC_URL}))")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OBS_", "DJANGO_"))}
    env = {**base, "DJANGO_SETTINGS_MODULE": "webapp.settings", "OBS_DEBUG": "1", "OBS_DATA_DIR": str(tmp_path)}
    got = subprocess.run([sys.executable, "-c", "import django; django.setup(); " + code], cwd=ROOT, text=True,
                         capture_output=True, env={**env, "OBS_PUBLIC_URL": "https://Obs.Example.org:8443/"})
    assert got.returncode == 0, got.stderr
    got = json.loads(got.stdout)
    assert got["origins"] == ["https://obs.example.org:8443"] and got["url"] == "https://obs.example.org:8443"
    assert "obs.example.org" in got["hosts"]
    bad = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, text=True,
                         capture_output=True, env={**env, "OBS_PUBLIC_URL": "obs.example.org"})
    assert bad.returncode != 0 and "OBS_PUBLIC_URL 'obs.example.org'" in bad.stderr
