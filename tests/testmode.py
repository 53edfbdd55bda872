"""Test mode for the test process: OBS_TESTING=1 before Django reads its settings (pytest.ini loads this plugin
first, ahead of pytest-django). Processes the tests start (servers, ingest, the trainer) do not inherit it: they
run as their own environment says, like production."""

import os

import pytest

os.environ["OBS_TESTING"] = "1"


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    os.environ.pop("OBS_TESTING", None)  # read by now (webapp.settings.TESTING)
