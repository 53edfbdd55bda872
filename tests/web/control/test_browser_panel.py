"""The operator panel end to end: a real trainer subprocess, uvicorn + ingest, Chromium. An operator pauses, resumes
and re-scales the LR from the panel and sees each take effect; a member is refused; an anonymous viewer sees the
interventions with their reasons on the dashboard. Then a command outlives a web restart, a retry by id applies it
once, and a rollback shows it undone."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from observatory import contract

from ..servers import stop, wait_for
from .live import command_row, cookie_for, http, session, start_trainer

pytestmark = [pytest.mark.browser, pytest.mark.slow]
SHOTS = Path("/tmp/shots/issue12")
DESKTOP, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}


@pytest.fixture
def live_run(request, servers, tmp_path, run_id, redis_client):
    """A trainer on the tiny config, training, seen by the web (ingest stored it, the heartbeat key is up).
    Parametrize indirectly with a dict of extra overrides ({"checkpoint__every_steps": 20})."""
    proc = start_trainer(servers.env, run_id, tmp_path / "ckpt", tmp_path / "trainer.log",
                         **getattr(request, "param", {}))
    try:
        servers.wait_web()
        try:
            wait_for(lambda: http(f"{servers.url}/api/runs/{run_id}/")[0] == 200 and
                     redis_client.exists(contract.heartbeat_key(run_id)), 240,
                     "the trainer's run in the API, and its heartbeat")
        except AssertionError as e:
            raise AssertionError(f"{e}; ingest alive: {servers.ingest.poll() is None}; trainer log: "
                                 f"{(tmp_path / 'trainer.log').read_text()[-1500:]}") from None
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)  # in case a test left it stopped
        stop(proc)


def _open_panel(new_page, servers, sessionid, run_id, viewport=DESKTOP):
    page = new_page(viewport=viewport)
    page.context.add_cookies(cookie_for(servers.url, sessionid))
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))
    page.goto(f"{servers.url}/operate/?run={run_id}")
    page.wait_for_function("() => document.getElementById('op-conn').textContent === 'live'", timeout=30_000)
    return page, errors


def _send(page, command, reason, fill=None, confirm=False):
    page.click(f'#op-buttons button[data-cmd="{command}"]')
    for selector, value in (fill or {}).items():
        page.fill(selector, value)
    page.fill("#op-reason", reason)
    if confirm:
        page.check("#op-confirm")
    page.click("#op-send")


def _outcome(page, run_id, command, outcome, timeout=60_000):
    """Until the newest `command` row of the run shows `outcome`; returns the row's command id."""
    row = command_row(run_id, command)
    page.wait_for_function(f"() => {{ const r = {row}; return r && r.dataset.outcome === '{outcome}'; }}",
                           timeout=timeout)
    return page.evaluate(f"() => ({row}).id.slice(4)")


