"""Browser test of the MoE dashboard: real ingest + uvicorn subprocesses, Chromium via Playwright. A run publishes
4 layers x 16 experts of router metrics, per-domain losses, mixture metrics and a data manifest; the page must draw
the router heatmap and the data panel from what ingest stored, then grow the heatmap by a column per live step
without a single HTTP request."""

import math
import os
import threading
import time

import pytest

from observatory import contract

from ..servers import LAZY_LOADED_JS, PAGE_HOOK, SETTLED_JS, trace_js, wait_ingested, wait_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LAYERS, EXPERTS, HISTORY = 4, 16, 30
DOMAINS = ("python_stdlib", "docstrings", "licenses", "docs_text")
STAGES = [("pretrain", 0.8, {"python_stdlib": 0.45, "docstrings": 0.15, "licenses": 0.2, "docs_text": 0.2}),
          ("midtrain", 0.2, {"python_stdlib": 0.25, "docstrings": 0.35, "licenses": 0.05, "docs_text": 0.35})]
NAN_STEP = 7

HEAT_JS = """() => { const d = document.getElementById('router-heatmap');
  if (!d || !d.data || !d.data.length) return null;
  const h = d.data[0];
  return {type: h.type, rows: h.z.length, cols: h.x.length, y: Array.from(h.y), x: Array.from(h.x),
          layer: d.dataset.layer, z0: h.z.map((r) => r[0]), lines: d.data.slice(2, 4).map((t) => t.x.length)}; }"""


def _manifest():
    budget = 1_000_000
    return {"tokenizer": {"name": "bytes", "vocab_size": 256, "separator_id": 0}, "seq_len": 128,
            "batch_size": 8, "seed": 0, "token_budget": budget, "load_seconds": 0.4,
            "domains": [{"name": d, "builtin": True, "documents": 100 + i, "bytes": 1_000_000 * (i + 1),
                         "tokens": 1_000_000 * (i + 1), "train_tokens": 980_000 * (i + 1),
                         "eval_tokens": 20_000 * (i + 1), "sha256": "0" * 16, "skipped": [],
                         "sources": [{"kind": "glob", "pattern": f"/usr/lib/python3/{d}/*.py", "files": 10 + i,
                                      "bytes": 1_000_000 * (i + 1)}]}
                        for i, d in enumerate(DOMAINS)],
            "stages": [{"name": n, "fraction": f, "start_tokens": int(budget * (0.8 if i else 0)),
                        "end_tokens": int(budget * (0.8 if i == 0 else 1.0)), "weights": w}
                       for i, (n, f, w) in enumerate(STAGES)]}


def _load(layer, expert, step):
    return float(100 + 10 * expert + layer + step)  # distinct per (layer, expert, step): checkable in the heatmap


def _values(step, stage=0):
    loss = math.nan if step == NAN_STEP else 4.0 - 0.01 * step
    v = {contract.M_LOSS: loss, contract.M_CE: 3.9 - 0.01 * step, contract.M_LR: 1e-3,
         contract.M_GRAD_NORM: 1.0, contract.M_TOKENS_PER_S: 5e4, contract.M_MFU: 0.3, contract.M_DROP: 0.01,
         contract.M_MIX_STAGE: float(stage)}
    for d in DOMAINS:
        v[contract.domain_loss(d)] = 4.1 - 0.01 * step
        v[contract.mixture_weight(d)] = STAGES[stage][2][d]
    for layer in range(LAYERS):
        for e in range(EXPERTS):
            v[contract.router_metric(layer, f"routing_hist/{e}")] = _load(layer, e, step)
            v[contract.router_metric(layer, f"router_bias/{e}")] = 0.0
        stats = {"routing_entropy": 2.7, "capacity_overflow_rate": 0.02, "max_mean_load": 1.3,
                 "load_balancing_loss": 1.0, "router_z_loss": 0.5}
        v.update({contract.router_metric(layer, name): x for name, x in stats.items()})
    return v


