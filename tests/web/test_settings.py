"""Settings helpers: DATABASE_URL parsing and typed environment variables that fail loudly."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp import settings as s


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