def test_an_operator_steers_a_live_run_from_the_panel(servers, live_run, new_page, run_id, redis_client):
    olga, mike = session("olga", "operator"), session("mike", "member")
    for path in ("/operate/", "/api/operate/", f"/api/runs/{run_id}/commands/", f"/api/runs/{run_id}/plan/?tokens=9"):
        assert http(servers.url + path, mike)[0] == 403, path
    page, errors = _open_panel(new_page, servers, olga, run_id)
    run_row = f'#op-runs tr[data-run="{run_id}"]'
    state, step = f"document.querySelector('{run_row} .state')", f"document.querySelector('{run_row} .step')"
    # a hang guard: the trainer compiles first (over 60 s once, on two cores shared with the suite's other workers)
    page.wait_for_function(f"() => {state}.textContent === 'training'", timeout=300_000)

    _send(page, "pause", "look at the grad norm")
    # the timeout is a hang guard, not a latency target
    page.wait_for_function(f"() => {state}.textContent === 'paused'", timeout=60_000)
    cmd = _outcome(page, run_id, "pause", "applied")
    paused_at = int(page.evaluate(f"() => ({command_row(run_id, 'pause')}).querySelector('.detail').textContent")
                    .split("paused at step ")[1].split()[0])
    page.wait_for_function(f"() => {step}.textContent === '{paused_at:,}'", timeout=10_000)
    beat = float(page.evaluate(f"() => document.querySelector('{run_row} .hb').dataset.t"))
    page.wait_for_function(f"() => parseFloat(document.querySelector('{run_row} .hb').dataset.t) > {beat}",
                           timeout=10_000)
    assert page.evaluate(f"() => {step}.textContent") == f"{paused_at:,}"  # heartbeats go on, the step stays
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "operate-paused-desktop.png"), full_page=True)

    _send(page, "resume", "norm looks fine")
    page.wait_for_function(f"() => {state}.textContent === 'training'", timeout=10_000)
    page.wait_for_function(f"() => parseInt({step}.textContent.replace(/,/g, '')) > {paused_at}", timeout=30_000)

    lr_trace = "document.getElementById('op-chart').data.find(t => t.name === 'learning rate')"
    page.wait_for_function(f"() => {lr_trace} && {lr_trace}.x.length > 2", timeout=30_000)
    _send(page, "set-lr-multiplier", "halve twice: calmer updates", fill={"#op-arg-value": "0.25"})
    _outcome(page, run_id, "set-lr-multiplier", "applied")
    lr_step = int(redis_ack_step(redis_client, run_id, "set-lr-multiplier"))
    page.wait_for_function(f"""() => {{
        const t = {lr_trace}; if (!t) return false;
        const before = t.x.map((x, i) => [x, t.y[i]]).filter(p => p[0] < {lr_step});
        const after = t.x.map((x, i) => [x, t.y[i]]).filter(p => p[0] > {lr_step} + 1);
        return before.length && after.length && after[after.length - 1][1] < 0.5 * before[before.length - 1][1];
    }}""", timeout=60_000)
    page.wait_for_function(f"() => document.querySelector('{run_row} .lrm').textContent === '0.25'", timeout=30_000)
    # set-token-budget shows the re-planned schedule and the new ETA before anything is sent
    page.click('#op-buttons button[data-cmd="set-token-budget"]')
    page.fill("#op-arg-tokens", "2e8")  # the CLI's spelling (README); the panel read it as 2 (parseInt)
    page.wait_for_selector("#op-plan-text", timeout=30_000)
    assert "ETA" in page.text_content("#op-plan-text")
    page.wait_for_function("() => document.getElementById('op-chart').data.some(t => t.name === 'plan after')")
    page.screenshot(path=str(SHOTS / "operate-desktop.png"), full_page=True)
    phone, phone_errors = _open_panel(new_page, servers, olga, run_id, PHONE)
    phone.screenshot(path=str(SHOTS / "operate-phone.png"), full_page=True)

    # The public dashboard: anyone sees the interventions, with their reasons, on the charts.
    anon = new_page(viewport=DESKTOP)
    anon.goto(f"{servers.url}/runs/{run_id}/")
    # (a label, or the hover of a label that close markers fold into)
    anon.wait_for_function("""() => [...document.querySelectorAll('.figure')].some(d => {
        const said = (d.layout.annotations || []).map(a => String(a.hovertext || a.text)).join(' ');
        return said.includes('look at the grad norm') && said.includes('halve twice: calmer updates'); })""",
                           timeout=60_000)
    labels = anon.evaluate("""() => [...document.querySelectorAll('.figure')].flatMap(d =>
        (d.layout.annotations || []).map(a => String(a.text) + String(a.hovertext || '')))""")
    assert not any("olga" in text for text in labels)  # she did not opt in to being named
    anon.screenshot(path=str(SHOTS / "dashboard-markers.png"), full_page=False)
    log = new_page(viewport=PHONE)
    log.goto(f"{servers.url}/runs/{run_id}/log/")
    assert log.locator(f"#log-{cmd}").get_attribute("data-outcome") == "applied"
    log.screenshot(path=str(SHOTS / "log-phone.png"), full_page=True)
    assert errors == [] and phone_errors == []


