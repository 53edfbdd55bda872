"""The anomaly log live: a real demo trainer (tiny config) gets an lr-spike through its inject-fault command while
a dashboard is open; within seconds the page shows the loss spike in its anomaly panel, as a marker on the loss
chart and as a toast, without a reload, and the log page lists it with a link to the chart zoomed on it."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import pytest

from observatory import contract
from tests.tiny import WEB_TINY, TinyConfigs

from ..servers import PAGE_HOOK, ROOT, SETTLED_JS, get_json, stop, wait_for, wait_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"
def marker_js(step: int) -> str:
    """True once the loss chart carries a loss-spike marker at `step` (its own label, or one line of the hover of
    a label that close markers fold into)."""
    return ("() => { const d = document.getElementById('chart-train-loss'); return !!(d && d.layout && "
            f"(d.layout.annotations || []).some((a) => (a.x === {step} && a.text.includes('loss spike')) || "
            f"/(^|<br>)step {step} · \\w+: loss spike/.test(a.hovertext || ''))); }}")


def test_an_injected_lr_spike_shows_up_live_in_the_log_on_the_loss_chart_and_as_a_toast(servers, new_page, run_id,
                                                                                          tmp_path):
    cfg = TinyConfigs(tmp_path)("tiny.toml", run={"name": "anomaly-browser-test", "seed": 3}, model={"seq_len": 64},
                                train={"batch_size": 16, "lr": 3e-3, "token_budget": 2_000_000, "warmup_ratio": 0.005,
                                       "allow_faults": True, "eval_every": 0}, **WEB_TINY)
    trainer = subprocess.Popen([sys.executable, "-m", "training", "run", "--config", str(cfg), "--run-id", run_id,
                                "--fresh"], cwd=ROOT, env=servers.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    console = []
    try:
        servers.wait_web()
        api = f"{servers.url}/api/runs/{run_id}"
        # (the API, not the ORM: Playwright's event loop runs in this thread, where Django refuses database calls)
        wait_for(lambda: ((get_json(api + "/") or {}).get("last_step") or 0) >= 5, 300,
                 "the trainer's first steps in the database")  # (start-up and a cold compile)
        page = new_page(viewport={"width": 1280, "height": 800})
        page.on("console", lambda m: console.append((m.type, m.text)))
        page.add_init_script(PAGE_HOOK)
        page.goto(f"{servers.url}/runs/{run_id}/")
        page.wait_for_function(SETTLED_JS, timeout=30_000)
        wait_trace(page, LOSS, "x.length >= 60", timeout=120_000)  # a baseline for the detectors
        page.evaluate("() => { window.__sameDocument = true; }")

        before = get_json(api + "/")["last_step"]
        ctl = subprocess.run([sys.executable, "-m", "training", "control", run_id, "inject-fault", "lr-spike", "3",
                              "factor=100", "--reason", "anomaly browser test"], cwd=ROOT, env=servers.env,
                             capture_output=True, text=True, timeout=300)
        assert ctl.returncode == 0, ctl.stdout + ctl.stderr
        spike = wait_for(lambda: next((a for a in reversed((get_json(api + "/anomalies/?kind=loss_spike") or {}).get(
            "anomalies", [])) if a["metric"] == contract.M_LOSS and a["start_step"] > before
            and a["severity"] != "info"), None), 300, "the loss spike in the log")
        key, start, aid = spike["key"], spike["start_step"], spike["id"]

        # on the page, without a reload: the marker on the loss chart, the toast, the panel's log (each drawn while
        # it is on screen: the panel is scrolled to last)
        page.wait_for_function(marker_js(start), timeout=10_000)
        page.locator("#toasts .toast", has_text="loss spike").first.wait_for(timeout=10_000)
        page.evaluate("() => document.getElementById('anomaly-panel').scrollIntoView()")
        page.locator(f'#anomaly-panel li[data-key="{key}"]').wait_for(timeout=10_000)
        assert page.evaluate("() => window.__sameDocument") is True

        log = new_page(viewport={"width": 390, "height": 844})
        log.goto(f"{servers.url}/runs/{run_id}/anomalies/?kind=loss_spike")
        row = log.locator(f"#a-{aid}")
        assert "loss_spike" in row.inner_text()
        href = row.locator("a", has_text="chart").get_attribute("href")
        q = parse_qs(urlsplit(href).query)
        lo, hi = int(q["from"][0]), int(q["to"][0])
        assert urlsplit(href).path == f"/runs/{run_id}/" and lo < start < hi
        log.goto(servers.url + href)
        log.wait_for_function(marker_js(start), timeout=30_000)
        rng = log.evaluate("() => document.getElementById('chart-train-loss').layout.xaxis.range")
        assert [round(x) for x in rng] == [lo, hi], "the chart opens zoomed on the anomaly"
        assert [text for kind, text in console if kind == "error"] == []
    except Exception:  # what the run, its log, its trainer and ingest said (a detector's TypeError was found so)
        print("browser console:", *console, sep="\n  ")
        run = get_json(f"{servers.url}/api/runs/{run_id}/") or {}
        found = (get_json(f"{servers.url}/api/runs/{run_id}/anomalies/") or {}).get("anomalies", [])
        print(f"run at step {run.get('last_step')}, state {run.get('state')}; its anomaly log:",
              *[(a["kind"], a["metric"], a["start_step"], a["severity"]) for a in found], sep="\n  ")
        stop(trainer)
        print("trainer's stderr (tail):", trainer.stderr.read().decode()[-3000:])
        print("ingest's stderr (tail):", servers.tail("ingest", 6000))
        raise
    finally:
        stop(trainer)
