"""Compare runs in the browser: three runs (a resumed one with a rewind, a ladder rung, a W&B import) picked from
the run list and the run picker, a chart added from the metric picker, x in tokens, smoothing, log axes; the URL
then holds the view, and a reload shows the same traces with the same data (checked against the API); a zoom reads
each run's own window; at phone width nothing overflows and axe finds nothing serious, light or dark."""

import json
import urllib.parse

import pytest

from observatory import contract as c

from ..servers import page_errors
from .conftest import OVERFLOW_JS, apply, axe_violations, demo_messages, seed_series
from .test_a11y import SCROLL_TO_UNDRAWN, shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]
T = 1_767_225_600.0
RESUMED, RUNG, IMPORTED = "cmp-resumed", "cmp-rung", "cmp-imported"
LINES = """() => Object.fromEntries([...document.querySelectorAll('#charts figure.chart')].map((f) => {
  const d = f.querySelector('.plot'), lay = d.layout || {};
  return [f.dataset.metric, {xtype: lay.xaxis && lay.xaxis.type, ytype: lay.yaxis && lay.yaxis.type,
    xtitle: lay.xaxis && lay.xaxis.title.text, xrange: lay.xaxis && lay.xaxis.range || null,
    lines: (d.data || []).filter((t) => t.mode === 'lines').map((t) => ({name: t.name, opacity: t.opacity,
      color: t.line.color, x: Array.from(t.x), y: Array.from(t.y)}))}];
}))"""
CONTROLS = """() => ({x: document.querySelector('#x-mode button[aria-pressed=true]').value,
  smooth: document.getElementById('smooth').value, logx: document.getElementById('logx').getAttribute('aria-pressed'),
  logy: [...document.querySelectorAll('#charts .chart .tool.log[aria-pressed=true]')].map((b) =>
    b.closest('figure').dataset.metric),
  runs: [...document.querySelectorAll('#run-chips li')].map((li) => li.dataset.run)})"""
# The view equals `want` ({metric: [{name, x, y}]}: the raw and smoothed lines), to a relative 1e-9.
MATCHES = "(want) => { const got = (" + LINES + ")(); const close = (a, b) => a.length === b.length && " \
          "a.every((v, i) => Math.abs(v - b[i]) <= 1e-9 * Math.max(1, Math.abs(b[i]))); " \
          "return Object.keys(want).every((m) => got[m] && got[m].lines.length === want[m].length && want[m].every(" \
          "(w, i) => got[m].lines[i].name === w.name && close(got[m].lines[i].x, w.x) " \
          "&& close(got[m].lines[i].y, w.y))); }"


def rung_messages():
    """A finished ladder rung: 50 steps, 2048 tokens a step, two seconds a step."""
    msgs = [("run", {"t": T, "name": "ladder rung", "config": {}, "started_at": T}),
            ("state", {"t": T, "state": "training", "step": 0, "detail": ""})]
    for s in range(50):
        msgs.append(("metrics", {"t": T + 2 * s, "step": s, "values": {
            c.M_LOSS: 3.6 - 0.015 * s, c.M_GRAD_NORM: 0.8 + 0.01 * s, c.M_TOTAL_TOKENS: (s + 1) * 2048.0}}))
        if s % 10 == 9:
            msgs.append(("event", {"t": T + 2 * s, "step": s, "name": "checkpoint_saved", "payload": {}}))
    return msgs + [("state", {"t": T + 100, "state": "stopped", "step": 49, "detail": ""})]


@pytest.fixture
def runs(live_env):
    from webapp.transfer import wandb_import
    from webapp.runs.models import Run

    apply(RESUMED, demo_messages(RESUMED))  # dies at step 39, resumes from its step-35 checkpoint
    apply(RUNG, rung_messages())
    history = [{"_step": s, "_timestamp": T + s, "train/loss": 3.9 - 0.01 * s,
                "throughput/total_tokens": (s + 1) * 512.0} for s in range(80)]
    wandb_import.write(wandb_import.plan({"name": "wandb baseline", "config": {}, "path": "offline-run-x",
                                          "exit_code": 0, "skipped": [], "history": history}, IMPORTED))
    # a long series: a zoom must read each run's own window of it
    seed_series(Run.objects.get(pk=RUNG), "eval/long", [(s, float(s % 97)) for s in range(20_000)])


def ema(values, w):
    out, last = [], 0.0
    for n, v in enumerate(values, 1):
        last = last * w + (1 - w) * v
        out.append(last / (1 - w ** n))
    return out