def test_router_heatmap_and_data_panel_render_from_ingested_data_and_grow_live(trainer, servers, new_page, run_id):
    from webapp.runs.models import Run

    trainer.send("run", name="moe browser test", config={"moe": True})
    trainer.send("manifest", manifest=_manifest())
    # a known hardware peak (a data-sheet value): the page shows MFU only then (webapp/runs/pagedata.py)
    trainer.send("event", step=0, name="compiled", payload={"peak_flops": 989e12, "flops_per_token": 1e6,
                                                            "peak_flops_source": "H100 dense bf16 x 1"})
    trainer.send("state", state="training", step=0, detail="")
    for step in range(HISTORY):
        trainer.metrics_named(step, _values(step))

    wait_ingested(run_id, HISTORY - 1)
    assert Run.objects.get(pk=run_id).manifest["stages"][1]["name"] == "midtrain"
    servers.wait_web()
    page = new_page(viewport={"width": 1400, "height": 1000})
    page.add_init_script(PAGE_HOOK)
    errors, api_calls = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: "/api/" in r.url and api_calls.append(r.url))
    page.goto(f"{servers.url}/runs/{run_id}/")
    show = lambda sel: page.evaluate(f"() => document.querySelector({sel!r}).scrollIntoView()")  # noqa: E731
    show("#router-panel")  # (a panel or chart draws once on screen)

    # Heatmap of layer 0: 16 expert rows x one column per step, cells = tokens per expert.
    page.wait_for_function(f"() => {{ const h = ({HEAT_JS})(); return h && h.cols === {HISTORY}; }}",
                           timeout=30_000)
    heat = page.evaluate(HEAT_JS)
    assert heat["type"] == "heatmap" and heat["rows"] == EXPERTS and heat["layer"] == "0"
    assert heat["y"] == list(range(EXPERTS)) and heat["x"] == list(range(HISTORY))
    assert heat["z0"] == [_load(0, e, 0) for e in range(EXPERTS)]
    assert heat["lines"] == [HISTORY, HISTORY]  # max/mean load and capacity overflow
    assert page.eval_on_selector_all("#router-layer option", "os => os.map(o => o.value)") == \
        ["0", "1", "2", "3"]

    # Data panel from the manifest: domains, sources, sizes, stages with their weights, the current stage.
    page.wait_for_function("() => document.querySelectorAll('#data-domains tbody tr').length === 4",
                           timeout=30_000)
    page.wait_for_function("() => document.getElementById('data-stage').textContent.startsWith('pretrain')",
                           timeout=30_000)
    assert page.is_visible("#data-panel") and page.is_visible("#router-panel")
    rows = page.eval_on_selector_all("#data-domains tbody tr", "rs => rs.map(r => r.dataset.domain)")
    assert rows == list(DOMAINS)
    heads = page.inner_text("#data-domains thead")
    assert "pretrain" in heads and "midtrain" in heads
    licenses = page.inner_text('#data-domains tr[data-domain="licenses"]')
    assert "…/*.py" in licenses and "/usr/lib" not in licenses and "3.00 MB" in licenses  # no host paths
    assert "20.0%" in licenses and "5.0%" in licenses  # pretrain and midtrain weights

    # Default charts: per-domain losses join the loss chart; the NaN loss is flagged, not hidden.
    show("#chart-train-loss")
    page.wait_for_function("() => { const d = document.getElementById('chart-train-loss'); "
                           "return d && d.data && d.data.filter((t) => t.mode === 'lines').length === 6; }",
                           timeout=30_000)  # loss, CE, 4 domains
    for plot_id in ("chart-optim-learning-rate", "chart-grad-norm-total",
                    "chart-throughput-tokens-per-second", "chart-moe-drop-fraction"):
        show("#" + plot_id)
        wait_trace(page, plot_id, f"x.length === {HISTORY}")  # each chart fills when its own history arrives
    wait_trace(page, "chart-throughput-tokens-per-second", "true", trace=1)
    assert page.evaluate("() => document.getElementById('chart-throughput-tokens-per-second')"
                         ".data[1].yaxis") == "y3"  # MFU on the right-hand axis
    assert page.is_visible("#nonfinite-note")
    assert f"first at step {NAN_STEP}" in page.inner_text("#nonfinite-note")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)
    page.wait_for_function(SETTLED_JS, timeout=30_000)  # every resume answered, nothing loading
    page.wait_for_function(LAZY_LOADED_JS)
    api_calls.clear()
    show("#router-panel")

    # Live: each new step adds a heatmap column; the stage switch shows in the data panel. No HTTP at all.
    publish = threading.Thread(target=lambda: [  # paced like a trainer: the heatmap is seen growing
        (trainer.metrics_named(step, _values(step, stage=1)), time.sleep(0.05))
        for step in range(HISTORY, HISTORY + 5)])
    publish.start()
    page.wait_for_function(f"() => {{ const h = ({HEAT_JS})(); return h && h.cols > {HISTORY}; }}", timeout=30_000)
    publish.join()
    page.wait_for_function(f"() => {{ const h = ({HEAT_JS})(); return h && h.cols === {HISTORY + 5}; }}",
                           timeout=30_000)
    heat = page.evaluate(HEAT_JS)
    assert heat["x"] == list(range(HISTORY + 5)) and heat["rows"] == EXPERTS
    page.wait_for_function("() => document.getElementById('data-stage').textContent.startsWith('midtrain')",
                           timeout=30_000)
    show("#chart-train-loss")  # scrolled back into view, it draws what came while it was off screen
    wait_trace(page, "chart-train-loss", f"x.includes({HISTORY + 4})")
    assert len(page.evaluate(trace_js("chart-train-loss"))) == HISTORY + 5 - 1  # the NaN step: a marker, no point
    assert api_calls == []  # pushed over the WebSocket, not polled

    if os.environ.get("OBS_SCREENSHOT_DIR"):  # for a look: OBS_SCREENSHOT_DIR=/tmp/shots pytest ...
        page.screenshot(path=os.path.join(os.environ["OBS_SCREENSHOT_DIR"], "moe-dashboard.png"), full_page=True)

    # Another layer: its history comes through the API, its cells are its own.
    page.select_option("#router-layer", "2")
    page.wait_for_function(f"() => {{ const h = ({HEAT_JS})(); return h && h.layer === '2' && "
                           f"h.z0[0] === {_load(2, 0, 0)} && h.cols === {HISTORY + 5}; }}", timeout=30_000)
    assert errors == []
    servers.stop_ingest()

    # The heatmap follows the dashboard's zoom: only the window's columns, read from the API; back out, the run.
    page.evaluate("() => Obs.zoomTo(10, 19)")
    page.wait_for_function(f"() => {{ const h = ({HEAT_JS})(); return h && h.x[0] === 10 && h.cols === 10; }}",
                           timeout=30_000)
    heat = page.evaluate(HEAT_JS)
    # layer 2, picked above
    assert heat["x"] == list(range(10, 20)) and heat["z0"] == [_load(2, e, 10) for e in range(EXPERTS)]
    assert page.evaluate("() => document.getElementById('router-heatmap').layout.xaxis.range") == [9.5, 19.5]
    page.evaluate("() => Obs.zoomTo(null)")
    page.wait_for_function(f"() => {{ const h = ({HEAT_JS})(); return h && h.cols === {HISTORY + 5}; }}",
                           timeout=30_000)
    assert not errors
