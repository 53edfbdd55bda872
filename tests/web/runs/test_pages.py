"""Pages: the run list and a run's dashboard (its data comes from the API and the WebSocket)."""

import pytest

from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

@pytest.fixture
def run():
    return Run.objects.create(id="r1", name="demo run", state="training", last_step=9)

def test_the_run_list_page_shows_runs(client, run):
    resp = client.get("/")
    assert resp.status_code == 200
    assert b"demo run" in resp.content and b"/runs/r1/" in resp.content

def test_the_dashboard_page_loads_vendored_plotly_and_no_cdn(client, run):
    resp = client.get("/runs/r1/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "/static/vendor/plotly.min.js" in html and "/static/js/dashboard.js" in html
    assert "https://" not in html and "http://" not in html
    assert '"default_metrics"' in html

def test_the_dashboard_of_an_unknown_run_is_404(client, db):
    assert client.get("/runs/nope/").status_code == 404