def expected(web, order, labels, metric, smooth):
    """The lines a chart of `metric` in tokens mode must draw, from the API: raw lines, then the smoothed ones."""
    raw, smoothed = [], []
    for rid in order:
        q = urllib.parse.quote
        try:
            s = web.api(f"/api/runs/{rid}/metrics/{q(metric)}/?points=4000")
        except Exception:  # noqa: BLE001 (a 404: the run has no such series, and no line)
            continue
        tok = web.api(f"/api/runs/{rid}/metrics/{q(c.M_TOTAL_TOKENS)}/?points=4000")
        tokens = dict(zip(tok["steps"], tok["values"]))
        x = [tokens[st] for st in s["steps"]]
        raw.append({"name": labels[rid] + " (raw)", "x": x, "y": s["values"]})  # faint, off the legend
        smoothed.append({"name": labels[rid], "x": x, "y": ema(s["values"], smooth)})
    return raw + smoothed


def open_page(new_page, width=1400, height=900):
    page = new_page(viewport={"width": width, "height": height})
    errors = page_errors(page)
    return page, errors


def test_a_compare_view_built_in_the_page_survives_a_reload(runs, web, new_page):
    page, errors = open_page(new_page)
    page.goto(web.url + "/runs/")
    page.check(f"tr[data-run='{RESUMED}'] input[type=checkbox]")
    page.check(f"tr[data-run='{RUNG}'] input[type=checkbox]")
    page.click("#compare-selected")
    page.wait_for_function("() => document.querySelectorAll('#run-chips li').length === 2")
    assert "runs=" in page.url and "," in urllib.parse.unquote(page.url.split("runs=")[1])  # normalised: a,b
    page.fill("#run-search", "baseline")  # the run picker: search by name, imported runs say so
    page.wait_for_function(f"() => document.getElementById('run-picker').value === '{IMPORTED}'")
    assert "imported" in page.eval_on_selector("#run-picker", "s => s.options[s.selectedIndex].textContent")
    page.click("#run-add")
    page.wait_for_function("() => document.querySelectorAll('#run-chips li').length === 3")
    page.fill("#metric-search", "gradient norm")
    assert page.eval_on_selector("#metric-picker", "s => s.value") == c.M_GRAD_NORM
    page.click("#metric-add")
    page.click("#x-mode button[value=tokens]")
    page.eval_on_selector("#smooth", "el => { el.value = '0.6'; el.dispatchEvent(new Event('input')); }")
    page.click(f'.chart[data-metric="{c.M_LOSS}"] .tool.log')
    page.click("#logx")
    page.wait_for_function("() => location.search.includes('smooth=0.6')")

    controls = page.evaluate(CONTROLS)
    order = controls["runs"]
    assert sorted(order) == sorted([RESUMED, RUNG, IMPORTED]) and order[-1] == IMPORTED
    labels = {RESUMED: "demo", RUNG: "ladder rung", IMPORTED: "wandb baseline"}
    want = {m: expected(web, order, labels, m, 0.6) for m in (c.M_LOSS, c.M_GRAD_NORM)}
    assert len(want[c.M_LOSS]) == 6 and len(want[c.M_GRAD_NORM]) == 4  # the import has no gradient norm
    page.wait_for_function(MATCHES, arg=want, timeout=30_000)
    page.wait_for_function("() => location.search.includes('logx=1')")  # (the URL follows a moment later: view.js)
    before, url = page.evaluate(LINES), page.url
    assert controls == {"x": "tokens", "smooth": "0.6", "logx": "true", "logy": [c.M_LOSS], "runs": order}
    loss = before[c.M_LOSS]
    assert loss["xtype"] == "log" and loss["ytype"] == "log" and loss["xtitle"] == "tokens trained"
    assert before[c.M_GRAD_NORM]["ytype"] == "linear"
    assert all(line["opacity"] < 0.5 for line in loss["lines"][:3])  # raw lines faint behind the smoothed
    assert len({line["color"] for line in loss["lines"][:3]}) == 3  # one colour per run...
    assert [line["color"] for line in before[c.M_GRAD_NORM]["lines"][:2]] == [
        line["color"] for line in loss["lines"][:3] if line["name"] != "wandb baseline (raw)"]  # ...on every chart
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert query["runs"] == [",".join(order)] and query["chart"] == [c.M_LOSS, c.M_GRAD_NORM]
    assert query["x"] == ["tokens"] and query["log"] == [c.M_LOSS] and query["logx"] == ["1"]

    page.reload()
    page.wait_for_function(MATCHES, arg=want, timeout=30_000)
    assert page.evaluate(LINES) == before and page.evaluate(CONTROLS) == controls
    shot(page, "compare-1400.png")
    fresh, fresh_errors = open_page(new_page)  # a shared link: another browser, nothing remembered
    fresh.goto(url)
    fresh.wait_for_function(MATCHES, arg=want, timeout=30_000)
    assert fresh.evaluate(LINES) == before and fresh.evaluate(CONTROLS) == controls

    # wall time: seconds since each run's own start; the import has no timestamps and says so
    page.click("#x-mode button[value=time]")
    page.wait_for_function(f"() => (({LINES})())['{c.M_LOSS}'].lines.length === 4")
    page.wait_for_function("() => location.search.includes('x=time')")  # (the URL follows a moment later: view.js)
    assert "wandb baseline" in page.inner_text(f'.chart[data-metric="{c.M_LOSS}"] .note')
    assert errors == [] and fresh_errors == []


