"""A development site (`make run`: OBS_DEBUG, no SMTP host) writes its mail to files: the "check your email" pages
say where, so a new user can follow the confirmation link. A real site does not show its folders."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.template import Context, Template
from django.test import Client

from .conftest import make_user

pytestmark = pytest.mark.django_db
PASSWORD = "an unguessable passphrase 42"


@pytest.fixture
def file_mail(settings, tmp_path):
    """Django's file backend, as settings choose it without OBS_EMAIL_HOST (tests default to the in-memory one)."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path / "mail")
    settings.DEBUG = True
    return settings


def _signup(client):
    return client.post("/accounts/signup/", {"username": "ada", "email": "ada@example.org", "display_name": "Ada",
                                             "password1": PASSWORD, "password2": PASSWORD})


def test_the_signup_page_names_the_folder_the_mail_is_in(file_mail):
    html = _signup(Client()).content.decode()
    assert "Check your email" in html and f"<code>{file_mail.EMAIL_FILE_PATH}</code>" in html
    (sent,) = Path(file_mail.EMAIL_FILE_PATH).glob("*.log")
    assert "ada@example.org" in sent.read_text()


def test_the_password_reset_page_names_it_too(file_mail):
    make_user("grace")
    resp = Client().post("/accounts/password_reset/", {"email": "grace@example.org"}, follow=True)
    assert resp.status_code == 200 and f"<code>{file_mail.EMAIL_FILE_PATH}</code>" in resp.content.decode()


def test_make_runs_mail_folder_is_named_as_in_the_checkout(file_mail):
    file_mail.EMAIL_FILE_PATH = str(file_mail.BASE_DIR / "var" / "mail")
    assert Template("{% load localmail %}{% local_mail_dir %}").render(Context()) == "var/mail"


def test_a_production_site_does_not_show_its_folders(file_mail):
    file_mail.DEBUG = False
    html = _signup(Client()).content.decode()
    assert "Check your email" in html and file_mail.EMAIL_FILE_PATH not in html