def redis_ack_step(client, run_id: str, command: str) -> str:
    """The step of the newest applied ack whose command (looked up on the control stream) is `command`."""
    names = {f[b"id"].decode(): f[b"command"].decode() for _, f in client.xrange(contract.control_stream(run_id))}
    acks = [f for _, f in client.xrange(contract.ack_stream(run_id))
            if f[b"status"] == b"applied" and names.get(f[b"id"].decode()) == command]
    return acks[-1][b"step"].decode()


@pytest.mark.parametrize("live_run", [{"checkpoint__every_steps": 20}], indirect=True)
def test_a_command_outlives_a_web_restart_applies_once_and_a_rollback_undoes_it(servers, live_run, new_page, run_id,
                                                                                  redis_client):
    olga = session("olga", "operator")
    page, errors = _open_panel(new_page, servers, olga, run_id)
    # a checkpoint after the start, so that there is one to roll back to from before the command
    page.wait_for_function(f"""() => {{ const r = document.querySelector('#op-runs tr[data-run="{run_id}"] .ckpt');
        return r && r.textContent.split(', ').some(s => +s > 0); }}""", timeout=120_000)
    os.kill(live_run.pid, signal.SIGSTOP)  # the trainer hears nothing until we say so
    try:
        _send(page, "set-lr-multiplier", "calmer", fill={"#op-arg-value": "0.5"})
        cmd = _outcome(page, run_id, "set-lr-multiplier", "sent")
        # the browser retries (as after a network error): same id, same command
        status = page.evaluate("""async ([run, id]) => {
            const r = await fetch(`/api/runs/${run}/commands/`, {method: "POST", body: JSON.stringify(
                {id, command: "set-lr-multiplier", args: {value: 0.5}, reason: "calmer"}), headers: {
                "Content-Type": "application/json",
                "X-CSRFToken": document.querySelector("input[name=csrfmiddlewaretoken]").value}});
            return r.status; }""", [run_id, cmd])
        assert status == 202
        servers.stop_web()  # the web goes away with the command in flight
    finally:
        os.kill(live_run.pid, signal.SIGCONT)
    acks = lambda: [{k.decode(): v.decode() for k, v in f.items()}  # noqa: E731
                    for _, f in redis_client.xrange(contract.ack_stream(run_id))]
    wait_for(lambda: any(a["id"] == cmd and a["status"] == "applied" for a in acks()), 60, "the trainer's answer")
    servers.start_web()
    page.reload()
    _outcome(page, run_id, "set-lr-multiplier", "applied")  # the answer reaches the page after the restart
    mine = [a for a in acks() if a["id"] == cmd]
    assert [a["status"] for a in mine].count("applied") == 1 and "duplicate id" in " ".join(a["detail"] for a in mine)
    applied_at = int(next(a["step"] for a in mine if a["status"] == "applied"))

    # roll back to the newest checkpoint before the command: the panel previews what is superseded, then shows the
    # command undone
    page.click('#op-buttons button[data-cmd="rollback"]')
    target = page.wait_for_function(f"""() => {{
        const o = [...document.querySelectorAll('#op-arg-step option')].map(o => +o.value)
                  .filter(s => s < {applied_at});
        return o.length ? Math.max(...o) : null; }}""", timeout=30_000).json_value()
    page.select_option("#op-arg-step", str(target))
    page.wait_for_function(f"""() => (document.getElementById('op-chart').layout.shapes || [])
        .some(s => s.type === 'rect' && s.x0 === {target})""", timeout=10_000)
    assert "superseded" in page.text_content("#op-preview")
    page.fill("#op-reason", "undo the LR change")
    page.click("#op-send")
    assert "confirm" in page.text_content("#op-error")  # destructive: not sent without the confirmation
    page.check("#op-confirm")
    page.click("#op-send")
    _outcome(page, run_id, "rollback", "applied")
    page.wait_for_function(f"() => document.getElementById('cmd-{cmd}').dataset.outcome === 'undone'", timeout=60_000)
    assert "undone by rollback" in page.text_content(f"#cmd-{cmd}")
    page.screenshot(path=str(SHOTS / "operate-undone-desktop.png"), full_page=True)
    assert [e for e in errors if "ERR_CONNECTION_REFUSED" not in e] == []  # only the restart's refusals
