"""The operator panel's tables are rendered by the server (webapp/control/tables.py): the page arrives with its runs
and commands in them, user text escaped, and every snapshot (/api/operate/, the socket's frame) carries them again."""

from __future__ import annotations

import json

import pytest

from webapp.control import tables

from .conftest import RUN

pytestmark = pytest.mark.django_db


def _send(client, **body):
    return client.post(f"/api/runs/{RUN}/commands/", json.dumps(body), content_type="application/json")


def test_the_panel_arrives_with_its_runs_and_commands_rendered_and_user_text_escaped(operator, run):
    assert _send(operator, id="cmd-html0001", command="set-lr-multiplier", args={"value": 0.5},
                 reason="<img src=x onerror=alert(1)> calmer").status_code == 202
    html = operator.get("/operate/").content.decode()
    runs = html.split('id="op-runs"')[1].split("</table>")[0]
    assert f'<tr data-run="{RUN}" tabindex="0"' in runs and '<td class="num step">40</td>' in runs
    commands = html.split('id="op-commands"')[1].split("</table>")[0]
    assert 'id="cmd-cmd-html0001" data-outcome="sent"' in commands and "value=0.5" in commands
    assert "&lt;img src=x onerror=alert(1)&gt; calmer" in commands and "<img src=x" not in commands
    assert 'id="op-no-runs" hidden' in html


def test_every_snapshot_carries_the_tables_as_html(operator, run):
    snap = operator.get("/api/operate/").json()
    assert set(snap["html"]) == {"runs", "commands"} and f'data-run="{RUN}"' in snap["html"]["runs"]


def test_numbers_as_the_panel_writes_them():
    assert [tables.num(x) for x in (None, 1234567, 1500.0, 2.5)] == ["–", "1,234,567", "1,500", "2.5"]
    assert [tables.sig(x) for x in (0.25, 1.0, 0.123456, None, "x")] == ["0.25", "1", "0.123", "–", "–"]
    assert [tables.duration(s) for s in (5, 65, 3700, 90000, None)] == ["5 s", "1 min 5 s", "1 h 1 min",
                                                                          "1 d 1 h", "–"]
    assert tables.utc("2023-11-14T22:13:20+00:00") == "2023-11-14 22:13:20 UTC"