def test_a_zoom_reads_each_runs_own_window(runs, web, new_page):
    page, errors = open_page(new_page)
    page.goto(web.url + f"/compare/?runs={RUNG},{RESUMED}&chart=eval/long")
    drawn = "() => { const d = document.getElementById('chart-eval-long'); return d && d.data && " \
            "d.data.filter((t) => t.mode === 'lines').length === 1 ? d.data[0] : null; }"
    page.wait_for_function(drawn, timeout=30_000)
    coarse = page.evaluate(drawn)
    assert len(coarse["x"]) < 5000  # downsampled: min/max buckets over 20,000 steps
    assert "not in demo" in page.inner_text('.chart[data-metric="eval/long"] .note')
    page.fill("#range-from", "12000")
    page.fill("#range-to", "12300")
    page.click("#range-form button[type=submit]")
    page.wait_for_function(f"() => {{ const t = ({drawn})(); return t && t.x.filter((s) => s >= 12000 && "
                           "s <= 12300).length === 301; }", timeout=30_000)
    fine = page.evaluate(drawn)
    inside = [(x, y) for x, y in zip(fine["x"], fine["y"]) if 12000 <= x <= 12300]
    assert inside == [(s, float(s % 97)) for s in range(12000, 12301)]  # every raw step of the window
    page.wait_for_function("() => location.search.includes('from=12000') && location.search.includes('to=12300')")
    page.reload()  # the zoomed view comes back from the URL, window and all
    page.wait_for_function(f"() => {{ const t = ({drawn})(); return t && t.x.filter((s) => s >= 12000 && "
                           "s <= 12300).length === 301; }", timeout=30_000)
    assert page.eval_on_selector("#range-from", "e => e.value") == "12000"
    assert errors == []


def test_the_charts_zoom_out_tool_shows_the_whole_runs_again(runs, web, new_page):
    """A chart's ⤢ tool zooms the compare page out as it does the dashboard (it called the dashboard's global
    Obs.zoomTo, which the compare page has not: the button did nothing there)."""
    page, errors = open_page(new_page)
    page.goto(web.url + f"/compare/?runs={RUNG},{RESUMED}&chart={c.M_LOSS}&from=10&to=20")
    page.wait_for_function("() => { const d = document.getElementById('chart-train-loss'); "
                           "return !!(d && d.layout && d.layout.xaxis && d.layout.xaxis.range); }", timeout=30_000)
    page.hover("#chart-train-loss .u-over")
    page.click("#chart-train-loss .modebar button[aria-label='Zoom out to the whole run']")
    page.wait_for_function("() => !location.search.includes('from=')", timeout=10_000)
    assert page.eval_on_selector("#range-from", "e => e.value") == ""
    assert errors == []


def test_the_compare_page_fits_a_phone_and_passes_axe_light_and_dark(runs, web, new_page):
    page, errors = open_page(new_page, 390, 844)
    page.goto(web.url + f"/compare/?runs={RESUMED},{RUNG},{IMPORTED}&chart={c.M_LOSS}&chart={c.M_GRAD_NORM}"
                        "&smooth=0.5")
    page.wait_for_function(f"() => {SCROLL_TO_UNDRAWN} && "
                           "document.querySelectorAll('#charts .chart .plot .uplot').length >= 2 && "
                           "(document.getElementById('chart-train-loss').data || []).length >= 9")
    for theme in ("light", "dark"):
        if theme == "dark":
            page.click("#theme-toggle")
            page.wait_for_function("() => document.documentElement.dataset.theme === 'dark'")
        layout = page.evaluate(OVERFLOW_JS)
        assert layout["bad"] == [] and layout["scrollWidth"] <= 390, (theme, layout)
        assert axe_violations(page) == [], theme
        shot(page, f"compare-390-{theme}.png")
    assert errors == [], json.dumps(errors)
    page.goto(web.url + "/compare/?runs=cmp-rung,no-such-run")  # a stale link: the rest still compares
    page.wait_for_function("() => document.querySelectorAll('#run-chips li').length === 1")
    assert "no-such-run" in page.inner_text("#compare-status") and "no-such-run" not in page.url
    assert [e for e in errors if "404" not in e] == []  # (the browser logs the API's 404 itself)
